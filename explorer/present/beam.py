"""What BEAM tried, drawn: each timed candidate as a dot (x: its round, y: its time on a log scale), the kept ones filled, the
winner's path as a line; from a kernel's beam record (explorer.schema.BeamRecord)."""
from __future__ import annotations
import math
from typing import Any
from explorer.schema import BeamRecord
from explorer.text import fmt_tick_time

WIDTH, HEIGHT, PAD = 640, 240, 44

def beam_plot(beam: BeamRecord) -> dict[str, Any]:
  """Points and the path in SVG coordinates, with the axes' ticks: {width, height, points, path, x_ticks, y_ticks}."""
  cands = beam["candidates"]
  if not cands: return {"width": WIDTH, "height": HEIGHT, "points": [], "path": "", "x_ticks": [], "y_ticks": []}
  rounds = max(c["round"] for c in cands)
  lo, hi = math.log10(min(c["time_s"] for c in cands)), math.log10(max(c["time_s"] for c in cands))
  hi = hi if hi > lo else lo + 1
  def x(r: int) -> float: return PAD + (r - 0.5) * (WIDTH - 2 * PAD) / rounds
  def y(t: float) -> float: return HEIGHT - PAD + (math.log10(t) - lo) / (hi - lo) * (2 * PAD - HEIGHT)
  on_path = {tuple(p) for p in beam["path"]}
  points = [{"x": round(x(c["round"]) + ((i * 7919) % 17 - 8) * 0.6, 1), "y": round(y(c["time_s"]), 1), "kept": c["kept"],
             "winner": tuple(c["opts"]) in on_path, "opts": ",".join(c["opts"]),
             "why": c.get("why"), "label": f"{', '.join(c['opts'])}: {c['time_s'] * 1e6:.1f} us"}
            for i, c in enumerate(cands)]
  best = {tuple(c["opts"]): c["time_s"] for c in cands}
  steps = [p for p in beam["path"] if tuple(p) in best]
  path = " ".join(f"{'M' if i == 0 else 'L'}{x(len(p)):.1f},{y(best[tuple(p)]):.1f}" for i, p in enumerate(steps))
  ticks = sorted({lo, hi, *(e for e in range(math.ceil(lo), math.floor(hi) + 1))})
  y_ticks = [{"y": round(y(10 ** e), 1), "label": fmt_tick_time(10 ** e)} for e in ticks]
  return {"width": WIDTH, "height": HEIGHT, "points": points, "path": path, "pad": PAD,
          "x_ticks": [{"x": round(x(r), 1), "label": str(r)} for r in range(1, rounds + 1)], "y_ticks": y_ticks}

