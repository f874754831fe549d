"""Stored data cannot take a page down: rows planted in a real SQLite file as an older or damaged database holds them (a study result of
the wrong shape, states this version does not know, a label of megabytes) are read defensively, once, shown as damaged where they are
listed, and every page and status answers 200 (a trace file with a negative count: tests/test_hostile_files.py)."""
from __future__ import annotations
import sqlite3
import pytest
from fastapi.testclient import TestClient
from support import app_over, minimal_trace
from explorer.background import DONE, STUDY, TRACE
from explorer.store import Store

STUDY_REQUEST = {"kind": "constants", "presets": ["small"], "specs": [], "repeats": 5}

def planted_study(store: Store, study_id: str, result: object, request: dict | None = None) -> None:
  store.put_task(STUDY, study_id, "constants on small", request or STUDY_REQUEST, "gone-host:1:1")
  store.task_finished(STUDY, study_id, DONE, None, result)

@pytest.fixture
def damaged(tmp_path):
  db = tmp_path / "old.sqlite3"
  store = Store(db)
  store.put_trace("a1b2c3d4e5f60718", minimal_trace(), b"")
  planted_study(store, "s-list-of-strings", {"study": "constants", "cases": ["x"]})  # what the queue's result check used to let through
  planted_study(store, "s-not-a-list", {"cases": "not a list"})
  planted_study(store, "s-wrong-kind", {"study": "constants", "cases": []}, {"kind": "alchemy"})
  store.put_task(TRACE, "b1b2c3d4e5f60718", "x" * (5 << 20), {"preset": "small"}, "gone-host:1:1")  # a 5 MB label
  store.put_task(STUDY, "s-paused", "paused study", STUDY_REQUEST, "gone-host:1:1")
  with sqlite3.connect(db) as c:  # states no version of the explorer writes
    c.execute("UPDATE tasks SET status = 'paused' WHERE id IN ('b1b2c3d4e5f60718', 's-paused')")
    c.execute("INSERT INTO tasks (kind, id, status, label, request, owner, created) VALUES ('study', 's-bad-json', 'done', 'l', 'nope', 'o', 0)")
    c.execute("UPDATE tasks SET result = '{not json' WHERE id = 's-bad-json'")
  with TestClient(app_over(str(db))) as client: yield client

def test_the_library_and_the_studies_list_stay_up(damaged):
  for url in ("/traces", "/api/traces", "/studies", "/api/studies", "/", "/diff"):
    r = damaged.get(url)
    assert r.status_code == 200, (url, r.text[:300])
    assert len(r.content) < 1 << 20, url  # a 5 MB label is not served whole
  assert 'data-damaged' in damaged.get("/studies").text

@pytest.mark.parametrize("study_id, says", [("s-list-of-strings", "cases.0"), ("s-not-a-list", "study: Field required"), ("s-wrong-kind", "alchemy"),
                                            ("s-bad-json", "corrupt")])
def test_a_damaged_study_says_what_is_wrong(damaged, study_id, says):
  r = damaged.get(f"/api/studies/{study_id}")
  assert r.status_code == 200, r.text
  body = r.json()
  assert body["damaged"] and says in body["damaged"] and study_id in body["damaged"] and body["result"] is None and body["table"] is None
  page = damaged.get(f"/studies/{study_id}")
  assert page.status_code == 200 and "data-damaged" in page.text and "Traceback" not in page.text

def test_states_this_version_does_not_know_read_as_unknown(damaged):
  status = damaged.get("/api/traces/b1b2c3d4e5f60718/status")
  assert status.status_code == 200, status.text
  body = status.json()
  assert body["status"] == "unknown" and "'paused'" in body["error"] and len(body["label"]) <= 300
  study = damaged.get("/api/studies/s-paused")
  assert study.status_code == 200 and study.json()["status"] == "unknown" and "'paused'" in study.json()["error"]
  assert damaged.get("/t/b1b2c3d4e5f60718").status_code == 200
