"""BEAM at tinygrad's cost: a BEAM trace against tinygrad's own BEAM search of the same convolution, side by side in one run.

  explorer  `kernel-explorer trace --preset P --opt beam:N --no-time`: the trace records every candidate BEAM times and the winner's
            codegen, rewrite by rewrite (candidates compile untracked)
  tinygrad  the trace's reproducer (explorer/present/repro.py) with BEAM=N IGNORE_BEAM_CACHE=1, plain (no tracking), which is what a
            user runs instead; and the same under VIZ=-1 (tinygrad's rewrite tracking on, no viewer), printed too

Every run starts from an empty cache directory (CACHEDB and XDG_CACHE_HOME in a fresh folder: no compile or BEAM result is reused;
warm caches move these figures a lot), the three sides interleaved round by round; medians. Target (issues 45 and 76): the explorer
within 1.25x of tinygrad's plain BEAM on wino8 and medium, BEAM=2. benchmarks/trace_overhead.py runs it too (--beam-presets).

  python benchmarks/beam_overhead.py [--presets wino8,medium] [--beam 2] [--rounds 2]
"""
from __future__ import annotations
import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
from trace_overhead import CLEAN, measure, repro_for

def fresh_cache(env: dict[str, str], workdir: pathlib.Path) -> dict[str, str]:
  home = pathlib.Path(tempfile.mkdtemp(prefix="cache-", dir=workdir))
  return {**env, "XDG_CACHE_HOME": str(home), "CACHEDB": str(home / "tinygrad.db")}

BEAM_TARGET = 1.25  # issues 45 and 76: a BEAM trace within 1.25x tinygrad's plain BEAM

def beam_ratios(presets: list[str], beam: int, rounds: int, env: dict[str, str], workdir: pathlib.Path) -> dict[str, float]:
  """Print the table (each side's wall and peak, the ratios against the target) and return each preset's explorer/plain wall ratio."""
  print(f"| preset | BEAM | explorer wall s | tinygrad plain wall s | ratio (target {BEAM_TARGET}) | tinygrad VIZ=-1 wall s | ratio to VIZ=-1 "
        "| explorer peak MiB | tinygrad plain peak MiB |")
  print("|---|---|---|---|---|---|---|---|---|")
  out = {}
  for preset in presets:
    script, device = repro_for(preset, ["--algo", "direct"], env, workdir)
    ours = [sys.executable, "-m", "explorer", "trace", "--preset", preset, "--algo", "direct", "--opt", f"beam:{beam}", "--no-time",
            "--quiet", "--device", device, "--json", str(workdir / "out.json")]
    flags = {"BEAM": str(beam), "IGNORE_BEAM_CACHE": "1", "DEBUG": "0"}
    runs: dict[str, list] = {"explorer": [], "plain": [], "viz": []}
    for _ in range(rounds):
      runs["explorer"].append(measure(ours, fresh_cache(env, workdir)))
      runs["plain"].append(measure([sys.executable, str(script)], {**fresh_cache(env, workdir), **flags}))
      runs["viz"].append(measure([sys.executable, str(script)], {**fresh_cache(env, workdir), **flags, "VIZ": "-1"}))
    wall = {side: statistics.median(r.wall_s for r in rs) for side, rs in runs.items()}
    mem = {side: statistics.median(r.peak_rss_mib for r in rs) for side, rs in runs.items()}
    out[preset] = ratio = wall["explorer"] / wall["plain"]
    print(f"| {preset} | {beam} | {wall['explorer']:.1f} | {wall['plain']:.1f} | {ratio:.2f} ({'met' if ratio <= BEAM_TARGET else 'NOT MET'}) | "
          f"{wall['viz']:.1f} | {wall['explorer'] / wall['viz']:.2f} | {mem['explorer']:.0f} | {mem['plain']:.0f} |", flush=True)
  return out

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--presets", default="wino8,medium")
  ap.add_argument("--beam", type=int, default=2)
  ap.add_argument("--rounds", type=int, default=2)
  a = ap.parse_args()
  env = {k: v for k, v in os.environ.items() if k not in CLEAN}
  subprocess.run([sys.executable, "-m", "compileall", "-q", str(pathlib.Path(__file__).parents[1] / "explorer")], check=True)
  beam_ratios(a.presets.split(","), a.beam, a.rounds, env, pathlib.Path(tempfile.mkdtemp(prefix="ke-beam-")))

if __name__ == "__main__": main()
