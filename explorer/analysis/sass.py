"""A record's SASS beside its UOps: each instruction's source line (explorer.tracing.compilers.nvdisasm) carried through the record's line map to
the UOps that wrote that line, the UOps with the most instructions, and two records' SASS side by side (the diff, the studies).

A line the renderer wrote for several UOps gives its instructions to each of them: instructions per UOp count an instruction once for
every UOp of its line, so they say where the code came from, not a partition of it."""
from __future__ import annotations
import re
from collections import Counter
from typing import Any
from typing_extensions import TypedDict
from explorer.schema import Sass, TargetRecord, pressure_of, sass_in

HEAVIEST = 12  # UOps listed by instruction count
_LISTING_OP = re.compile(r"^\s*(\d+)\s+Ops\.(\w+)")

class Summary(TypedDict):
  """What a comparison needs of a record's SASS (summary)."""
  count: int
  peak_live: int | None
  registers: int | None
  spills: int
  mix: dict[str, int]
  estimate: int | None


def sass_of(rec: TargetRecord) -> Sass | None:
  return sass_in(facts) if (facts := rec["compile"]) is not None else None

def estimate(rec: TargetRecord) -> int | None:
  """The UOp-level peak of live values (the record's pressure: absent until its analysis is computed)."""
  return p["max_live"] if (p := pressure_of(rec)) else None

def uop_labels(rec: TargetRecord) -> dict[int, str]:
  """Each linear UOp's op by its index, from the record's listing ("476 MUL")."""
  out = {}
  for row in rec["uops_listing"]:
    if m := _LISTING_OP.match(row): out[int(m.group(1))] = m.group(2)
  return out

def view(rec: TargetRecord) -> dict[str, Any] | None:
  """The record's SASS with, per instruction, its line, live and ulive (None where the facts have none) and the UOps of its line
  (where the line map numbers the same source as the SASS lines do); the UOps with the most instructions, and per source line its
  instructions' offsets. None when the record has no SASS."""
  if (sass := sass_of(rec)) is None: return None
  by_line = {int(ln): list(ix) for ln, ix in rec.get("line_map") or []} if sass["lines_of"] == "cuda" else {}  # a map: once analysed
  labels = uop_labels(rec)
  instructions: list[dict[str, Any]] = []
  per_uop: Counter[int] = Counter()
  lines: dict[int, list[int]] = {}
  for ins in sass["instructions"]:
    line = ins.get("line")  # line, live and ulive: absent where nvdisasm recorded none
    uops = by_line.get(line, []) if line is not None else []
    instructions.append({**ins, "line": line, "live": ins.get("live"), "ulive": ins.get("ulive"), "uops": uops})
    per_uop.update(uops)
    if line is not None: lines.setdefault(line, []).append(ins["offset"])
  heaviest = sorted(per_uop.items(), key=lambda kv: (-kv[1], kv[0]))[:HEAVIEST]
  return {**{k: v for k, v in sass.items() if k != "instructions"}, "instructions": instructions, "uops_mapped": bool(by_line),
          "heaviest": [{"uop": u, "op": labels.get(u), "instructions": n} for u, n in heaviest], "lines": lines, "line_uops": by_line,
          "estimate": estimate(rec)}

def summary(rec: TargetRecord | None) -> Summary | None:
  """What a comparison needs of a record's SASS: instructions, peak live registers, ptxas' registers, spills, the mix, and the UOp-level
  live-values estimate beside them (explorer.tracing.pipeline.trace's pressure: values, not registers)."""
  if rec is None or (sass := sass_of(rec)) is None: return None
  return {"count": sass["count"], "peak_live": sass["peak_live"], "registers": sass["registers"], "spills": sass["spills"],
          "mix": sass["mix"], "estimate": estimate(rec)}

def compare(a: TargetRecord | None, b: TargetRecord | None) -> dict[str, Any] | None:
  """Two records' SASS side by side: each summary and, per opcode family of either, the counts (most in either first)."""
  sa, sb = summary(a), summary(b)
  if sa is None and sb is None: return None
  ma, mb = Counter(sa["mix"] if sa else {}), Counter(sb["mix"] if sb else {})  # a mix names only the families a kernel has
  fams = sorted(set(ma) | set(mb), key=lambda f: (-max(ma[f], mb[f]), f))
  return {"a": sa, "b": sb, "mix": [{"op": f, "a": ma[f], "b": mb[f]} for f in fams]}
