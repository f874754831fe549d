"""Throughput of device workers on a job queue: one `kernel-explorer worker` against `--concurrency 2`, side by side in one run.

A real redis-server (throwaway, loopback) and a real server started with --queue; each round queues a batch of distinct cold traces
(the `small` preset, direct and Winograd, several output widths), then starts the worker(s) and times until every trace is stored.
Rounds alternate 1, 2, 1, 2... so drift on a shared machine hits both alike; medians are compared. Everything shares this machine's
cores: on 2 cores, two workers can at best halve the time (the server and Redis take their share too).

  python benchmarks/queue_throughput.py [--jobs 6] [--rounds 2]
"""
from __future__ import annotations
import argparse
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import httpx
from load import REPO, free_port

def start_redis(workdir: pathlib.Path) -> tuple[subprocess.Popen, str]:
  import redis
  port = free_port()
  proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  url = f"redis://127.0.0.1:{port}/0"
  for _ in range(200):
    try:
      if redis.Redis.from_url(url).ping(): return proc, url
    except redis.RedisError: time.sleep(0.05)
  raise RuntimeError("redis-server did not start")

def start_server(db: pathlib.Path, port: int, queue: str, log: pathlib.Path) -> subprocess.Popen:
  env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEL_EXPLORER_")}
  # one client queues the whole batch: no per-client share
  code = f"from explorer.web.serving import serve; serve('127.0.0.1', {port}, {str(db)!r}, queue={queue!r}, max_jobs_per_client=0)"
  proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
  for _ in range(300):
    try:
      if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200: return proc
    except httpx.HTTPError: pass
    if proc.poll() is not None: break
    time.sleep(0.2)
  raise RuntimeError(f"the server did not start:\n{log.read_text()}")

def batch(n: int, round_: int) -> list[dict]:
  """n distinct cold traces (a new output width per round: nothing is served from the store)."""
  algos = ("direct", "winograd")
  return [{"spec": {"batch": 1, "cin": 8, "cout": 8 + 16 * round_ + i, "height": 32, "width": 32, "kernel": 3},
           "variant": {"algo": algos[i % 2], "targets": ["cuda"], "repeats": 5}} for i in range(n)]

def one_round(url: str, workdir: pathlib.Path, workers: int, n: int, round_: int) -> float:
  """Seconds from starting the worker(s) until every trace of the batch is stored."""
  import redis
  redis.Redis.from_url(url).flushall()
  port = free_port()
  server = start_server(workdir / f"r{round_}.sqlite3", port, url, workdir / f"server-{round_}.log")
  base = f"http://127.0.0.1:{port}"
  try:
    ids = [httpx.post(f"{base}/api/traces", json=body, timeout=60).json()["id"] for body in batch(n, round_)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEL_EXPLORER_")}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "explorer", "worker", "--queue", url, "--device", "CPU", "--concurrency", str(workers)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=(workdir / f"worker-{round_}.log").open("w"),
                            start_new_session=True)
    try:
      while True:
        states = [httpx.get(f"{base}/api/traces/{i}/status", timeout=60).json()["status"] for i in ids]
        if failed := [i for i, s in zip(ids, states, strict=False) if s == "error"]: raise RuntimeError(f"traces failed: {failed}")
        if all(s == "done" for s in states): return time.monotonic() - start
        time.sleep(0.2)
    finally: os.killpg(proc.pid, signal.SIGKILL)
  finally:
    server.terminate()
    server.wait()

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--jobs", type=int, default=6, help="traces per round")
  ap.add_argument("--rounds", type=int, default=2, help="rounds per worker count")
  a = ap.parse_args()
  if shutil.which("redis-server") is None:
    print("skipped: no redis-server on PATH (Debian: apt-get install redis-server)")
    return 0
  with tempfile.TemporaryDirectory(prefix="ke-queue-") as tmp:
    workdir = pathlib.Path(tmp)
    redis_proc, url = start_redis(workdir)
    try:
      times: dict[int, list[float]] = {1: [], 2: []}
      for r in range(a.rounds):
        for workers in (1, 2):
          t = one_round(url, workdir, workers, a.jobs, len(times[1]) + len(times[2]))
          times[workers].append(t)
          print(f"round {r + 1}: {workers} worker(s): {a.jobs} traces in {t:.1f} s ({a.jobs / t * 60:.1f} traces/min)", flush=True)
    finally:
      redis_proc.kill()
  one, two = statistics.median(times[1]), statistics.median(times[2])
  print(f"\nmedian: 1 worker {one:.1f} s ({a.jobs / one * 60:.1f} traces/min), 2 workers {two:.1f} s ({a.jobs / two * 60:.1f} traces/min)")
  print(f"throughput ratio 2 workers / 1 worker: {one / two:.2f}x  (on {os.cpu_count()} cores shared with the server and Redis)")
  return 0

if __name__ == "__main__":
  sys.exit(main())
