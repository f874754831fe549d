"""A live class at scale, on loopback (a real `kernel-explorer serve` in a subprocess): N students' event streams (asyncio httpx
clients in this process) follow a presenter through M moves, while a probe asks /api/health every 50 ms. Printed against the
targets: each move reaches every student within 1 s at p99 for 100 students, 2 s for 300; /api/health answers under 100 ms meanwhile.

  python benchmarks/class_fanout.py [--students 100,300] [--moves 20]"""
from __future__ import annotations
import argparse
import asyncio
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
TARGETS_S = {100: 1.0, 300: 2.0}  # p99 of a move's arrival, by class size
HEALTH_TARGET_S = 0.100

def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return int(s.getsockname()[1])

def serve(db: pathlib.Path, port: int, students: int) -> subprocess.Popen[bytes]:
  env = {**os.environ, "KERNEL_EXPLORER_CLASS_MAX_STUDENTS": str(students)}
  cmd = [sys.executable, "-m", "explorer.cli", "serve", "--port", str(port), "--db", str(db)]
  return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

async def student(client, base: str, cid: str, n: int, moves: int, arrived: dict[int, list[float]], joined: list[int]) -> None:
  """One student's stream: the class's first state counts it joined, each later one's arrival is kept by its move's seq."""
  async with client.stream("GET", f"{base}/api/classes/{cid}/events", params={"student": f"student-{n:06d}"}, timeout=None) as r:
    assert r.status_code == 200, (r.status_code, await r.aread())
    event = None
    async for line in r.aiter_lines():
      if line.startswith("event:"): event = line.split(":", 1)[1].strip()
      elif line.startswith("data:") and event == "state":
        seq = json.loads(line.split(":", 1)[1])["seq"]
        if seq == 0: joined.append(n)
        else: arrived.setdefault(seq, []).append(time.perf_counter())
        if seq == moves: return

async def health_probe(client, base: str, stop: asyncio.Event, out: list[float]) -> None:
  while not stop.is_set():
    st = time.perf_counter()
    r = await client.get(f"{base}/api/health")
    assert r.status_code == 200
    out.append(time.perf_counter() - st)
    await asyncio.sleep(0.05)

async def one_class(base: str, students: int, moves: int) -> tuple[list[float], list[float]]:
  import httpx
  limits = httpx.Limits(max_connections=students + 10, max_keepalive_connections=students + 10)
  async with httpx.AsyncClient(limits=limits, timeout=30) as client:
    c = (await client.post(f"{base}/api/classes", json={"url": "/"})).json()
    cid, key = c["id"], c["presenter_key"]
    arrived: dict[int, list[float]] = {}
    joined: list[int] = []
    tasks = [asyncio.create_task(student(client, base, cid, n, moves, arrived, joined)) for n in range(students)]
    while len(joined) < students: await asyncio.sleep(0.05)  # every stream open and at the class's first state
    stop, health = asyncio.Event(), []
    probe = asyncio.create_task(health_probe(client, base, stop, health))
    lags: list[float] = []
    for seq in range(1, moves + 1):
      sent = time.perf_counter()
      r = await client.put(f"{base}/api/classes/{cid}/state", json={"url": f"/?step={seq}"}, headers={"X-Presenter-Key": key})
      assert r.status_code == 200, r.text
      while len(arrived.get(seq, [])) < students: await asyncio.sleep(0.005)
      lags += [t - sent for t in arrived[seq]]
      await asyncio.sleep(0.2)  # a presenter's pace, faster than any person's
    stop.set()
    await asyncio.gather(probe, *tasks)
    await client.delete(f"{base}/api/classes/{cid}", headers={"X-Presenter-Key": key})
    return lags, health

def pct(xs: list[float], p: float) -> float: return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))]

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--students", default="100,300", help="class sizes, comma separated")
  ap.add_argument("--moves", type=int, default=20)
  a = ap.parse_args()
  import httpx
  ok = True
  for students in (int(s) for s in a.students.split(",")):
    port, db = free_port(), pathlib.Path(tempfile.mkdtemp(prefix="ke-class-")) / "c.sqlite3"
    proc = serve(db, port, students)
    base = f"http://127.0.0.1:{port}"
    try:
      for _ in range(300):
        try:
          if httpx.get(f"{base}/api/health", timeout=1).status_code == 200: break
        except httpx.HTTPError: time.sleep(0.1)
      lags, health = asyncio.run(one_class(base, students, a.moves))
      target = TARGETS_S.get(students, 2.0)
      p99, worst_health = pct(lags, 0.99), max(health)
      print(f"{students} students x {a.moves} moves: arrival median {pct(lags, 0.5) * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms "
            f"(target {target * 1e3:.0f} ms: {'met' if p99 <= target else 'NOT met'}), max {max(lags) * 1e3:.1f} ms; "
            f"/api/health meanwhile: median {pct(health, 0.5) * 1e3:.1f} ms, max {worst_health * 1e3:.1f} ms over {len(health)} "
            f"(target {HEALTH_TARGET_S * 1e3:.0f} ms: {'met' if worst_health <= HEALTH_TARGET_S else 'NOT met'})")
      ok &= p99 <= target and worst_health <= HEALTH_TARGET_S
    finally:
      proc.terminate()
      proc.wait(timeout=10)
  return 0 if ok else 1

if __name__ == "__main__": sys.exit(main())
