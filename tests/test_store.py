"""explorer/store/: keys known before running, round trips, restarts, corrupt rows, the graph cache, threads."""
import importlib.metadata
import json
import os
import sqlite3
import threading
import pytest
from explorer.spec import PRESETS, Variant
from explorer.store import Store, StoreError, default_db_path, listing_fields, trace_key

def fake_trace(label: str = "1x3->16 32x32 k3 | direct opt=heuristic", status: str = "ok") -> dict:
  return {"spec": PRESETS["small"].to_dict(), "preset": "small", "variant": Variant().to_dict(), "label": label, "status": status,
          "env": {"device": "CPU"}, "failures": [], "kernels": [{"index": 0}], "totals": {"kernels": 1, "time_s": {"median": 1e-5}}}

def test_key_is_known_before_running_and_ignores_notes():
  spec = PRESETS["small"]
  k = trace_key(spec, Variant())
  assert len(k) == 16 and all(c in "0123456789abcdef" for c in k)
  assert trace_key(spec, Variant(notes=("a note",))) == k
  assert trace_key(spec, Variant(algo="winograd")) != k
  assert trace_key(spec, Variant(device="CUDA")) != k
  assert trace_key(spec, Variant(device="CUDA")) == trace_key(spec, Variant(device="CUDA", notes=("x",)))
  assert trace_key(PRESETS["wino8"], Variant()) != k

