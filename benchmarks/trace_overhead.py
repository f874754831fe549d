"""Trace overhead: the explorer's cold trace against tinygrad's own capture of the same program, side by side in one run.

  explorer  `kernel-explorer trace --preset P ... --target cuda --no-time --json -`: the host pipeline and one more target, the
            program run once and checked against the float64 reference (every process the command starts)
  tinygrad  `VIZ=-1 python repro.py`: the same program as the trace's reproducer (explorer/present/repro.py) with tinygrad's rewrite
            tracking and profile on and no viewer, which is what a user runs instead

Also printed per case: where the explorer's wall time goes, by stage (the trace's own stage_seconds; the rest is interpreter start,
imports, device init and the worker's and render processes' start-up).

Each side is a fresh command (interpreter start and imports included), the sides interleaved round by round so that drift on a
shared machine hits both alike; medians. Memory is the peak, over the run, of the resident memory summed over the command's whole
process tree (sampled every 20 ms from /proc). Targets (issue 18): wall <= 1.0x and memory <= 1.5x on medium and large builtin
Winograd; the large explorer fused variant under 30 s, or within 1.1x of tinygrad alone.

  python benchmarks/trace_overhead.py [--cases medium:builtin,large:builtin,large:fused] [--rounds 3]
"""
from __future__ import annotations
import argparse, json, os, pathlib, statistics, subprocess, sys, tempfile, time

CASES = {"builtin": ["--algo", "winograd"], "direct": ["--algo", "direct"],
         "fused": ["--algo", "winograd", "--wino-impl", "explorer", "--staging", "fused"]}
CLEAN = ("VIZ", "TRACK_MATCH_STATS", "DEBUG", "WINO", "NOOPT", "BEAM", "DEV", "PROFILE")

def tree_rss_mb(root: int) -> float:
  """Resident memory of root and all its descendants, in MiB (Linux /proc)."""
  children: dict[int, list[int]] = {}
  for d in os.listdir("/proc"):
    if not d.isdigit(): continue
    try:
      with open(f"/proc/{d}/stat") as f: stat = f.read()
      children.setdefault(int(stat[stat.rfind(")") + 2:].split()[1]), []).append(int(d))
    except OSError: continue
  total, todo = 0, [root]
  while todo:
    pid = todo.pop()
    todo += children.get(pid, [])
    try:
      with open(f"/proc/{pid}/statm") as f: total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError: continue
  return total / 2**20

def measure(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
  """(wall seconds, peak MiB over the process tree) of one command run to its end."""
  st = time.perf_counter()
  proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  peak = 0.0
  while proc.poll() is None:
    peak = max(peak, tree_rss_mb(proc.pid))
    time.sleep(0.02)
  wall = time.perf_counter() - st
  if proc.returncode != 0: raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.read()[-2000:]}")
  return wall, peak

def repro_for(preset: str, flags: list[str], env: dict[str, str], workdir: pathlib.Path) -> tuple[pathlib.Path, str]:
  """tinygrad's side: the reproducer of a (quick, untimed, host-only) trace of the same program; and the device it pins."""
  trace_json = workdir / f"{preset}-{flags[-1]}.json"
  subprocess.run([sys.executable, "-m", "explorer", "trace", "--preset", preset, *flags, "--target", "clang", "--no-time", "--quiet",
                  "--json", str(trace_json)], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  path = workdir / f"repro-{preset}-{flags[-1]}.py"
  subprocess.run([sys.executable, "-m", "explorer", "repro", str(trace_json), "-o", str(path)], env=env, check=True, stderr=subprocess.DEVNULL)
  return path, json.loads(trace_json.read_text())["env"]["device"]

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--cases", default="medium:builtin,large:builtin,large:fused", help="PRESET:builtin|direct|fused, comma separated")
  ap.add_argument("--rounds", type=int, default=3)
  a = ap.parse_args()
  env = {k: v for k, v in os.environ.items() if k not in CLEAN}
  workdir = pathlib.Path(tempfile.mkdtemp(prefix="ke-overhead-"))
  stages: dict[str, list[dict[str, float]]] = {}
  walls: dict[str, float] = {}
  print("| case | explorer wall s | tinygrad VIZ=-1 wall s | wall ratio | explorer peak MiB | tinygrad peak MiB | memory ratio |")
  print("|---|---|---|---|---|---|---|")
  for case in a.cases.split(","):
    preset, algo = case.split(":")
    flags = CASES[algo]
    script, device = repro_for(preset, flags, env, workdir)
    # the reproducer pins its device (DEV=...), so the explorer is told it too: neither side searches every backend for a default
    ours = [sys.executable, "-m", "explorer", "trace", "--preset", preset, *flags, "--target", "cuda", "--no-time", "--quiet",
            "--device", device, "--json", str(workdir / "out.json")]
    theirs = [sys.executable, str(script)]
    runs: dict[str, list[tuple[float, float]]] = {"ours": [], "theirs": []}
    for _ in range(a.rounds):
      runs["ours"].append(measure(ours, env))
      stages.setdefault(case, []).append(json.loads((workdir / "out.json").read_text())["stage_seconds"])
      runs["theirs"].append(measure(theirs, {**env, "VIZ": "-1", "DEBUG": "0"}))
    (w1, m1), (w2, m2) = ((statistics.median(x for x, _ in r), statistics.median(m for _, m in r)) for r in (runs["ours"], runs["theirs"]))
    walls[case] = w1
    print(f"| {case} | {w1:.1f} | {w2:.1f} | {w1 / w2:.2f} | {m1:.0f} | {m2:.0f} | {m1 / m2:.2f} |", flush=True)
  names = list(dict.fromkeys(k for rs in stages.values() for r in rs for k in r))
  print("\nwhere the explorer's time goes (medians, s; other = start-up, imports, device init, processes):\n")
  print("| case | " + " | ".join(names) + " | other |")
  print("|---|" + "---|" * (len(names) + 1))
  for case, rs in stages.items():
    med = {k: statistics.median(r.get(k, 0.0) for r in rs) for k in names}
    print(f"| {case} | " + " | ".join(f"{med[k]:.2f}" for k in names) + f" | {walls[case] - sum(med.values()):.2f} |")

if __name__ == "__main__": main()
