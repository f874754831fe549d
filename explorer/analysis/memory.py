"""The schedule's memory over time: each buffer is alive from the call that first writes it to the last call that reads it, and the
bytes alive at each step of the schedule give the peak. Read off a trace's buffers and schedule (no tinygrad).

The program's own buffers (input, weight, output) exist before and after the schedule, so they are alive throughout; an intermediate
lives only between its writer and its last reader, and those are what fusing removes."""
from __future__ import annotations
from typing import Any
from explorer.schema import TraceRecord, schedule_role, target_record

HELD = ("input", "weight", "output")  # the program holds these for the whole schedule

def over_schedule(trace: TraceRecord, target: str | None = None) -> dict[str, Any]:
  """{steps: [{index, kind, name, role, live_bytes}], buffers: [{index, name, role, nbytes, start, end}], peak_bytes, peak_step,
  intermediate_bytes, held_bytes}. A step is one call of the schedule (a kernel or a copy), a kernel's named as its record on `target`
  names it where it has one (a diff on CUDA names its kernels CUDA's way throughout); a buffer is alive at the steps start..end."""
  sched, bufs = trace["schedule"], trace["buffers"]
  last = max(len(sched) - 1, 0)
  spans, delta = [], [0] * (len(sched) + 2)  # bytes that come alive at a step, minus those that died after the one before: one sweep
  for b in bufs:
    if b["role"] in HELD: start, end = 0, last
    else:
      start = min(b["written_by"], default=0)
      end = max([*b["read_by"], *b["written_by"]], default=last)
    spans.append({"index": b["index"], "name": b["name"], "role": b["role"], "nbytes": b["nbytes"], "start": start, "end": end})
    delta[min(start, len(sched))] += b["nbytes"]
    delta[min(end, last) + 1] -= b["nbytes"]
  steps: list[dict[str, Any]] = []
  alive = 0
  for i, s in enumerate(sched):
    alive += delta[i]
    steps.append({"index": s["index"], "kind": s["kind"], "name": _named(trace, s, target), "role": schedule_role(s), "live_bytes": alive})
  peak = max(steps, key=lambda s: s["live_bytes"], default=None)
  return {"steps": steps, "buffers": spans, "peak_bytes": peak["live_bytes"] if peak else 0, "peak_step": peak["index"] if peak else None,
          "intermediate_bytes": sum(x["nbytes"] for x in spans if x["role"] == "intermediate"),
          "held_bytes": sum(x["nbytes"] for x in spans if x["role"] in HELD)}

def _named(trace: TraceRecord, row: Any, target: str | None) -> str:
  kernels, k = trace["kernels"], row.get("kernel")
  if target is not None and isinstance(k, int) and 0 <= k < len(kernels) and (rec := target_record(kernels[k], target)) is not None:
    return str(rec["name"])
  return str(row["name"] or row["kind"])

def compare(a: TraceRecord, b: TraceRecord, target: str | None = None) -> dict[str, Any]:
  """Two traces' timelines (kernels named on `target`) and what B saves against A (positive: B needs less)."""
  ta, tb = over_schedule(a, target), over_schedule(b, target)
  return {"a": ta, "b": tb, "peak_saved": ta["peak_bytes"] - tb["peak_bytes"],
          "intermediate_saved": ta["intermediate_bytes"] - tb["intermediate_bytes"]}
