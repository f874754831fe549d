"""Load on a real server (`kernel-explorer serve` in a subprocess, loopback only, a fresh database), bounded in clients and time:

  phase 1  N concurrent clients (default 50) for S seconds (default 30) on cached trace pages and APIs, while a few cold traces
           are started meanwhile: requests/s, p50/p99 latency, errors (target: zero), and /api/health's latency, probed every
           100 ms by a separate client, while the cold traces run
  phase 2  the cold traces alone (no page load): /api/health's p99 while workers trace (target: under 100 ms)

Everything runs on this machine (server, workers and clients share its cores), so figures are for the whole box under load.
"""
from __future__ import annotations
import argparse, asyncio, os, pathlib, random, shutil, socket, subprocess, sys, tempfile, time
import httpx

REPO = pathlib.Path(__file__).resolve().parent.parent
HEALTH_TARGET_S = 0.100
WARM = {"preset": "small", "variant": {"algo": "winograd", "targets": ["cuda", "metal"]}}
COLD = [{"preset": "wino8", "variant": {"algo": "winograd", "targets": ["cuda"], "repeats": 5}},
        {"preset": "medium", "variant": {"algo": "direct", "targets": ["cuda"], "repeats": 5}},
        {"preset": "small", "variant": {"algo": "winograd", "wino_impl": "explorer", "staging": "fused", "targets": ["cuda"], "repeats": 5}},
        {"preset": "wino8", "variant": {"algo": "winograd", "wino_impl": "explorer", "consts": "materialized", "targets": ["cuda"], "repeats": 5}},
        {"preset": "small", "variant": {"algo": "direct", "opt": "none", "targets": ["cuda"], "repeats": 5}},
        {"preset": "wino16", "variant": {"algo": "winograd", "targets": ["cuda"], "repeats": 5}}]

def pct(xs: list[float], q: float) -> float:
  xs = sorted(xs)
  return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")

def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]

def start_server(db: pathlib.Path, port: int, log: pathlib.Path) -> subprocess.Popen:
  env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEL_EXPLORER_")}
  code = f"from explorer.web import serve; serve('127.0.0.1', {port}, {str(db)!r})"
  proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
  deadline = time.monotonic() + 60
  while True:
    try:
      if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200: return proc
    except httpx.HTTPError: pass
    if proc.poll() is not None or time.monotonic() > deadline: raise RuntimeError(f"the server did not start:\n{log.read_text()}")
    time.sleep(0.2)

async def trace(client: httpx.AsyncClient, body: dict, timeout_s: float = 600) -> tuple[str, float, str]:
  st = time.monotonic()
  r = await client.post("/api/traces", json=body)
  assert r.status_code in (200, 202), r.text
  trace_id = r.json()["id"]
  while (s := (await client.get(f"/api/traces/{trace_id}/status")).json())["status"] not in ("done", "error"):
    assert time.monotonic() - st < timeout_s, f"trace {trace_id} did not finish"
    await asyncio.sleep(0.5)
  return trace_id, time.monotonic() - st, s["status"]

def cached_urls(trace_id: str) -> list[str]:
  t, a = f"/t/{trace_id}", f"/api/traces/{trace_id}"
  return ["/", t, f"{t}/bufferize", f"{t}/k/0", f"{t}/k/1?code=metal", f"{t}/rangeify", f"{t}/graph/tensor", a, f"{a}/kernels/0", f"{a}/bufferize",
          f"{a}/rangeify", f"{a}/graphs/kernels", f"{a}/graphs/ast/0", f"{a}/graphs/ast/0.svg", f"{a}/graphs/tensor.svg", "/api/traces",
          "/api/presets", "/api/health"]

class Recorder:
  def __init__(self) -> None:
    self.latencies: list[float] = []
    self.by_url: dict[str, list[float]] = {}
    self.errors: dict[str, int] = {}

  def error(self, what: str) -> None: self.errors[what] = self.errors.get(what, 0) + 1

async def client_loop(client: httpx.AsyncClient, urls: list[str], until: float, rec: Recorder, seed: int) -> None:
  rng = random.Random(seed)
  while time.monotonic() < until:
    url = rng.choice(urls)
    st = time.monotonic()
    try:
      r = await client.get(url)
      await r.aread()
      if r.status_code != 200: rec.error(f"{r.status_code} {url}")
    except httpx.HTTPError as e: rec.error(f"{type(e).__name__} {e!s:.80} {url}")
    rec.latencies.append(took := time.monotonic() - st)
    rec.by_url.setdefault(url, []).append(took)

async def health_probe(base: str, until: float, busy: asyncio.Event, out: list[tuple[float, bool]]) -> None:
  """Its own connection, one request every 100 ms; each sample says whether cold traces were running."""
  async with httpx.AsyncClient(base_url=base, timeout=30) as client:
    while time.monotonic() < until:
      st = time.monotonic()
      r = await client.get("/api/health")
      out.append((time.monotonic() - st, busy.is_set() and r.status_code == 200))
      await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - st)))

async def run_cold(base: str, bodies: list[dict], delay_s: float, busy: asyncio.Event, done: list) -> None:
  await asyncio.sleep(delay_s)
  busy.set()
  async with httpx.AsyncClient(base_url=base, timeout=60) as client:
    done.extend(await asyncio.gather(*(trace(client, b) for b in bodies)))
  busy.clear()

