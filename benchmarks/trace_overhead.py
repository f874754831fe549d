"""Trace overhead: the explorer's cold trace against tinygrad's own capture of the same program, side by side in one run.

  explorer  `kernel-explorer trace --preset P ... --no-time --json -`: the cold trace (the device's own target; PRESET:ALGO+cuda also
            asks for CUDA, eagerly), the program run once and checked against the float64 reference (every process the command starts)
  tinygrad  `VIZ=-1 python repro.py`: the same program as the trace's reproducer (explorer/present/repro.py) with tinygrad's rewrite
            tracking and profile on and no viewer, which is what a user runs instead

  case cnn: one training step of a small CNN (benchmarks/programs/cnn_step.py) inside the explorer's `capture()` block, against the
            same script without it under VIZ=-1

Then the first views on a served trace (in this process, as benchmarks/web.py serves): a fresh server traces medium builtin Winograd
with its defaults (CUDA rendered beside the trace), and again with render_beside=0, and the seconds until a kernel's CUDA record
answers (GET .../targets/cuda: 202 while it is computed, then 200), its CUDA compile facts (GET .../targets/cuda/facts) and its Metal
record, the moment the trace is stored; then another kernel's Metal record once the render ahead is done (target, issue 76: 0.5 s).

Also printed per case: the PSS ratio (peak proportional set size summed over each side's processes: a page shared by several processes,
the interpreter's and the libraries' code, counted once), the CPU time of each side (user + system, every process), and the floor wall
ratio: the explorer's CPU time spread over every core of this machine with none ever idle, against tinygrad's wall, which is the
least wall ratio this much work allows here. Then where the explorer's wall time goes, by stage (the trace's own stage_seconds; the
rest is interpreter start, imports, device init and the worker's start-up), and where the CPU time and memory go per kind of process
(the command, the trace worker, the render process, the compilers it runs).

Each side is a fresh command (interpreter start and imports included), the sides interleaved round by round so that drift on a shared
machine hits both alike; medians. Each round runs each side twice: once sampled, for its memory, CPU and stages, and once plain, for its
wall time (plain_wall: the sampler's reads take CPU from the explorer's processes on 2 cores). Memory is the peak, over the run, of the
resident memory summed over the command's whole process tree (sampled every 20 ms from /proc; PSS every 100 ms). Targets (issue 18):
wall <= 1.0x and memory <= 1.5x on medium and large builtin Winograd; the large explorer fused variant under 30 s, or within 1.1x of
tinygrad alone. Targets (issue 28): wall <= 1.1x and memory <= 1.5x with default targets (medium and large builtin, large fused); <=
1.5x and <= 2.0x for medium builtin with --target cuda; <= 1.25x and <= 1.5x for the CNN's training step.

Then a server's memory: `kernel-explorer serve` on a fresh store, idle, tracing medium builtin Winograd, after, reading its pages,
after (its process tree's peak PSS in each phase; target, issue 76: under 2x VIZ=-1's for the same trace).

Then BEAM: a BEAM=2 trace against tinygrad's plain BEAM search of the same convolution (benchmarks/beam_overhead.py; target 1.25x).

  python benchmarks/trace_overhead.py [--cases medium:builtin,large:builtin,large:fused,medium:builtin+cuda,cnn] [--rounds 3]
                                      [--first-views 3] [--no-server-memory] [--beam-presets wino8]
"""
from __future__ import annotations
import argparse
import contextlib
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

CASES = {"builtin": ["--algo", "winograd"], "direct": ["--algo", "direct"],
         "fused": ["--algo", "winograd", "--wino-impl", "explorer", "--staging", "fused"]}
WALL_TARGET = 1.1  # issue 76: every case's wall within 1.1x VIZ=-1's
FIRST_VIEW_TARGET_S = 0.5  # issue 76: another target's first view on a served trace (the compile cache cold only for the compile facts)
CLEAN = ("VIZ", "TRACK_MATCH_STATS", "DEBUG", "WINO", "NOOPT", "BEAM", "DEV", "PROFILE")

