"""A trace's timeline laid out for its page: each lane's ranges on rows (a range inside another one row below it, as tinygrad's passes
nest inside their group), the kernel launches per device, memory in use per device as a step series, and where the seconds went."""
from __future__ import annotations
import re
from collections.abc import Callable
from typing import Any
from explorer.schema import Timeline

LANE_TITLES = {"stages": "explorer stages", "tensor": "Tensor functions", "tinygrad": "tinygrad passes", "compile": "compiles"}
HOST_LANES = ("tensor", "tinygrad", "compile")
MAX_ROWS = 16  # deeper nesting is drawn on the last row

def nest(spans: list[tuple[float, float]]) -> list[int]:
  """Each span's row: 0 for an outermost one, one more than the span it starts inside. spans sorted by start (a longer one first on
  a tie), as the timeline stores them."""
  rows, open_ends = [], list[float]()
  for st, en in spans:
    while open_ends and open_ends[-1] <= st: open_ends.pop()
    rows.append(min(len(open_ends), MAX_ROWS - 1))
    open_ends.append(en)
  return rows

def _lane(name: str, kind: str, items: list[tuple[float, float, str, str | None]]) -> dict[str, Any]:
  """items: (start, end, name, link or None)."""
  items = sorted(items, key=lambda x: (x[0], -(x[1] - x[0])))
  rows = nest([(st, en) for st, en, _, _ in items])
  return {"name": name, "title": LANE_TITLES.get(name, f"{name} launches" if kind == "device" else name), "kind": kind,
          "rows": max(rows, default=0) + 1, "items": [[r, st, en, n, url] for r, (st, en, n, url) in zip(rows, items, strict=True)]}

def timeline_view(tl: Timeline, stage_url: Callable[[str, int | None], str | None]) -> dict[str, Any]:
  """What the page's script draws (explorer/static/timeline.js). stage_url: the page of a stage (and a program's realize), if any."""
  names = tl["names"]
  by_lane: dict[int, list[tuple[float, float, str, str | None]]] = {}
  for ln, n, st, en in tl["ranges"]: by_lane.setdefault(ln, []).append((st, en, names[n], None))
  runs: dict[int, list[list[Any]]] = {}
  for ln, n, at in tl["runs"]: runs.setdefault(ln, []).append([at, names[n]])
  stage_items = [(s["st"], s["en"], _stage_title(s["name"], s["realize"]), stage_url(s["name"], s["realize"])) for s in tl["stages"]]
  lanes = [_lane("stages", "stages", stage_items)]
  for i, lane in enumerate(tl["lanes"]):
    if i == 0 or (i not in by_lane and i not in runs): continue
    kind = "host" if lane in HOST_LANES else "device"
    view = _lane(lane, kind, by_lane.get(i, []))
    view["runs"] = sorted(runs.get(i, []))
    lanes.append(view)
  ends = [x for s in tl["stages"] for x in (s["en"],)] + [en for _, _, _, en in tl["ranges"]] + [at for _, _, at in tl["runs"]]
  memory = [{"device": d, "points": [[at, n] for at, n in pts], "peak": max((n for _, n in pts), default=0)}
            for d, pts in tl["memory"].items() if any(n for _, n in pts)]  # a device whose buffers held nothing: no chart
  return {"lanes": lanes, "memory": memory, "end": max(ends, default=0.0), "left_out": tl["left_out"], "busiest": busiest(tl)}

def _stage_title(name: str, realize: int | None) -> str:
  return name if realize is None else f"{name} · realize {realize + 1}"

def kind_of(name: str) -> str:
  """A span's name without what tells one instance from another: "do_to_program for r_16_16" is do_to_program, "Schedule 3 Kernels n2"
  is Schedule."""
  return re.sub(r"( \d+ \w+)? n\d+$", "", name.split(" for ", 1)[0])

def busiest(tl: Timeline, n: int = 12) -> list[dict[str, Any]]:
  """tinygrad's host work by kind (kind_of), the most time first: each kind's spans summed, a span inside another of the same kind
  counted once (its outer one holds it). Where a slow trace's seconds went, at a glance."""
  names, total, count = tl["names"], dict[str, float](), dict[str, int]()
  host = {i for i, lane in enumerate(tl["lanes"]) if lane == "tinygrad"}
  open_until: dict[str, float] = {}
  for ln, k, st, en in tl["ranges"]:  # sorted by start
    if ln not in host: continue
    name = kind_of(names[k])
    count[name] = count.get(name, 0) + 1
    if st < open_until.get(name, float("-inf")): continue  # nested in a span of the same name, already counted
    total[name] = total.get(name, 0.0) + (en - st)
    open_until[name] = en
  return [{"name": k, "us": v, "count": count[k]} for k, v in sorted(total.items(), key=lambda kv: -kv[1])[:n]]
