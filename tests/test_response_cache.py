"""The response cache: a stored trace's views are rendered once and served as bytes; a progress page is never kept; a note or a
delete drops the trace's entries, and a pair's measurement its built-in tour's."""
from __future__ import annotations
import re
import threading
import time
from conftest import wait_done
from fastapi.testclient import TestClient
from stored_traces import stored_pair
from support import app_over, copy_store

def test_a_stored_traces_views_are_served_from_memory(web_client, small_trace):
  cache = web_client.app.state.response_cache
  # a kernel page's first view starts its analysis and compile facts and is not kept while they are computed (it changes when they
  # are stored)
  host = web_client.get(f"/api/traces/{small_trace}/kernels/0").json()["host_target"]
  assert "no-store" in web_client.get(f"/t/{small_trace}/k/0").headers.get("cache-control", "") or _facts_stored(web_client, small_trace, host)
  deadline = time.monotonic() + 120
  for kind in ("analysis", "facts"):
    while web_client.get(f"/api/traces/{small_trace}/kernels/0/targets/{host}/{kind}").status_code == 202:
      assert time.monotonic() < deadline
      time.sleep(0.1)
  for url in (f"/t/{small_trace}", f"/t/{small_trace}/k/0", f"/api/traces/{small_trace}/kernels/0", f"/api/traces/{small_trace}/graphs/kernels.svg"):
    first = web_client.get(url)
    hits = cache.hits
    again = web_client.get(url)
    assert first.status_code == again.status_code == 200 and again.content == first.content and cache.hits == hits + 1, url
    assert again.headers["x-content-type-options"] == "nosniff"  # the safety headers are added outside the cache
  hits = cache.hits
  web_client.get(f"/api/traces/{small_trace}/status"), web_client.get(f"/api/traces/{small_trace}/annotations")
  assert cache.hits == hits  # dynamic views are never kept

def _facts_stored(client, trace_id: str, target: str) -> bool:
  return client.app.state.services.store.enrichments(trace_id, "facts").get((0, target)) is not None  # another test opened the page first

def test_a_note_drops_the_traces_entries(web_client, small_trace):
  cache = web_client.app.state.response_cache
  web_client.get(f"/t/{small_trace}")
  assert any(small_trace in ids for ids, _, _ in cache.entries.values())
  r = web_client.post(f"/api/traces/{small_trace}/annotations", json={"anchor_kind": "line", "anchor": "0:uops:1", "text": "cache test"})
  assert r.status_code == 201, r.text
  assert not any(small_trace in ids for ids, _, _ in cache.entries.values())
  web_client.delete(f"/api/traces/{small_trace}/annotations/{r.json()['id']}")

def test_a_tour_step_is_kept_until_a_note_on_it(web_client, small_trace):
  """A class opens the teacher's tour step at once: rendered once, served as bytes; its big-font page is its own entry; a note on the
  step drops it, and the step shows the note."""
  cache = web_client.app.state.response_cache
  url = f"/t/{small_trace}/tour?step=tensor"
  deadline = time.monotonic() + 120
  while 'id="preparing"' in (first := web_client.get(url)).text:  # its kernels' analyses, computed on first view (never kept)
    assert time.monotonic() < deadline and first.headers["cache-control"] == "no-store"
    time.sleep(0.2)
  def kept() -> list[str]: return [q for path, q, _ in cache.entries if path == f"/t/{small_trace}/tour"]  # other tests' steps may be kept too
  if "step=tensor" not in kept():  # what the first full view stored (its facts) made it stale
    first = web_client.get(url)
  assert kept().count("step=tensor") == 1
  hits, misses = cache.hits, cache.misses
  assert web_client.get(url).content == first.content and cache.hits == hits + 1
  big = web_client.get(url + "&big=1")
  step_link = re.compile(r'href="[^"]*/tour\?[^"]*big=1')  # its steps' links keep the mode
  assert cache.misses == misses + 1 and step_link.search(big.text) and not step_link.search(first.text)
  r = web_client.post(f"/api/traces/{small_trace}/annotations", json={"anchor_kind": "step", "anchor": "tensor", "text": "asked in class"})
  assert r.status_code == 201, r.text
  try: assert "asked in class" in web_client.get(url).text and cache.misses == misses + 2
  finally: web_client.delete(f"/api/traces/{small_trace}/annotations/{r.json()['id']}")