PAGE, TICK, CORES = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK"), len(os.sched_getaffinity(0))

def _read(path: str) -> str:
  with open(path) as f: return f.read()

# the kernel lists each thread's children (CONFIG_PROC_CHILDREN): the sampler reads its few processes' lists, not every process's stat
# (a walk of /proc every 20 ms cost the sampler about a tenth of a core, taken from the explorer's two busy processes on 2 cores)
HAS_CHILDREN = os.path.exists(f"/proc/self/task/{os.getpid()}/children")

def _tree(root: int) -> dict[int, int]:
  """root and all its descendants, each with its depth under root (Linux /proc)."""
  if not HAS_CHILDREN: return _tree_by_scan(root)
  depth, todo = {root: 0}, [root]
  while todo:
    pid = todo.pop()
    for c in _children(pid): depth[c] = depth[pid] + 1; todo.append(c)
  return depth

def _children(pid: int) -> list[int]:
  """pid's children, as each of its threads started them (a process, or a thread, that ended meanwhile has none)."""
  try: threads = os.listdir(f"/proc/{pid}/task")
  except OSError: return []
  found: list[int] = []
  for t in threads:
    with contextlib.suppress(OSError): found += map(int, _read(f"/proc/{pid}/task/{t}/children").split())
  return found

def _tree_by_scan(root: int) -> dict[int, int]:
  """_tree from every process's parent, where the kernel keeps no children lists."""
  children: dict[int, list[int]] = {}
  for d in os.listdir("/proc"):
    if not d.isdigit(): continue
    try: stat = _read(f"/proc/{d}/stat")
    except OSError: continue
    children.setdefault(int(stat[stat.rfind(")") + 2:].split()[1]), []).append(int(d))
  depth, todo = {root: 0}, [root]
  while todo:
    pid = todo.pop()
    for c in children.get(pid, []): depth[c] = depth[pid] + 1; todo.append(c)
  return depth

def role(pid: int, depth: int, root: int) -> str:
  """What a process of either side is, from its command line and its depth under the command (a worker forked from a template has
  the template's command line, one level further down)."""
  try: cmd, root_cmd = _read(f"/proc/{pid}/cmdline").split("\0"), _read(f"/proc/{root}/cmdline").split("\0")
  except OSError: return "?"
  if depth == 0: return "command"
  if cmd == root_cmd: return "render process"  # forked from the command (a trace in its process)
  if any("resource_tracker" in c for c in cmd): return "resource tracker"
  if any("explorer.tracing.workers.template_process import serve" in c for c in cmd): return "template" if depth == 1 else "trace worker"
  if any("explorer.tracing.workers.process import _boot" in c for c in cmd): return "trace worker"
  if any("spawn_main" in c for c in cmd): return "render process"
  return "compilers (" + os.path.basename(cmd[0]) + ")" if cmd[0] else "?"

@dataclass
class Proc:
  role: str
  cpu_s: float = 0.0
  peak_mib: float = 0.0
  peak_pss_mib: float = 0.0

@dataclass
class Run:
  wall_s: float
  peak_rss_mib: float   # the peak over the run of resident memory summed over the process tree
  peak_pss_mib: float   # the same with each shared page divided among the processes that share it (smaps_rollup's Pss)
  cpu_s: float          # user + system time of the whole tree (the command's rusage: every process it and its children waited for)
  procs: dict[int, Proc]  # as last sampled: a process shorter than a tick may be missed, so these sum to a little less than cpu_s
  stage_pss_mib: dict[str, float] = field(default_factory=dict)  # the tree's peak PSS while each stage ran (the command's progress lines)

STAGE_LINE = re.compile(r"^  (\w+)\s+(start|done|error|skipped)\b")

def _follow_stages(stream: Any, now: list[str]) -> None:
  """The stage the command's progress lines (stderr, one per event) say is running, kept in now[0]; the rest kept for errors."""
  for line in stream:
    now.append(line)
    if (m := STAGE_LINE.match(line)): now[0] = m.group(1) if m.group(2) == "start" else f"after {m.group(1)}"

