"""A captured program as a whole (explorer.tracing.pipeline.program): its kernels by the model line that made them, forward, backward and optimizer
told apart, the top kernels, a timeline and memory over the program, and search. Read off the trace's data alone (no tinygrad), in
time linear in its kernels and buffers, once per parsed trace (explorer.web.services.registry.TraceCache.derived), and what a kernel's
provenance decides once per distinct provenance (per_provenance)."""
from __future__ import annotations
import heapq
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from explorer.analysis.roofline import Peaks
from explorer.schema import KernelRecord, TraceRecord, kernel_runs, own_provenance, provenance_of, via_of
from explorer.text import provenance_sites

PHASES = ("forward", "backward", "optimizer", "other")


def phase(k: KernelRecord) -> str:
  """forward, backward (the gradient pass made its UOps), optimizer (made inside an nn.optim step) or other (no metadata of its own)."""
  entries = own_provenance(k)
  if not entries: return "other"
  if any(e["backward"] for e in entries): return "backward"
  if all(via_of(e).startswith("nn.optim") for e in entries): return "optimizer"  # `via` only where the user called another
  return "forward"

T = TypeVar("T")

def per_provenance(fn: Callable[[KernelRecord], T]) -> Callable[[KernelRecord], T]:
  """fn of a kernel that reads only its provenance, computed once per provenance list: a program's repeated kernels share theirs when
  read from the store (explorer.store.pieces), so a 10,000-kernel loop of 73 kernels computes it 73 times. For one pass over a trace
  (the key is the list's identity, good while the trace is alive)."""
  seen: dict[int, T] = {}
  def once(k: KernelRecord) -> T:
    key = id(k.get("provenance") or ())
    if key not in seen: seen[key] = fn(k)
    return seen[key]
  return once

def sites(k: KernelRecord) -> list[str]:
  """The user's lines a kernel's provenance names ("model.py:14"), in source order."""
  return [site for site, _ in provenance_sites(provenance_of(k))]

def matches(k: KernelRecord, query: str) -> bool:
  """A kernel matches a search by its name, a function of its provenance, or a file:line (the file by its name or its path)."""
  q = query.strip().lower()
  return not q or q in k["name"].lower() or _provenance_matches(k, q)

def _provenance_matches(k: KernelRecord, q: str) -> bool:
  """By a function, what the line called, an ONNX node's op or name, or a line: the model's, the program's that ran it, a backward's."""
  for e in provenance_of(k):
    if q in e["fn"].lower() or q in via_of(e).lower(): return True
    if (node := e.get("onnx")) is not None and (q == node["op"].lower() or q in node["name"].lower()): return True
    for where in (e, e.get("caller"), e.get("backward_line")):
      if where and where["file"] and _line_matches(where["file"], where["line"], q): return True
  return False

def _line_matches(file: str, line: int | None, q: str) -> bool:
  name = os.path.basename(file)
  return q in f"{file}:{line}".lower() or q in f"{name}:{line}".lower() or q == name.lower()

def search(kernels: Sequence[KernelRecord], query: str) -> list[KernelRecord]:
  q = query.strip().lower()
  if not q: return list(kernels)
  by_provenance = per_provenance(lambda k: _provenance_matches(k, q))
  return [k for k in kernels if q in k["name"].lower() or by_provenance(k)]

def kernel_seconds(k: KernelRecord, peaks: Peaks | None) -> tuple[float | None, bool]:
  """A kernel's time: its measured median, else an estimate from its FLOPs and bytes against the device's roofs (the slower of the
  two); (None, False) when neither is known. The flag says it was estimated."""
  if (t := k["time_s"]) is not None: return t["median"], False
  if peaks and peaks["fp32"] and peaks["bw"]: return max(k["flops"] / peaks["fp32"], k["bytes"] / peaks["bw"]), True
  return None, False

def kernels_as_run(trace: TraceRecord, peaks: Peaks | None) -> dict[str, Any]:
  """The kernels as they ran: each one's seconds (measured or estimated), start, phase and realize; the program's total."""
  rows, at, phase_of = [], 0.0, per_provenance(phase)
  for k in trace["kernels"]:
    s, estimated = kernel_seconds(k, peaks)
    rows.append({"index": k["index"], "name": k["name"], "realize": k.get("realize", 0), "phase": phase_of(k), "seconds": s,  # a program's
                 "estimated": estimated, "start": at})
    at += s or 0.0
  return {"kernels": rows, "total_s": at, "estimated": any(r["estimated"] for r in rows), "known": all(r["seconds"] is not None for r in rows)}