def kept_render(client, url: str, timeout_s: float = 120) -> bytes:
  """url's page once the cache keeps it: its first views prepare what it shows (never kept), and the first full one stores facts."""
  deadline = time.monotonic() + timeout_s
  while (r := client.get(url)).headers.get("cache-control") == "no-store" or client.get(url).content != r.content:
    assert time.monotonic() < deadline, r.text[:500]
    time.sleep(0.2)
  return r.content

def test_a_built_in_tours_steps_are_kept_until_the_pair_is_timed(tmp_path):
  """A class following the staged-vs-fused tour costs one render per step; the step that times the pair is never kept (its
  measurement's progress); once the pair is timed interleaved, the steps that quote it are rendered again."""
  db, staged, fused = stored_pair()
  copy_store(db, tmp_path / "pair.sqlite3")  # timed here: the run's shared pair stays untimed
  with TestClient(app_over(str(tmp_path / "pair.sqlite3"))) as client:
    cache = client.app.state.response_cache
    tour = f"/tours/fusion?a={staged}&b={fused}"
    steps = client.get(f"/api/tours/fusion?a={staged}&b={fused}").json()["steps"]
    compare = next(s["id"] for s in steps if s["view"] == "diff")
    step = f"{tour}&step={steps[0]['id']}"
    page = kept_render(client, step)
    hits = cache.hits
    assert client.get(step + "&_=1").content == page and cache.hits == hits + 1  # a parameter the page ignores: the same entry
    assert {ids for ids, _, _ in cache.entries.values()} == {(staged, fused)}
    for _ in range(2): assert client.get(f"{tour}&step={compare}").headers["cache-control"] == "no-store"
    assert not any(f"step={compare}" in q for _, q, _ in cache.entries)
    assert client.post(f"/api/diff/{staged}/{fused}/timing", params={"repeats": 3, "warmup": 1}).status_code == 202  # drops them
    kept_render(client, step)  # kept again while the pair is timed
    deadline = time.monotonic() + 240
    while client.get(f"/api/diff/{staged}/{fused}/timing").json()["status"] in ("queued", "running"):
      assert time.monotonic() < deadline
      time.sleep(0.3)
    assert client.get(f"/api/diff/{staged}/{fused}/timing").json()["status"] == "done"
    assert not cache.entries  # the measurement stored: the tour's steps quote it
    misses = cache.misses
    client.get(step)
    assert cache.misses == misses + 1

def test_a_progress_page_is_never_kept(tmp_path):
  release = threading.Event()
  def blocked(spec, variant, progress, timeout_s):
    release.wait(30)
    from tests.test_fuzz import stub_runner
    return stub_runner(spec, variant, progress, timeout_s)
  app = app_over(str(tmp_path / "p.sqlite3"), runner=blocked)
  with TestClient(app) as client:
    trace_id = client.post("/api/traces", json={"preset": "small"}).json()["id"]
    assert "progress" in client.get(f"/t/{trace_id}").text and "progress" in client.get(f"/t/{trace_id}").text
    release.set()
    assert wait_done(client, trace_id, 30)["status"] == "done"
    page = client.get(f"/t/{trace_id}").text
    assert 'id="progress"' not in page, "a progress page was served from the cache after the trace was stored"

def test_the_key_is_what_the_page_reads(web_client, small_trace):
  """?_=N (or any parameter a page ignores) cannot defeat the cache; a parameter the page reads makes its own entry; exports, the
  reproducer and a diff are kept like pages."""
  cache = web_client.app.state.response_cache
  for url in (f"/t/{small_trace}/rangeify", f"/t/{small_trace}/export.json", f"/api/traces/{small_trace}/repro.py",
              f"/api/traces/{small_trace}/kernels?limit=1"):
    sep = "&" if "?" in url else "?"
    assert web_client.get(f"{url}{sep}_=1").status_code == 200, url
    misses, hits = cache.misses, cache.hits
    for n in range(2, 6): assert web_client.get(f"{url}{sep}_={n}&utm={n}").status_code == 200
    assert cache.misses == misses and cache.hits == hits + 4, url
  misses = cache.misses
  assert web_client.get(f"/api/traces/{small_trace}/kernels?limit=2").status_code == 200 and cache.misses == misses + 1
  for _ in range(2): web_client.get(f"/diff/{small_trace}/{small_trace}")  # the first computes what it compares (stored into the trace)
  hits = cache.hits
  assert web_client.get(f"/diff/{small_trace}/{small_trace}?_=7").status_code == 200 and cache.hits == hits + 1