def test_default_device_key_follows_dev():
  """A process started with DEV=CUDA (`DEV=CUDA kernel-explorer serve`) keys a request that names no device as CUDA."""
  import subprocess
  import sys
  code = "from explorer.store import trace_key; from explorer.spec import PRESETS, Variant; print(trace_key(PRESETS['small'], Variant()))"
  def key_with(dev: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "DEV"} | ({"DEV": dev} if dev else {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, timeout=60).stdout.strip()
  assert key_with("CUDA") == trace_key(PRESETS["small"], Variant(device="CUDA")) != key_with(None)

def test_key_follows_the_installed_tinygrad(monkeypatch, tmp_path):
  """Metadata is read once while the distribution it came from is installed, and again after an upgrade replaced it."""
  from explorer.store import keys as store
  k = trace_key(PRESETS["small"], Variant())
  def no_reads(name: str) -> None: raise AssertionError("package metadata read again")
  monkeypatch.setattr(importlib.metadata, "distribution", no_reads)
  assert trace_key(PRESETS["small"], Variant()) == k
  old = tmp_path / "tinygrad-0.14.0.dist-info"
  old.mkdir()
  monkeypatch.setattr(store, "_installed", [(str(old), "0.14.0")])
  monkeypatch.setattr(importlib.metadata, "distribution", lambda name: type("Dist", (), {"version": "9.9.9", "_path": tmp_path / "new"})())
  assert trace_key(PRESETS["small"], Variant()) == k  # still installed
  old.rmdir()  # upgraded: the next id reads the new version
  assert trace_key(PRESETS["small"], Variant()) != k and store.tinygrad_version() == "9.9.9"

def test_an_id_does_not_follow_a_dev_set_later(monkeypatch):
  """tinygrad sets DEV in its process's environment once it picks a default device (a capture() in a notebook does): an id asked for
  after that is the id asked for before."""
  k = trace_key(PRESETS["small"], Variant())
  monkeypatch.setenv("DEV", "CPU")
  assert trace_key(PRESETS["small"], Variant()) == k

def test_round_trip_and_restart(tmp_path):
  path = tmp_path / "t.sqlite3"
  s = Store(path)
  s.put_trace("abc", fake_trace(), b"\x00blob")
  s.put_cached("abc", "tensor", "svg", "<svg/>")
  s.close()
  s2 = Store(path)  # a new process would do the same: it is a file
  assert s2.get_trace("abc")["label"].startswith("1x3->16")
  assert s2.get_rewrites("abc") == b"\x00blob"
  assert s2.get_cached("abc", "tensor", "svg") == "<svg/>"
  assert s2.has_trace("abc") and not s2.has_trace("nope")
  assert s2.get_trace("nope") is None and s2.get_rewrites("nope") is None

def test_wal_mode(tmp_path):
  s = Store(tmp_path / "t.sqlite3")
  assert s._conn().execute("PRAGMA journal_mode").fetchone()[0] == "wal"

def test_recent_lists_newest_first_with_summary(tmp_path):
  s = Store(tmp_path / "t.sqlite3")
  s.put_trace("one", fake_trace("first"), b"")
  s.put_trace("two", fake_trace("second", status="partial"), b"")
  s.put_trace("three", fake_trace("third", status="error"), b"")  # a trace with a failed stage, as an older explorer stored it
  rows = s.recent()
  assert [r["id"] for r in rows] == ["three", "two", "one"]
  assert rows[0]["status"] == rows[1]["status"] == "partial" and rows[2]["kernels"] == 1 and rows[2]["time_s"] == 1e-5
  assert len(s.recent(limit=1)) == 1
  assert listing_fields(fake_trace())["device"] == "CPU"

def test_corrupt_row_is_rejected_clearly(tmp_path):
  path = tmp_path / "t.sqlite3"
  s = Store(path)
  s.put_trace("bad", fake_trace(), b"")
  with sqlite3.connect(path) as c: c.execute("UPDATE traces SET trace = ? WHERE id = ?", ("{not json", "bad"))
  with pytest.raises(StoreError, match="stored trace bad is corrupt: its JSON does not parse"): s.get_trace("bad")
  with sqlite3.connect(path) as c: c.execute("UPDATE traces SET trace = ? WHERE id = ?", (json.dumps([1, 2]), "bad"))
  with pytest.raises(StoreError, match="not a Kernel Explorer trace"): s.get_trace("bad")
  s.put_cached("bad", "tensor", "view", "{oops")
  assert s.get_cached_json("bad", "tensor", "view") is None and s.get_cached("bad", "tensor", "view") is None  # dropped: laid out again

def test_delete_and_clear_cache(tmp_path):
  s = Store(tmp_path / "t.sqlite3")
  s.put_trace("a", fake_trace(), b"")
  s.put_cached("a", "tensor", "svg", "x"); s.put_cached("a", "ast/0", "view", {"n": 1})
  assert s.get_cached_json("a", "ast/0", "view") == {"n": 1}
  s.clear_cache("a")
  assert s.get_cached("a", "tensor", "svg") is None
  s.put_cached("a", "tensor", "svg", "x")
  s.delete_trace("a")
  assert not s.has_trace("a") and s.get_cached("a", "tensor", "svg") is None

def test_one_connection_per_thread(tmp_path):
  s = Store(tmp_path / "t.sqlite3")
  errors = []
  def work(i: int) -> None:
    try:
      for j in range(20):
        s.put_trace(f"t{i}-{j}", fake_trace(f"trace {i} {j}"), bytes([i, j]))
        assert s.get_rewrites(f"t{i}-{j}") == bytes([i, j])
    except Exception as e: errors.append(e)
  threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
  for t in threads: t.start()
  for t in threads: t.join()
  assert not errors and len(s.recent(limit=500)) == 80

def test_default_path_follows_xdg(monkeypatch, tmp_path):
  monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
  assert default_db_path() == tmp_path / "kernel-explorer" / "traces.sqlite3"
  monkeypatch.delenv("XDG_DATA_HOME")
  assert str(default_db_path()).endswith(".local/share/kernel-explorer/traces.sqlite3")

# ***** the library: search, pagination, facets; the diff cache *****

def variant_trace(i: int) -> dict:
  t = fake_trace(f"trace {i} | winograd 50%_done")
  t["variant"] = {**t["variant"], "algo": "winograd", "staging": "fused" if i % 3 == 0 else "staged", "opt": "beam:2" if i % 5 == 0 else "heuristic"}
  return t

def test_search_filters_and_pages(tmp_path):
  s = Store(tmp_path / "t.sqlite3")
  for i in range(12): s.put_trace(f"id{i:02d}", variant_trace(i), b"")
  rows, total = s.search(staging="fused", limit=2)
  assert total == 4 and [r["id"] for r in rows] == ["id09", "id06"] and rows[0]["staging"] == "fused" and rows[0]["opt"] == "heuristic"
  assert [r["id"] for r in s.search(staging="fused", limit=2, offset=2)[0]] == ["id03", "id00"]
  assert s.search(opt="beam")[1] == 3 and s.search(opt="beam:2", staging="fused")[1] == 1 and s.search(opt="beam:4")[1] == 0
  assert s.search(text="trace 1")[1] == 3 and s.search(text="id0")[1] == 10 and s.search(text="50%_d")[1] == 12 and s.search(text="0%x")[1] == 0
  assert s.search(preset="small", algo="winograd", device="CPU", status="ok")[1] == 12 and s.search(preset="custom")[1] == 0
  with pytest.raises(ValueError, match="unknown filter"): s.search(colour="red")
  f = s.facets()
  assert f["staging"] == ["fused", "staged"] and f["opt"] == ["beam:2", "heuristic"] and f["preset"] == ["small"]

def test_search_reads_older_rows_from_the_trace(tmp_path):
  path = tmp_path / "t.sqlite3"
  s = Store(path)
  s.put_trace("old", variant_trace(3), b"")
  with sqlite3.connect(path) as c: c.execute("UPDATE traces SET summary = ? WHERE id = 'old'", (json.dumps({"label": "x"}),))  # before these fields
  assert s.search(staging="fused")[1] == 1 and s.search(staging="staged")[1] == 0

def test_diff_cache_round_trip_restart_delete_and_corruption(tmp_path):
  path = tmp_path / "t.sqlite3"
  s = Store(path)
  for t in ("a", "b", "c"): s.put_trace(t, fake_trace(), b"")
  s.put_diff("a", "b", "diff:cuda", {"groups": [1, 2]}); s.put_diff("c", "a", "timing", {"compared": True})
  s.close()
  s2 = Store(path)
  assert s2.get_diff("a", "b", "diff:cuda") == {"groups": [1, 2]} and s2.get_diff("b", "a", "diff:cuda") is None
  assert s2.delete_trace("a") and not s2.delete_trace("a")
  assert s2.get_diff("a", "b", "diff:cuda") is None and s2.get_diff("c", "a", "timing") is None  # either side's deletion drops it
  s2.put_diff("b", "c", "numerics", {})
  with sqlite3.connect(path) as c: c.execute("UPDATE diff_cache SET body = '{oops' WHERE a = 'b'")
  assert s2.get_diff("b", "c", "numerics") is None  # a damaged row reads as none (dropped): the measurement is asked for again
  with sqlite3.connect(path) as c: assert c.execute("SELECT count(*) FROM diff_cache WHERE a = 'b'").fetchone()[0] == 0
  s2.put_diff("b", "c", "numerics", [1, 2])  # JSON, but not what any diff or measurement is
  assert s2.get_diff("b", "c", "numerics") is None

# ids of known variants, as the store has keyed them since they were first recorded (tinygrad 0.14.0, no DEV): a change to Variant's
# fields, defaults or knobs that re-keys them fails here instead of silently orphaning every stored trace
KNOWN_IDS = [
  ("PRESETS['small'], Variant()", "bf842d83f8db9160"),
  ("PRESETS['small'], Variant(algo='winograd', targets=('cuda', 'metal'))", "bea726df2d4eaa57"),
  ("PRESETS['wino8'], Variant(algo='winograd', wino_impl='explorer', staging='fused', consts='materialized', opt='beam:2', targets=('cuda',), "
   "repeats=3, warmup=0)", "2ac12918166c532e"),
  ("ConvSpec(2, 4, 8, 9, 9, 3, stride=2, groups=2, dtype='float16'), Variant(opt='none', time=False, fallback=True, cuda_arch='sm_80', "
   "targets=('ptx', 'wgsl'))", "e172f39c2b517622"),
  ("PRESETS['wino8'], Variant(rewrites=('sink-loads', 'peel:2'), device='CPU', metal_arch='Apple7')", "33a7468ad129fa55"),
]

def test_known_variants_keep_their_ids():
  import subprocess
  import sys
  code = ("import json; from explorer.store import trace_key; from explorer.spec import PRESETS, ConvSpec, Variant\n"
          f"print(json.dumps([{', '.join(f'trace_key({case})' for case, _ in KNOWN_IDS)}]))")
  env = {k: v for k, v in os.environ.items() if k != "DEV"}  # ids keyed with no DEV override
  got = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, timeout=60).stdout)
  assert got == [i for _, i in KNOWN_IDS]

