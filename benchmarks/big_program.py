"""A big program in the store and on a server: a captured CNN training step (tests/capture_programs.py), its realizes repeated to
10,000 kernels (tests/support.py's `scaled`, as a long training loop records them).

  store    the program's whole JSON (what the store kept before parts, as one value: SQLite holds at most 1 GB in one) against what
           it takes stored in pieces (explorer.store.pieces); its put and its read back, timed
  readers  a live server over it (`kernel-explorer serve`'s app in a subprocess): eleven readers at once, each on the first view of
           a different view of the program (tests/test_program.py's BIG_PROGRAM_PAGES), their latencies and the server's RSS.
           Targets: every page under 1 s, the server under 500 MiB

  python benchmarks/big_program.py [--kernels 10000]"""
from __future__ import annotations
import argparse, concurrent.futures, json, pathlib, shutil, sys, tempfile, time
import httpx

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "benchmarks")]
PAGE_S, RSS_MIB, BIG = 1.0, 500, "b1g0program00000"

def store_phase(db: pathlib.Path, kernels: int) -> None:
  from load import BIG as LOAD_BIG, big_program
  from support import scaled
  from explorer.store import Store
  big_program(db)  # the captured step, and a 1,000-kernel copy of it (load.py's phase 3)
  store = Store(db)
  step_id = next(r["id"] for r in store.recent(10) if r["id"] not in (LOAD_BIG, LOAD_BIG[:-1] + "1"))
  step = store.get_trace(step_id)
  big = scaled(step, kernels)
  whole = len(json.dumps(big, default=str))
  before = db.stat().st_size
  st = time.perf_counter()
  store.put_trace(BIG, big, store.get_rewrites(step_id))
  put = time.perf_counter() - st
  st = time.perf_counter()
  got = store.get_trace(BIG)
  read = time.perf_counter() - st
  assert got is not None and len(got["kernels"]) == len(big["kernels"])
  stored = db.stat().st_size - before
  print(f"store: {len(big['kernels']):,} kernels ({len(step['kernels'])} distinct): whole JSON {whole / 2**20:,.0f} MiB "
        f"({whole / len(big['kernels']) / 1024:.0f} KiB a kernel; SQLite holds at most 1,024 MiB in a value), stored in pieces "
        f"{stored / 2**20:,.1f} MiB ({stored / len(big['kernels']) / 1024:.1f} KiB a kernel); put {put:.2f} s, read back {read:.2f} s")

def readers_phase(db: pathlib.Path, tmp: pathlib.Path) -> bool:
  import psutil
  from load import free_port, start_server
  from test_program import BIG_PROGRAM_PAGES, model_line
  port = free_port()
  server = start_server(db, port, tmp / "server.log", background_workers=0)
  base, proc = f"http://127.0.0.1:{port}", psutil.Process(server.pid)
  try:
    httpx.get(f"{base}/", timeout=120)  # the templates every page shares, compiled
    rss0 = proc.memory_info().rss / 2**20
    site = f"capture_programs.py:{model_line('features')}"
    urls = [u.replace("big0program00000", BIG).format(site=site) for u in BIG_PROGRAM_PAGES]
    def first_view(url: str) -> tuple[str, float, int]:
      st = time.perf_counter()
      r = httpx.get(f"{base}{url}", headers={"accept": "text/html"}, timeout=300)
      return url, time.perf_counter() - st, r.status_code
    with concurrent.futures.ThreadPoolExecutor(len(urls)) as pool: got = list(pool.map(first_view, urls))
    rss1 = proc.memory_info().rss / 2**20
    ok = all(s == 200 for _, _, s in got) and max(t for _, t, _ in got) < PAGE_S and rss1 < RSS_MIB
    for url, took, status in got: print(f"  {url}: {status}, {took * 1e3:,.0f} ms {'met' if took < PAGE_S else 'NOT MET'}")
    print(f"readers: {len(urls)} first views at once, slowest {max(t for _, t, _ in got):.2f} s (target {PAGE_S:.0f} s); server RSS "
          f"{rss0:.0f} -> {rss1:.0f} MiB (target under {RSS_MIB})   {'met' if ok else 'NOT MET'}")
    return ok
  finally:
    server.terminate()
    server.wait(timeout=15)

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--kernels", type=int, default=10_000)
  args = ap.parse_args()
  tmp = pathlib.Path(tempfile.mkdtemp(prefix="ke-big-"))
  try:
    store_phase(tmp / "traces.sqlite3", args.kernels)
    return 0 if readers_phase(tmp / "traces.sqlite3", tmp) else 1
  finally: shutil.rmtree(tmp, ignore_errors=True)

if __name__ == "__main__": sys.exit(main())