MAX_MARKS = 1000  # a timeline draws at most this many marks: past it, each mark is a run of consecutive kernels

def marks(tl: dict[str, Any], at_most: int = MAX_MARKS) -> list[dict[str, Any]]:
  """The timeline's marks as the page draws them: a mark per kernel, or, for a program of more kernels than `at_most`, a mark per run of
  consecutive kernels (as many kernels each as it takes to stay under `at_most` marks), spanning their seconds, in the phase most of
  them are in and the realize of the first: the drawing stays a few hundred KB whatever the program's length."""
  rows = tl["kernels"]
  per = -(-len(rows) // at_most) if len(rows) > at_most else 1
  out = []
  for i in range(0, len(rows), per):
    run = rows[i:i + per]
    phases = [r["phase"] for r in run]
    secs = [r["seconds"] for r in run]
    out.append({"index": run[0]["index"], "last": run[-1]["index"], "name": run[0]["name"] if per == 1 else f"{len(run)} kernels",
                "realize": run[0]["realize"], "phase": max(PHASES, key=phases.count), "estimated": any(r["estimated"] for r in run),
                "seconds": None if any(x is None for x in secs) else sum(secs), "start": run[0]["start"]})
  return out

def summary(trace: TraceRecord, peaks: Peaks | None) -> dict[str, Any]:
  """What a program's overview shows of the whole program, whatever page of its kernel table or search it is on: the timeline (with its
  marks), kernels by model line, the top kernels, memory over the program and each kernel's phase. Computed once per stored trace by
  its reader (explorer.web.services.registry.TraceCache.derived), not per request."""
  tl = kernels_as_run(trace, peaks)
  return {"timeline": {**tl, "marks": marks(tl)}, "by_line": by_line(trace, peaks), "top": top(trace, 10, peaks), "memory": memory(trace),
          "phases": {r["index"]: r["phase"] for r in tl["kernels"]}}  # the timeline's rows have each kernel's phase already

def by_line(trace: TraceRecord, peaks: Peaks | None = None) -> list[dict[str, Any]]:
  """Kernels grouped by the user's line their own provenance names, in source order; kernels with none of their own under "(no
  line)". A kernel made from two lines is listed under each, but its seconds count as `shared_s` there, not `seconds`: the lines'
  `seconds` plus each shared kernel once add up to the timeline's total."""
  groups: dict[str, dict[str, Any]] = {}
  lines_of, named = per_provenance(_lines), set[tuple[int, str]]()  # (a provenance's lines, one of them): its functions added
  for k in trace["kernels"]:
    sites, phase_of_k = lines_of(k)
    seconds = kernel_seconds(k, peaks)[0] or 0.0
    for site, fns in sites:
      if (g := groups.get(site)) is None:
        g = groups[site] = {"site": site, "kernels": [], "fns": [], "flops": 0, "bytes": 0, "seconds": 0.0, "shared": 0, "shared_s": 0.0,
                            "phases": dict.fromkeys(PHASES, 0)}
      g["kernels"].append(k["index"])
      g["flops"] += k["flops"]
      g["bytes"] += k["bytes"]
      g["seconds" if len(sites) == 1 else "shared_s"] += seconds
      g["shared"] += len(sites) > 1
      g["phases"][phase_of_k] += 1
      if (id(sites), site) not in named:  # (the same for every kernel of this provenance: once)
        named.add((id(sites), site))
        g["fns"] += [f for f in fns if f not in g["fns"]]
  def order(site: str) -> tuple[bool, str, int]:
    file, _, line = site.rpartition(":")
    return (site == "(no line)", file, int(line) if line.isdigit() else 0)
  return [groups[s] for s in sorted(groups, key=order)]

def _lines(k: KernelRecord) -> tuple[list[tuple[str, list[str]]], str]:
  """What by_line reads of a kernel's provenance: its own lines with their functions (a line named twice, with each one's), and its
  phase."""
  sites: dict[str, list[str]] = {}
  for site, fns in provenance_sites(own_provenance(k)): sites.setdefault(site, []).extend(fns)
  return list(sites.items()) or [("(no line)", [])], phase(k)

def totals(kernels: Sequence[KernelRecord], peaks: Peaks | None) -> dict[str, Any]:
  """What a table of these kernels adds up to: FLOPs, bytes, linear UOps and seconds (measured or estimated, each kernel once)."""
  seconds = [kernel_seconds(k, peaks)[0] for k in kernels]
  return {"kernels": len(kernels), "flops": sum(k["flops"] for k in kernels), "bytes": sum(k["bytes"] for k in kernels),
          "linear_uops": sum(k["linear_uops"] for k in kernels), "seconds": sum(s or 0.0 for s in seconds),
          "known": all(s is not None for s in seconds)}

def top(trace: TraceRecord, n: int = 10, peaks: Peaks | None = None) -> dict[str, list[KernelRecord]]:
  """The top n kernels by time (measured or estimated), FLOPs and bytes, like tinygrad's `viz.cli -t`."""
  ks = trace["kernels"]
  seconds = {k["index"]: kernel_seconds(k, peaks)[0] or 0.0 for k in ks}
  def pick(key: Callable[[KernelRecord], float]) -> list[KernelRecord]: return heapq.nlargest(n, ks, key=key)  # sorted(...)[:n], ties included
  return {"time": pick(lambda k: seconds[k["index"]]), "flops": pick(lambda k: k["flops"]), "bytes": pick(lambda k: k["bytes"])}

def memory(trace: TraceRecord) -> dict[str, Any]:
  """Buffers alive over the program (from the call that first writes a buffer to its last use; buffers the program neither writes nor
  only holds, alive throughout), by a sweep over the schedule: the bytes alive per call, the peak, and the user's line that allocated
  the largest buffer alive at the peak (its writer's provenance)."""
  sched, bufs = trace["schedule"], trace["buffers"]
  last = max(len(sched) - 1, 0)
  delta = [0] * (len(sched) + 1)
  spans = []
  for b in bufs:
    start = min(b["written_by"], default=0) if b["role"] == "intermediate" else 0
    end = max([*b["read_by"], *b["written_by"]], default=last) if b["role"] == "intermediate" else last
    spans.append((start, end, b))
    delta[start] += b["nbytes"]
    delta[end + 1] -= b["nbytes"]
  alive, live = 0, []
  for i in range(len(sched)):
    alive += delta[i]
    live.append(alive)
  peak_step = max(range(len(live)), key=live.__getitem__) if live else None
  at_peak = [b for s, e, b in spans if peak_step is not None and s <= peak_step <= e and b["written_by"]]
  largest = max(at_peak, key=lambda b: b["nbytes"], default=None)
  kernel_of = {k["call"]: k for k in trace["kernels"]}
  writer = kernel_of.get(largest["written_by"][0]) if largest else None
  return {"live_bytes": live, "peak_bytes": live[peak_step] if peak_step is not None else 0, "peak_step": peak_step,
          "peak_buffer": None if largest is None else {"index": largest["index"], "name": largest["name"], "nbytes": largest["nbytes"],
                                                       "kernel": writer["index"] if writer else None,
                                                       "sites": sites(writer) if writer else []}}

def bound_values(trace: TraceRecord, k: KernelRecord) -> list[dict[str, Any]]:
  """A symbolic kernel's variables, each with its bounds and the values it ran with, in order (schema.kernel_runs), each run with the
  wall seconds of its step (the whole realize or TinyJit run) and, where the capture was timed, the kernel's own time alone at that
  run's values (KernelRecord.times_at)."""
  if not (variables := k.get("variables")): return []
  alone = [(t["variables"], t["time_s"]) for t in k.get("times_at") or []]
  def at(values: dict[str, int]) -> Any: return next((t for vs, t in alone if all(values.get(n) == v for n, v in vs.items())), None)
  runs = kernel_runs(trace, k)
  return [{"name": name, "min": lo, "max": hi,
           "runs": [{"how": how, "value": vals.get(name), "seconds": secs, "alone": None if how.startswith("captured") else at(vals)}
                    for how, vals, secs in runs]}
          for name, (lo, hi) in variables.items()]
