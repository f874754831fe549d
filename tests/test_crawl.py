"""A reader crawls what the pages link to: every address reachable from a captured program's overview, and from a convolution's, 600 at
most each, followed as one client would (tests/crawl.py: breadth-first, each asked once, no retry), answers 200, while the server
computes what those pages start (targets, analyses, compile facts, diffs, tours) and its neighbours land in the background; and the
server's log holds no traceback. Before, one client reading a program's pages was refused 429 for its share, and the overview at a
target whose records were landing answered 500 (KeyError)."""
from __future__ import annotations
import pathlib
import subprocess
import sys
import time
import httpx
import pytest
from conftest import running_server, trace_on
from crawl import crawl

HERE = pathlib.Path(__file__).parent
CONV = {"spec": {"batch": 1, "cin": 2, "cout": 2, "height": 8, "width": 8, "kernel": 3},
        "variant": {"algo": "winograd", "targets": ["cuda"], "repeats": 2}}

@pytest.fixture(scope="module")
def served(tmp_path_factory):
  """A server (background enrichment on, as `serve` runs by default) over a store with tests/capture_programs.py's CNN training step
  captured, and a convolution traced through it: (base, program id, convolution id, the server's log)."""
  tmp = tmp_path_factory.mktemp("crawl")
  db = tmp / "c.sqlite3"
  subprocess.run([sys.executable, str(HERE / "capture_programs.py"), "program", "cnn", str(db)], check=True, capture_output=True, timeout=300,
                 cwd=HERE.parent)
  with running_server(db, tmp, background_workers=1) as base:
    (program,) = [t["id"] for t in httpx.get(f"{base}/api/traces", timeout=30).json()]
    yield base, program, trace_on(base, CONV), tmp / "server.log"

@pytest.mark.parametrize("which", ["program", "convolution"])
def test_every_address_a_reader_can_reach_answers_200_at_once(served, which):
  base, program, conv, log = served
  start = program if which == "program" else conv
  if which == "program": tour_on_cuda_says_what_it_waits_for(base, program)
  st = time.perf_counter()
  got = crawl(base, f"/t/{start}", limit=600)
  took = time.perf_counter() - st
  print(f"crawl from {which}: {len(got.answered)} addresses in {took:.1f} s; slowest: "
        + ", ".join(f"{url} {s:.1f} s" for s, url in got.slowest[:5]))
  assert len(got.answered) == 600, f"only {len(got.answered)} addresses reachable: the crawl should cover 600"
  assert not got.failures(), got.failures()[:20]
  text = log.read_text()
  assert "Traceback" not in text, text[text.index("Traceback") - 2000:][:5000]

def tour_on_cuda_says_what_it_waits_for(base: str, program: str) -> None:
  """The program's tour on CUDA (its heaviest kernels' CUDA records and analyses are computed first: seconds) answers at once with
  what it waits for, and comes back (its meta refresh) until the tour itself opens, telling CUDA's kernels."""
  url = f"{base}/t/{program}/tour?target=cuda"
  st = time.perf_counter()
  first = httpx.get(url, timeout=60)
  took = time.perf_counter() - st
  assert first.status_code == 200 and 'id="preparing"' in first.text and "CUDA records of" in first.text, first.text[-3000:]
  assert took < 5 and 'http-equiv="refresh"' in first.text and first.headers["cache-control"] == "no-store", took
  deadline = time.monotonic() + 180
  while 'id="preparing"' in (page := httpx.get(url, timeout=60)).text:
    assert time.monotonic() < deadline, page.text[-2000:]
    time.sleep(1)
  raw = httpx.get(f"{base}/api/traces/{program}/raw", timeout=60).json()
  assert page.status_code == 200 and any(k["targets"].get("cuda", {}).get("name", "?") in page.text for k in raw["kernels"])