OLD_JOB_TABLES = """
CREATE TABLE jobs (id TEXT PRIMARY KEY, status TEXT NOT NULL, label TEXT NOT NULL, request TEXT NOT NULL, owner TEXT NOT NULL, error TEXT,
  created REAL NOT NULL, started REAL, finished REAL);
CREATE TABLE studies (id TEXT PRIMARY KEY, kind TEXT NOT NULL, label TEXT NOT NULL, status TEXT NOT NULL, request TEXT NOT NULL,
  owner TEXT NOT NULL, result TEXT, error TEXT, created REAL NOT NULL, finished REAL);
"""

def test_a_file_with_the_old_job_and_study_tables_moves_them_into_tasks(tmp_path):
  """A store written before the one tasks table (version 0: jobs and studies apart) opens with both in it, once, old tables gone."""
  path = tmp_path / "old.sqlite3"
  with sqlite3.connect(path) as c:
    c.executescript(OLD_JOB_TABLES)
    c.execute("INSERT INTO jobs VALUES ('j1', 'error', 'a trace', '{\"preset\": \"small\"}', 'h:1:1', 'stage run failed', 1.0, 2.0, 3.0)")
    c.execute("INSERT INTO jobs VALUES ('j2', 'queued', 'queued', '{}', 'queue', NULL, 4.0, NULL, NULL)")
    c.execute("INSERT INTO studies VALUES ('s1', 'fusion', 'fusion: wino8', 'done', '{\"presets\": [\"wino8\"]}', 'h:1:1', "
              "'{\"cases\": [{\"rows\": [{\"trace_id\": \"t1\"}]}]}', NULL, 5.0, 6.0)")
  s = Store(path)
  job = s.get_task("trace", "j1")
  assert (job["status"], job["label"], job["request"], job["error"], job["started"], job["finished"]) == \
         ("error", "a trace", {"preset": "small"}, "stage run failed", 2.0, 3.0)
  assert [r["id"] for r in s.unfinished_tasks("trace", "queue")] == ["j2"]
  study = s.get_task("study", "s1", with_result=True)
  assert study["request"] == {"presets": ["wino8"], "kind": "fusion"} and study["status"] == "done" and s.study_traces() == {"t1": "s1"}
  assert s.get_task("study", "j1") is None and s.get_task("trace", "s1") is None
  tables = {n for (n,) in s._conn().execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
  assert "tasks" in tables and not {"jobs", "studies"} & tables and s._conn().execute("PRAGMA user_version").fetchone()[0] == 1
  s.close()
  assert Store(path).get_task("trace", "j1")["status"] == "error"  # opened again: nothing moved twice

def test_one_task_table_one_restart_rule(tmp_path):
  """Every kind of task keeps its rows apart by kind; unfinished ones of a gone owner are marked interrupted, saying why; those left on
  a job queue are taken back by a server that follows it (in the state its kind is accepted in)."""
  s = Store(tmp_path / "t.sqlite3")
  s.put_task("trace", "x", "a trace", {"preset": "small"}, "gone")
  s.put_task("study", "x", "a study", {"kind": "fusion"}, "gone", "running")
  s.put_task("enrichment", "e", "cuda target", {}, "alive")
  assert s.get_task("study", "x")["started"] is not None and s.get_task("trace", "x")["started"] is None
  assert s.interrupt_tasks("trace", lambda owner: owner == "gone", "stopped") == 1
  assert s.get_task("trace", "x")["status"] == "interrupted" and s.get_task("study", "x")["status"] == "running"
  assert s.reopen_tasks("trace", "gone", "stopped", "queued") == 1 and s.get_task("trace", "x")["error"] is None
  s.task_started("trace", "x")
  s.task_finished("trace", "x", "done")
  assert s.get_task("trace", "x")["status"] == "done" and s.unfinished_tasks("trace", "gone") == []
  s.put_trace("x", fake_trace(), b"blob")
  assert s.delete_trace("x") and s.get_task("trace", "x") is None and s.get_task("study", "x") is not None
