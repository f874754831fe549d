"""The Python API (explorer.api) on a real tiny trace: its id is the store's key, it saves, stores, diffs, renders inline, and opens
its page on a local server that it starts when none answers."""
from __future__ import annotations
import html
import json
import time
import httpx
import pytest
from conftest import free_port
from explorer import api
from explorer.spec import ConvSpec, SpecError
from explorer.store import Store

TINY = ConvSpec(1, 2, 2, 8, 8, 3)

@pytest.fixture(scope="module")
def wino():
  return api.trace(TINY, algo="winograd", wino_impl="explorer", targets=("cuda",), warmup=1, repeats=3)

def test_a_trace_is_the_same_record_the_cli_writes(wino, tmp_path):
  assert wino.ok and len(wino.kernels) == 4 and "cuda" in wino.kernels[0]["sources"]
  path = wino.save(tmp_path / "t.json")
  assert json.loads(path.read_text())["label"] == wino.data["label"]
  db = tmp_path / "s.sqlite3"
  assert wino.store(db) == wino.id and Store(db).get_trace(wino.id)["kernels"][0]["name"] == wino.kernels[0]["name"]

def test_the_inline_view_has_facts_kernels_graph_and_sources(wino):
  view = wino._repr_html_()
  assert 'class="ke-nb"' in view[:400]
  assert all(k["name"] in view for k in wino.kernels) and "<svg" in view and 'class="hl"' in view and "<script" not in view

def test_diff_of_two_traces(wino):
  direct = api.trace(TINY, algo="direct", targets=("cuda",), time=False)
  d = wino.diff(direct)
  assert tuple(d.data["variant_changes"]["algo"]) == ("winograd", "direct")
  assert "matched by role" in str(d) and html.escape(str(d)) in d._repr_html_()

def test_bad_input_is_one_clear_error():
  with pytest.raises(SpecError, match="unknown preset 'nope'"): api.trace("nope")
  with pytest.raises(SpecError): api.trace(TINY, algo="winograd", wino_impl="explorer", tile="F(2,5)")

def test_open_starts_a_server_when_none_answers_and_says_so(wino, tmp_path, capsys, monkeypatch):
  monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # the started servers' pid files
  port, db, other_db = free_port(), tmp_path / "open.sqlite3", tmp_path / "other.sqlite3"
  api.ensure_server(port, other_db)  # a server of another store, without this trace, on the port
  started: list[int] = [port]
  try:
    assert f"serving {other_db} on http://127.0.0.1:{port}" in capsys.readouterr().err
    url = wino.open(db=db, port=port, browser=False)  # that server does not show this trace's store: one of its own, on a free port
    started.append(int(url.split(":")[2].split("/")[0]))
    assert started[1] != port and url == f"http://127.0.0.1:{started[1]}/t/{wino.id}" and httpx.get(url, timeout=60).status_code == 200
    said = capsys.readouterr().err
    assert f"serving {db} on http://127.0.0.1:{started[1]}" in said and f"explorer.api.stop_server({started[1]})" in said
    assert wino.open(db=db, port=started[1], browser=False) == url and capsys.readouterr().err == ""  # reused, not started twice
  finally:
    assert all(api.stop_server(p) for p in started)
  wait_for_gone = time.monotonic() + 10
  while any(httpx_answers(f"http://127.0.0.1:{p}") for p in started):
    assert time.monotonic() < wait_for_gone, "a server outlived stop_server"
    time.sleep(0.2)
  assert not api.stop_server(port)  # stopped already

def test_open_shows_the_page_on_the_server_already_serving_its_store_whatever_its_port(wino, tmp_path, capsys, monkeypatch):
  """`kernel-explorer serve --port P` over a store, then t.open() (port 8000 by default) of a trace stored there: the running server's
  page, nothing started on 8000; once it stops (its record of what it serves gone with it), open starts one."""
  from conftest import running_server
  from explorer.web.serving import served_record
  monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # where servers say what they serve (the server below inherits it)
  db, other_port = tmp_path / "served.sqlite3", free_port()
  wino.store(db)
  with running_server(db, tmp_path) as base:
    assert served_record(db).exists()
    assert wino.open(db=db, port=other_port, browser=False) == f"{base}/t/{wino.id}" and capsys.readouterr().err == ""
    assert not httpx_answers(f"http://127.0.0.1:{other_port}")  # nothing started there
  assert not served_record(db).exists()
  url = wino.open(db=db, port=other_port, browser=False)
  try: assert url == f"http://127.0.0.1:{other_port}/t/{wino.id}" and f"serving {db} on" in capsys.readouterr().err
  finally: assert api.stop_server(other_port)

def httpx_answers(base: str) -> bool:
  try: return httpx.get(f"{base}/api/health", timeout=2).status_code == 200
  except httpx.HTTPError: return False

def test_the_api_is_importable_from_the_package_without_loading_tinygrad_until_used():
  import subprocess
  import sys
  code = ("import sys, explorer; assert 'tinygrad' not in sys.modules and 'explorer.api' not in sys.modules\n"
          "from explorer import capture, trace, Trace; from explorer import api\n"
          "assert (capture, trace, Trace) == (api.capture, api.trace, api.Trace)\n"
          "try: from explorer import nothing\nexcept ImportError as e: print(e)")
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr
  assert "cannot import name 'nothing'" in r.stdout