def _pss_kib(pid: int) -> int:
  m = re.search(r"^Pss:\s+(\d+) kB", _read(f"/proc/{pid}/smaps_rollup"), re.M)
  return int(m.group(1)) if m else 0

def measure(cmd: list[str], env: dict[str, str]) -> Run:
  """One command run to its end: wall time, the peaks summed over its process tree (sampled every 20 ms), and per process the CPU
  time it used (user + system, as last seen) and its peak resident memory."""
  st = time.perf_counter()
  proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  stage = ["start-up"]  # then the lines read
  reader = threading.Thread(target=_follow_stages, args=(proc.stderr, stage), daemon=True)
  reader.start()
  run, tick = Run(0.0, 0.0, 0.0, 0.0, {}), 0
  while True:
    tick += 1
    with_pss = tick % 5 == 1  # smaps_rollup walks the page tables: every 100 ms, so the sampler's own CPU stays small on 2 cores
    done, status, usage = os.wait4(proc.pid, os.WNOHANG)
    if done: break
    rss = pss = 0.0
    for pid, depth in _tree(proc.pid).items():
      try:
        stat, pages = _read(f"/proc/{pid}/stat"), int(_read(f"/proc/{pid}/statm").split()[1])
        own = _pss_kib(pid) / 1024 if with_pss else 0.0
      except OSError: continue
      pss += own
      p = run.procs.setdefault(pid, Proc(role(pid, depth, proc.pid)))
      p.peak_pss_mib = max(p.peak_pss_mib, own)
      fields = stat[stat.rfind(")") + 2:].split()
      p.cpu_s = max(p.cpu_s, (int(fields[11]) + int(fields[12])) / TICK)  # its own user and system time
      p.peak_mib = max(p.peak_mib, pages * PAGE / 2**20)
      rss += pages * PAGE / 2**20
    run.peak_rss_mib, run.peak_pss_mib = max(run.peak_rss_mib, rss), max(run.peak_pss_mib, pss)
    if with_pss: run.stage_pss_mib[stage[0]] = max(run.stage_pss_mib.get(stage[0], 0.0), pss)
    time.sleep(0.02)
  run.wall_s, run.cpu_s = time.perf_counter() - st, usage.ru_utime + usage.ru_stime
  proc.returncode = os.waitstatus_to_exitcode(status)
  reader.join(5)
  if proc.returncode != 0: raise RuntimeError(f"{' '.join(cmd)} failed: {''.join(stage[1:])[-2000:]}")
  return run

def plain_wall(cmd: list[str], env: dict[str, str]) -> float:
  """One command run to its end, nothing sampled: its wall seconds. A sampler beside it (measure) reads /proc every 20 ms, which on 2
  cores takes CPU from the explorer's two busy processes but not from tinygrad's one: medium + CUDA read 1.11x sampled, 1.02x plain."""
  st = time.perf_counter()
  subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
  return time.perf_counter() - st