def ms(x: float) -> str: return f"{x * 1e3:.1f}"

async def phase1(base: str, urls: list[str], clients: int, seconds: float, cold: list[dict]) -> dict:
  rec, health, busy, done = Recorder(), [], asyncio.Event(), []
  until = time.monotonic() + seconds
  limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
  async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
    st = time.monotonic()
    await asyncio.gather(*(client_loop(client, urls, until, rec, i) for i in range(clients)), health_probe(base, until, busy, health),
                         run_cold(base, cold, 2.0, busy, done))
    wall = time.monotonic() - st
  busy_health = [x for x, b in health if b]
  slowest = sorted(((pct(v, 0.99), u) for u, v in rec.by_url.items()), reverse=True)[:4]
  return {"slowest": slowest, "requests": len(rec.latencies), "wall_s": wall, "rps": len(rec.latencies) / seconds, "p50": pct(rec.latencies, 0.5),
          "p99": pct(rec.latencies, 0.99), "errors": rec.errors, "health_busy_p50": pct(busy_health, 0.5), "health_busy_p99": pct(busy_health, 0.99),
          "health_samples": len(busy_health), "cold": done}

async def phase2(base: str, cold: list[dict]) -> dict:
  health, busy, done = [], asyncio.Event(), []
  task = asyncio.create_task(run_cold(base, cold, 0.0, busy, done))
  await asyncio.sleep(0.05)
  async def probe_while_busy() -> None:
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
      while not task.done():
        st = time.monotonic()
        r = await client.get("/api/health")
        if busy.is_set() and r.status_code == 200: health.append(time.monotonic() - st)
        await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - st)))
  await asyncio.gather(task, probe_while_busy())
  return {"health_p50": pct(health, 0.5), "health_p99": pct(health, 0.99), "health_max": max(health), "samples": len(health), "cold": done}

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--clients", type=int, default=50)
  ap.add_argument("--seconds", type=float, default=30.0)
  ap.add_argument("--cold", type=int, default=3, help="cold traces started in each phase (at most 3)")
  a = ap.parse_args()
  if not 1 <= a.clients <= 200 or not 1 <= a.seconds <= 120 or not 0 <= a.cold <= 3: ap.error("bounded: 1-200 clients, 1-120 s, 0-3 cold traces")
  tmp = pathlib.Path(tempfile.mkdtemp(prefix="ke-load-"))
  port = free_port()
  server = start_server(tmp / "traces.sqlite3", port, tmp / "server.log")
  base = f"http://127.0.0.1:{port}"
  try:
    async def warm() -> list[str]:
      async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        trace_id, secs, status = await trace(client, WARM)
        print(f"warm trace {trace_id}: {status} in {secs:.1f} s")
        urls = cached_urls(trace_id)
        for url in urls:  # expand and lay out once: the load is on cached pages and graphs
          r = await client.get(url)
          assert r.status_code == 200, (url, r.status_code)
        return urls
    urls = asyncio.run(warm())
    print(f"\nphase 1: {a.clients} clients for {a.seconds:.0f} s over {len(urls)} cached URLs, {a.cold} cold traces started at 2 s")
    p1 = asyncio.run(phase1(base, urls, a.clients, a.seconds, COLD[:a.cold]))
    print(f"  {p1['requests']} requests, {p1['rps']:.0f} req/s, p50 {ms(p1['p50'])} ms, p99 {ms(p1['p99'])} ms, errors {sum(p1['errors'].values())}")
    for what, n in sorted(p1["errors"].items()): print(f"    {n} x {what}")
    print("  slowest URLs (p99): " + ", ".join(f"{u} {ms(t)} ms" for t, u in p1["slowest"]))
    print(f"  /api/health while cold traces ran: p50 {ms(p1['health_busy_p50'])} ms, p99 {ms(p1['health_busy_p99'])} ms "
          f"({p1['health_samples']} samples)")
    print("  cold traces: " + ", ".join(f"{s} in {t:.1f} s" for _, t, s in p1["cold"]))
    if not a.cold: return 0 if not p1["errors"] else 1
    print(f"\nphase 2: {a.cold} cold traces, no page load")
    p2 = asyncio.run(phase2(base, COLD[3:3 + a.cold]))
    verdict = "ok" if p2["health_p99"] < HEALTH_TARGET_S else "OVER TARGET"
    print(f"  /api/health while they ran: p50 {ms(p2['health_p50'])} ms, p99 {ms(p2['health_p99'])} ms, max {ms(p2['health_max'])} ms "
          f"({p2['samples']} samples)   {verdict}")
    print("  cold traces: " + ", ".join(f"{s} in {t:.1f} s" for _, t, s in p2["cold"]))
    ok = not p1["errors"] and all(s == "done" for _, _, s in p1["cold"] + p2["cold"]) and p2["health_p99"] < HEALTH_TARGET_S
    return 0 if ok else 1
  finally:
    server.terminate()
    try: server.wait(timeout=15)
    except subprocess.TimeoutExpired: server.kill()
    shutil.rmtree(tmp, ignore_errors=True)

if __name__ == "__main__": sys.exit(main())
