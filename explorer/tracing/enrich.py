"""Enrichments: what a trace does not compute while tinygrad runs, but when a page, the API or a command first asks for it. A cold trace
records what tinygrad itself does; one kernel's compile facts for one target (a real compiler of this machine on the record's source:
registers, spills, occupancy, disassembly) are computed here, in a worker, and kept by whoever asked (the store's enrichments table,
a trace file, the caller's trace): spec.ENRICH_FACTS. A target a trace did not ask for is computed by explorer.tracing.run.targets_in_worker."""
from __future__ import annotations
import os
from typing import Any, Iterable
from explorer.tracing.workers import Limits, Progress, call_in_worker

Job = dict[str, Any]  # {"kernel", "target", "name", "source", "arch", "local_size", "ptx"}: what one kernel's compile needs

def facts_jobs(trace: dict[str, Any], targets: Iterable[str] | None = None, kernels: Iterable[int] | None = None) -> list[Job]:
  """The compiles these kernels' records need on these targets (default: every kernel, every target it has): those without facts."""
  wanted = None if kernels is None else set(kernels)
  jobs = []
  for k in trace.get("kernels") or []:
    if wanted is not None and k.get("index") not in wanted: continue
    for t, rec in (k.get("targets") or {}).items():
      if (targets is not None and t not in targets) or rec.get("compile") is not None: continue
      jobs.append({"kernel": k["index"], "target": t, "name": rec["name"], "source": rec["source"], "arch": rec.get("arch") or "",
                   "local_size": rec.get("local_size"), "ptx": rec.get("compiled_source")})
  return jobs

def facts_in_worker(progress: Progress, jobs: list[Job]) -> list[dict[str, Any]]:
  """Each job's compile facts (explorer.tracing.compilers.compile_target), in order. tinygrad is imported only for NVRTC's bindings."""
  from explorer.tracing import compilers
  nvrtc = None
  if any(j["target"] == "cuda" for j in jobs) and (lib := compilers.nvrtc_library()) is not None:
    os.environ.setdefault("NVRTC_PATH", str(lib))  # read when tinygrad is imported
    if (header := compilers.nvidia_file("*/include/cuda_fp16.h")) is not None: os.environ["KERNEL_EXPLORER_CUDA_INCLUDE"] = str(header.parent)
    from explorer.tracing import adapter as tg
    nvrtc = tg.nvrtc_compiler()
  out = []
  for i, j in enumerate(jobs):
    progress("compile", "start", f"{i + 1} of {len(jobs)}: {j['name']} for {j['target']}")
    out.append(compilers.compile_target(j["target"], j["source"], j["arch"], compilers.block_threads(j["local_size"]), j.get("ptx"), nvrtc))
  progress("compile", "done", f"{len(jobs)} compiled")
  return out

def compute_facts(jobs: list[Job], progress: Progress | None = None, limits: Limits | None = None,
                  timeout_s: float | None = None) -> dict[tuple[int, str], dict[str, Any]]:
  """The jobs' compile facts, computed in a fresh worker: {(kernel, target): facts}."""
  if not jobs: return {}
  got, _ = call_in_worker("explorer.tracing.enrich:facts_in_worker", {"jobs": jobs}, progress, timeout_s, limits=limits)
  return {(j["kernel"], j["target"]): f for j, f in zip(jobs, got)}

def with_facts(trace: dict[str, Any], facts: dict[tuple[int, str], dict[str, Any]]) -> dict[str, Any]:
  """The trace with the facts on their records (kernels[kernel].targets[target].compile): a copy along the changed records' paths,
  the trace given is left as it was (callers share traces)."""
  if not facts: return trace
  kernels = []
  for k in trace.get("kernels") or []:
    if mine := {t: f for (n, t), f in facts.items() if n == k.get("index") and t in (k.get("targets") or {})}:
      k = {**k, "targets": {t: {**rec, "compile": mine[t]} if t in mine else rec for t, rec in k["targets"].items()}}
    kernels.append(k)
  return {**trace, "kernels": kernels}

def add_facts(trace: dict[str, Any], targets: Iterable[str] | None = None, kernels: Iterable[int] | None = None,
              progress: Progress | None = None, limits: Limits | None = None, timeout_s: float | None = None) -> dict[str, Any]:
  """The trace with compile facts on the records that lacked them (these targets and kernels; default all), computed in a worker."""
  return with_facts(trace, compute_facts(facts_jobs(trace, targets, kernels), progress, limits, timeout_s))
