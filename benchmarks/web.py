"""Web app speed, server side (FastAPI's TestClient in this process, a real SQLite file, graph workers as in production):

  - time to the first byte of a cached trace page (/t/{id}) and of a cached graph SVG; target: under 50 ms
  - graph layout time (graphviz dot) of the largest preset's graphs: its tensor graph, every kernel AST and the biggest codegen
    pass graph (simplified to the node limit as the pages show it); target: under 1 s each

The `large` Winograd trace takes tens of seconds to generate on a 2-core machine; pass --db to keep it between runs.
"""
from __future__ import annotations
import argparse
import pathlib
import statistics
import sys
import tempfile
import time

PAGE_TARGET_S, LAYOUT_TARGET_S = 0.050, 1.0

def timed_get(client, url: str, n: int) -> list[float]:
  """Seconds until the response starts (stream: headers in, before the body is read), n times."""
  out = []
  for _ in range(n):
    st = time.perf_counter()
    with client.stream("GET", url) as r:
      assert r.status_code == 200, (url, r.status_code)
      out.append(time.perf_counter() - st)
      r.read()
  return out

def ms(xs: list[float]) -> str: return f"median {statistics.median(xs)*1e3:7.2f} ms   p95 {sorted(xs)[int(0.95*(len(xs)-1))]*1e3:7.2f} ms"

def trace_of(client, preset: str, algo: str) -> str:
  r = client.post("/api/traces", json={"preset": preset, "variant": {"algo": algo}})
  assert r.status_code in (200, 202), r.text
  trace_id, st = r.json()["id"], time.perf_counter()
  while (s := client.get(f"/api/traces/{trace_id}/status").json())["status"] not in ("done", "error"): time.sleep(0.5)
  assert s["status"] == "done", s
  print(f"trace {preset}/{algo}: {trace_id} ({'stored' if r.status_code == 200 else f'traced in {time.perf_counter() - st:.1f} s'})")
  return trace_id

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--db", help="SQLite file to use (default: a temporary one)")
  ap.add_argument("--preset", default="large", help="the big preset whose graphs are laid out (default: large)")
  ap.add_argument("--algo", default="winograd")
  ap.add_argument("--repeats", type=int, default=40)
  a = ap.parse_args()
  from fastapi.testclient import TestClient
  from explorer.present import graphs
  from explorer.settings import Settings
  from explorer.web.app import create_app
  db = a.db or str(pathlib.Path(tempfile.mkdtemp(prefix="ke-bench-")) / "traces.sqlite3")
  app = create_app(db, settings=Settings.load(env={}))
  ok = True
  with TestClient(app) as client:
    small, big = trace_of(client, "small", "winograd"), trace_of(client, a.preset, a.algo)
    print("\n== cached responses (time to first byte, server side)")
    for trace_id, name in ((small, "small"), (big, a.preset)):
      for url in (f"/t/{trace_id}", f"/t/{trace_id}/bufferize", f"/t/{trace_id}/k/0", f"/api/traces/{trace_id}/graphs/tensor.svg",
                  f"/api/traces/{trace_id}/graphs/ast/0.svg"):
        client.get(url)  # warm: the graph is expanded and laid out once, then served from the store
        xs = timed_get(client, url, a.repeats)
        verdict = "ok" if statistics.median(xs) < PAGE_TARGET_S else "SLOW"
        ok &= verdict == "ok"
        print(f"  {name:>7} {url.replace(trace_id, '{id}'):<38} {ms(xs)}   {verdict}")
      cold = []
      for _ in range(5):
        app.state.services.traces.forget(trace_id)
        cold += timed_get(client, f"/t/{trace_id}", 1)
      print(f"  {name:>7} /t/{{id}} with its trace JSON parsed again from SQLite   {ms(cold)}")
    print(f"\n== graph layout of {a.preset}/{a.algo} (graphviz dot, node limit {graphs.MAX_NODES})")
    trace = client.get(f"/api/traces/{big}/raw").json()
    app.state.services.store.clear_cache(big)  # expand every graph afresh (the worker keeps the rewrite blob loaded)
    refs = ["tensor", "kernels"] + [f"ast/{k['index']}" for k in trace["kernels"]]
    for k in trace["kernels"]:  # the biggest codegen graph: the program at the end of codegen
      if k["passes"]: refs.append(f"codegen/{k['index']}/{len(k['passes']) - 1}/before")
    worst = 0.0
    for ref in refs:
      st = time.perf_counter()
      view = client.get(f"/api/traces/{big}/graphs/{ref}").json()
      expand_s = time.perf_counter() - st
      dot = graphs.kernel_graph_dot(view, "/t/x") if ref == "kernels" else graphs.uop_dot(view, set(view["highlight"]), view["title"])
      st = time.perf_counter()
      graphs.layout_svg(dot)
      layout_s = time.perf_counter() - st
      worst = max(worst, layout_s)
      shown = f"{view['shown_nodes']}/{view['total_nodes']}"
      print(f"  {ref:<22} {shown:>10} nodes   expand+simplify {expand_s*1e3:7.1f} ms   layout {layout_s*1e3:7.1f} ms")
    verdict = "ok" if worst < LAYOUT_TARGET_S else "SLOW"
    ok &= verdict == "ok"
    print(f"  slowest layout: {worst*1e3:.1f} ms (target {LAYOUT_TARGET_S*1e3:.0f} ms)   {verdict}")
  print(f"\n{'all targets met' if ok else 'some targets missed'} (db: {db})")
  return 0 if ok else 1

if __name__ == "__main__": sys.exit(main())