def repro_for(preset: str, flags: list[str], env: dict[str, str], workdir: pathlib.Path) -> tuple[pathlib.Path, str]:
  """tinygrad's side: the reproducer of a (quick, untimed, host-only) trace of the same program; and the device it pins."""
  trace_json = workdir / f"{preset}-{flags[-1]}.json"
  subprocess.run([sys.executable, "-m", "explorer", "trace", "--preset", preset, *flags, "--target", "clang", "--no-time", "--quiet",
                  "--json", str(trace_json)], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  path = workdir / f"repro-{preset}-{flags[-1]}.py"
  subprocess.run([sys.executable, "-m", "explorer", "repro", str(trace_json), "-o", str(path)], env=env, check=True, stderr=subprocess.DEVNULL)
  return path, json.loads(trace_json.read_text())["env"]["device"]

def commands(case: str, env: dict[str, str], workdir: pathlib.Path) -> tuple[list[str], list[str], dict[str, str], pathlib.Path | None]:
  """A case's two commands (the explorer's, tinygrad's and tinygrad's environment) and the explorer's trace file, if it writes one."""
  viz = {**env, "VIZ": "-1", "DEBUG": "0"}
  if case == "cnn":
    program = str(pathlib.Path(__file__).parent / "programs" / "cnn_step.py")
    return [sys.executable, program, "--capture"], [sys.executable, program], viz, None
  preset, algo = case.split(":")
  algo, _, target = algo.partition("+")
  flags = CASES[algo]
  script, device = repro_for(preset, flags, env, workdir)
  # the reproducer pins its device (DEV=...), so the explorer is told it too: neither side searches every backend for a default
  out = workdir / "out.json"
  # not --quiet: its progress lines (stderr is no terminal: one line per event) say which stage each memory sample falls in
  ours = [sys.executable, "-m", "explorer", "trace", "--preset", preset, *flags, *(["--target", target] if target else []), "--no-time",
          "--device", device, "--json", str(out)]
  return ours, [sys.executable, str(script)], viz, out

def first_views(rounds: int) -> None:
  """Each round two fresh servers and stores, one after the other: one with its defaults (render_ahead cuda,metal: CUDA rendered beside
  the trace, render_beside 1, Metal in the background once the trace is stored), one with render_beside=0 (both once it is stored, as
  before issue 76's last change). Each traces medium builtin Winograd; then, as a page polls them, the moment the trace is stored: a
  kernel's CUDA record, its CUDA compile facts and its Metal record (before the render ahead reached it: computed for the request);
  then, once the render ahead is done, another kernel's Metal record (read from the store). The trace's seconds, posted to stored,
  say what rendering beside costs it."""
  from fastapi.testclient import TestClient
  from explorer.settings import Settings
  from explorer.web.app import create_app

  def until_ready(client: TestClient, url: str) -> float:
    st = time.perf_counter()
    while (r := client.get(url)).status_code == 202: time.sleep(0.05)
    assert r.status_code == 200, (url, r.status_code, r.text[:300])
    return time.perf_counter() - st

  def met(s: float) -> str: return f"{s:.2f} ({'met' if s <= FIRST_VIEW_TARGET_S else 'NOT MET'})"

  print("\nfirst views on a served trace (medium builtin Winograd, render_ahead cuda,metal; a fresh server and store each; s; target "
        f"{FIRST_VIEW_TARGET_S} s; the compile cache is the user's, warm after the first round):\n")
  print("| round | render_beside | trace (posted to stored) | asked at once: kernel | its CUDA record | its CUDA compile facts | its Metal record "
        "| render ahead done after | then: kernel | its Metal record |")
  print("|---|---|---|---|---|---|---|---|---|---|")
  for i in range(rounds):
    for beside in (1, 0):
      db = pathlib.Path(tempfile.mkdtemp(prefix="ke-first-view-")) / "traces.sqlite3"
      with TestClient(create_app(str(db), settings=Settings.load(env={}, render_beside=beside))) as client:
        posted = time.perf_counter()
        r = client.post("/api/traces", json={"preset": "medium", "variant": {"algo": "winograd", "time": False}})
        assert r.status_code in (200, 202), r.text
        trace_id = r.json()["id"]
        while (s := client.get(f"/api/traces/{trace_id}/status").json())["status"] not in ("done", "error"): time.sleep(0.05)
        assert s["status"] == "done", s
        stored = time.perf_counter()
        kernels = client.get(f"/api/traces/{trace_id}/kernels").json()
        n, m = kernels[i % len(kernels)]["index"], kernels[(i + 1) % len(kernels)]["index"]
        url = f"/api/traces/{trace_id}/kernels/{{}}/targets/{{}}"
        cuda_s, facts_s = until_ready(client, url.format(n, "cuda")), until_ready(client, url.format(n, "cuda") + "/facts")
        metal_s = until_ready(client, url.format(n, "metal"))
        background = client.app.state.services.enrichments.background  # type: ignore[attr-defined]
        while background.active(): time.sleep(0.05)
        ahead_s = time.perf_counter() - stored
        then_s = until_ready(client, url.format(m, "metal"))
        print(f"| {i + 1} | {beside} | {stored - posted:.2f} | {n} | {met(cuda_s)} | {facts_s:.2f} | {met(metal_s)} | {ahead_s:.1f} | {m} "
              f"| {met(then_s)} |", flush=True)

SERVER_PAGES = ("/t/{id}", "/t/{id}/k/0", "/t/{id}/k/1", "/t/{id}/bufferize", "/t/{id}/source", "/api/traces/{id}/graphs/kernels")

def server_memory(theirs_pss_mib: float, env: dict[str, str]) -> None:
  """A served trace's memory (issue 76: the server and its workers under 2x a plain VIZ=-1 run of the same trace): `kernel-explorer
  serve` on a fresh store, its process tree's PSS (every process it started) sampled every 100 ms, its peak in each phase: idle, while
  it traces medium builtin Winograd (its defaults), after, while its pages are read, after."""
  import socket
  import httpx
  with socket.socket() as sk: sk.bind(("127.0.0.1", 0)); port = sk.getsockname()[1]
  db = pathlib.Path(tempfile.mkdtemp(prefix="ke-server-memory-")) / "traces.sqlite3"
  server = subprocess.Popen([sys.executable, "-m", "explorer", "serve", "--db", str(db), "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  phase, stop = ["start-up"], threading.Event()
  peaks: dict[str, tuple[float, dict[str, float]]] = {}  # phase -> its peak, and the PSS of each kind of process at that moment
  def sample() -> None:
    while not stop.is_set():
      by: dict[str, float] = {}
      for pid, depth in _tree(server.pid).items():
        with contextlib.suppress(OSError):
          kind = "server" if depth == 0 else role(pid, depth, server.pid).replace("render process", "server's fork")
          by[kind] = by.get(kind, 0.0) + _pss_kib(pid) / 1024
      if (total := sum(by.values())) > peaks.get(phase[0], (0.0, {}))[0]: peaks[phase[0]] = (total, by)
      time.sleep(0.1)
  sampler = threading.Thread(target=sample, daemon=True)
  sampler.start()
  base = f"http://127.0.0.1:{port}"
  try:
    with httpx.Client(base_url=base, timeout=120) as client:
      while True:
        try:
          if client.get("/api/health").status_code == 200: break
        except httpx.HTTPError: time.sleep(0.2)
      phase[0] = "idle"; time.sleep(3)
      phase[0] = "tracing"
      r = client.post("/api/traces", json={"preset": "medium", "variant": {"algo": "winograd", "time": False}})
      trace_id = r.json()["id"]
      while client.get(f"/api/traces/{trace_id}/status").json()["status"] not in ("done", "error"): time.sleep(0.2)
      phase[0] = "after the trace"; time.sleep(3)
      phase[0] = "reading its pages"
      for page in SERVER_PAGES: client.get(page.format(id=trace_id), headers={"accept": "text/html"})
      time.sleep(2)  # their lazy parts (another target's records, analyses) in workers
      phase[0] = "after its pages"; time.sleep(3)
  finally:
    stop.set(); sampler.join(2)
    server.terminate(); server.wait(10)
  target = 2.0 * theirs_pss_mib
  print(f"\na server's memory (its process tree's peak PSS, MiB; target under 2x VIZ=-1's {theirs_pss_mib:.0f} MiB for the same trace: "
        f"{target:.0f}):\n")
  for name, (peak, by) in peaks.items():
    parts = ", ".join(f"{kind} {mib:.0f}" for kind, mib in sorted(by.items(), key=lambda x: -x[1]))
    print(f"- {name}: {peak:.0f} ({peak / theirs_pss_mib:.2f}x) {'met' if peak <= target else 'NOT MET'} ({parts})")

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--cases", default="medium:builtin,large:builtin,large:fused,medium:builtin+cuda,cnn",
                  help="PRESET:builtin|direct|fused[+TARGET] or cnn, comma separated")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--first-views", type=int, default=3, help="rounds of the first-view measurement (0: none)")
  ap.add_argument("--server-memory", action=argparse.BooleanOptionalAction, default=True, help="a served trace's memory, by phase")
  ap.add_argument("--beam-presets", default="wino8", help="BEAM=2 traces against tinygrad's plain BEAM (benchmarks/beam_overhead.py; empty: none)")
  a = ap.parse_args()
  env = {k: v for k, v in os.environ.items() if k not in CLEAN}
  # the explorer's modules compiled to bytecode once, as a wheel install leaves them (tinygrad's are, by pip): otherwise, where
  # PYTHONDONTWRITEBYTECODE is set, each of the explorer's processes compiles them from source again, which the capture never does
  subprocess.run([sys.executable, "-m", "compileall", "-q", str(pathlib.Path(__file__).parents[1] / "explorer")], check=True)
  workdir = pathlib.Path(tempfile.mkdtemp(prefix="ke-overhead-"))
  stages: dict[str, list[dict[str, float]]] = {}
  results: dict[str, dict[str, list[Run]]] = {}
  print("| case | explorer wall s | tinygrad VIZ=-1 wall s | wall ratio (target) | explorer peak MiB | tinygrad peak MiB | memory ratio "
        "| explorer PSS MiB | tinygrad PSS MiB | PSS ratio (target) | explorer CPU s | tinygrad CPU s | floor wall ratio |")
  print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
  for case in a.cases.split(","):
    ours, theirs, theirs_env, out = commands(case, env, workdir)
    runs = results[case] = {"explorer": [], "tinygrad": []}
    walls: dict[str, list[float]] = {"explorer": [], "tinygrad": []}
    for _ in range(a.rounds):
      runs["explorer"].append(measure(ours, env))
      if out is not None: stages.setdefault(case, []).append(json.loads(out.read_text())["stage_seconds"])
      runs["tinygrad"].append(measure(theirs, theirs_env))
      walls["explorer"].append(plain_wall(ours, env))
      walls["tinygrad"].append(plain_wall(theirs, theirs_env))
    med = {side: {f: statistics.median(getattr(r, f) for r in rs) for f in ("peak_rss_mib", "peak_pss_mib", "cpu_s")}
           | {"wall_s": statistics.median(walls[side])} for side, rs in runs.items()}
    e, t = med["explorer"], med["tinygrad"]
    wr = e['wall_s'] / t['wall_s']
    print(f"| {case} | {e['wall_s']:.1f} | {t['wall_s']:.1f} | {wr:.2f} ({WALL_TARGET:.2f}: {'met' if wr <= WALL_TARGET else 'NOT MET'}) | "
          f"{e['peak_rss_mib']:.0f} | "
          f"{t['peak_rss_mib']:.0f} | {e['peak_rss_mib'] / t['peak_rss_mib']:.2f} | {e['peak_pss_mib']:.0f} | {t['peak_pss_mib']:.0f} | "
          f"{(pr := e['peak_pss_mib'] / t['peak_pss_mib']):.2f} ({pss_target(case):.2f}: {'met' if pr <= pss_target(case) else 'NOT MET'}) | "
          f"{e['cpu_s']:.1f} | {t['cpu_s']:.1f} | {e['cpu_s'] / CORES / t['wall_s']:.2f} |", flush=True)
  print_stages(stages, {case: statistics.median(r.wall_s for r in rs["explorer"]) for case, rs in results.items()})
  print_stage_memory(results)
  print_processes(results)
  if a.server_memory:
    viz = [r.peak_pss_mib for r in results.get("medium:builtin", {}).get("tinygrad", [])]
    if not viz:  # the case was not run: tinygrad's side of it once
      _, theirs, theirs_env, _ = commands("medium:builtin", env, workdir)
      viz = [measure(theirs, theirs_env).peak_pss_mib]
    server_memory(statistics.median(viz), env)
  if a.first_views: first_views(a.first_views)
  if a.beam_presets:
    from beam_overhead import beam_ratios
    print("\nBEAM (each side from an empty cache; explorer/plain BEAM wall, target 1.25x):\n")
    beam_ratios(a.beam_presets.split(","), 2, a.rounds, env, workdir)

def print_stages(stages: dict[str, list[dict[str, float]]], walls: dict[str, float]) -> None:
  if not stages: return  # only the capture case: its trace runs in the program's own process, with no stage breakdown of the command
  names = list(dict.fromkeys(k for rs in stages.values() for r in rs for k in r))
  print("\nwhere the explorer's wall time goes (the trace worker's stages, medians, s; other = the command's and the worker's start-up, "
        "imports, device init, the bufferize decisions and the rewrite blob after the stages):\n")
  print("| case | " + " | ".join(names) + " | other |")
  print("|---|" + "---|" * (len(names) + 1))
  for case, rs in stages.items():
    med = {k: statistics.median(r.get(k, 0.0) for r in rs) for k in names}
    print(f"| {case} | " + " | ".join(f"{med[k]:.2f}" for k in names) + f" | {walls[case] - sum(med.values()):.2f} |")

def pss_target(case: str) -> float: return 1.5 if "+" in case else 1.25  # issue 76: 1.25x, 1.5x with an extra target asked for

def print_stage_memory(results: dict[str, dict[str, list[Run]]]) -> None:
  """Per case, the explorer's process tree's peak PSS while each stage ran (its progress lines say which), beside tinygrad's peak."""
  cases = [c for c, sides in results.items() if any(r.stage_pss_mib for r in sides["explorer"])]
  if not cases: return
  print("\nwhere the explorer's memory goes, by stage (the process tree's peak PSS while each ran, medians, MiB; `after X`: between X "
        "and the next stage; tinygrad: its whole run's peak PSS):\n")
  for case in cases:
    runs = results[case]["explorer"]
    names = list(dict.fromkeys(k for r in runs for k in r.stage_pss_mib))
    theirs = statistics.median(r.peak_pss_mib for r in results[case]["tinygrad"])
    print(f"- {case}: " + ", ".join(f"{k} {statistics.median(r.stage_pss_mib[k] for r in runs if k in r.stage_pss_mib):.0f}" for k in names) +
          f"; tinygrad VIZ=-1 {theirs:.0f}")

def print_processes(results: dict[str, dict[str, list[Run]]]) -> None:
  """Per case, side and kind of process: CPU seconds and the largest peak resident memory of one such process (medians over rounds)."""
  print("\nwhere the CPU time and memory go, per kind of process (medians over rounds; CPU s summed over the processes of a kind, "
        "peak MiB of the largest; 2 cores, so the explorer's processes overlap):\n")
  print("| case | side | process | CPU s | peak MiB | peak PSS MiB |")
  print("|---|---|---|---|---|---|")
  for case, sides in results.items():
    for side, rs in sides.items():
      kinds = list(dict.fromkeys(p.role.split(" (")[0] for r in rs for p in r.procs.values() if p.role != "?"))  # "?": gone when read
      for kind in kinds:
        of = [[p for p in r.procs.values() if p.role.split(" (")[0] == kind] for r in rs]
        cpu = statistics.median(sum(p.cpu_s for p in ps) for ps in of)
        peak = statistics.median(max((p.peak_mib for p in ps), default=0.0) for ps in of)
        pss = statistics.median(max((p.peak_pss_mib for p in ps), default=0.0) for ps in of)
        if cpu or peak: print(f"| {case} | {side} | {kind} | {cpu:.2f} | {peak:.0f} | {pss:.0f} |")
  print("\nthe floor wall ratio without any compiler process (its CPU time less its compilers', over every core; a cold trace runs only "
        "tinygrad's own host compile now, compile facts are computed when first viewed)\n")
  for case, sides in results.items():
    e, t = sides["explorer"], sides["tinygrad"]
    cpu = statistics.median(r.cpu_s - sum(p.cpu_s for p in r.procs.values() if p.role.startswith("compilers")) for r in e)
    print(f"- {case}: {cpu / CORES / statistics.median(r.wall_s for r in t):.2f}")

if __name__ == "__main__": main()
