"""Enrichments: what a trace does not compute while tinygrad runs, but when a page, the API or a command first asks for it, per kernel,
target and kind, each in a worker, kept by whoever asked (the store's enrichments table, a trace file, the caller's trace). A cold trace
records what tinygrad itself does; the kinds (explorer.stages.ENRICH_KINDS):
- target: a kernel's record on another target than the trace's own (its AST rebuilt from the trace's rewrite blob, then that target's
  codegen with rewrite tracking, as an eager trace renders it; the record says which rewrite blob its passes address);
- analysis: a record's line map, live values, loop splits and program spec, read from the rewrite blob its codegen was recorded in;
- facts: a record's compile facts (a real compiler of this machine on its source: registers, spills, occupancy, disassembly)."""
from __future__ import annotations
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast
from explorer.stages import ANALYSIS_MARK, Progress, lacks_facts
from explorer.tracing import versions
from explorer.tracing.workers.process import Limits, Live, call_in_worker

if TYPE_CHECKING:
  from explorer.schema import KernelRecord, TargetRecord, TraceRecord  # types only: pydantic stays out of trace workers

KernelWork = dict[str, Any]  # {"kernel", "target", "name", "source", "arch", "local_size", "ptx"}: what one kernel's compile needs

def each_record(trace: TraceRecord, targets: Iterable[str] | None = None,
                kernels: Iterable[int] | None = None) -> Iterator[tuple[KernelRecord, str, TargetRecord]]:
  """(kernel, target, record) for these kernels' records on these targets (default: every kernel, every target it has)."""
  wanted = None if kernels is None else set(kernels)
  for k in trace.get("kernels") or []:
    if wanted is not None and k.get("index") not in wanted: continue
    for t, rec in (k.get("targets") or {}).items():
      if targets is None or t in targets: yield k, t, rec

def with_values(trace: TraceRecord, values: dict[tuple[int, str], Any], put: Callable[[TargetRecord, Any], TargetRecord]) -> TraceRecord:
  """The trace with each (kernel, target) value put on its record (put(record, value): the new record): a copy along the changed
  records' paths, the trace given is left as it was (callers share traces)."""
  if not values: return trace
  kernels: list[KernelRecord] = []
  for k in trace.get("kernels") or []:
    if mine := {t: v for (n, t), v in values.items() if n == k.get("index") and t in (k.get("targets") or {})}:
      k = {**k, "targets": {t: put(rec, mine[t]) if t in mine else rec for t, rec in k["targets"].items()}}
    kernels.append(k)
  return {**trace, "kernels": kernels}

def facts_jobs(trace: TraceRecord, targets: Iterable[str] | None = None, kernels: Iterable[int] | None = None) -> list[KernelWork]:
  """The compiles these kernels' records need on these targets (default: every kernel, every target it has): those without facts."""
  return [{"kernel": k["index"], "target": t, "name": rec["name"], "source": rec["source"], "arch": rec.get("arch") or "",
           "local_size": rec.get("local_size"), "ptx": rec.get("compiled_source")}
          for k, t, rec in each_record(trace, targets, kernels) if lacks_facts(rec, t)]

def facts_in_worker(progress: Progress, jobs: list[KernelWork]) -> list[dict[str, Any]]:
  """Each job's compile facts (explorer.tracing.compilers.toolchain.compile_target), in order. tinygrad is imported only for NVRTC's bindings."""
  from explorer.tracing.compilers import toolchain
  nvrtc = None
  if any(j["target"] == "cuda" for j in jobs) and (lib := toolchain.nvrtc_library()) is not None:
    os.environ.setdefault("NVRTC_PATH", str(lib))  # read when tinygrad is imported
    if (header := toolchain.nvidia_file("*/include/cuda_fp16.h")) is not None: os.environ["KERNEL_EXPLORER_CUDA_INCLUDE"] = str(header.parent)
    from explorer.tracing import tg
    nvrtc = tg.nvrtc_compiler()
  out = []
  for i, j in enumerate(jobs):
    progress("compile", "start", f"{i + 1} of {len(jobs)}: {j['name']} for {j['target']}")
    out.append(toolchain.compile_target(j["target"], j["source"], j["arch"], toolchain.block_threads(j["local_size"]), j.get("ptx"), nvrtc))
  progress("compile", "done", f"{len(jobs)} compiled")
  return out

def compute_facts(jobs: list[KernelWork], progress: Progress | None = None, limits: Limits | None = None,
                  timeout_s: float | None = None, live: Live | None = None) -> dict[tuple[int, str], dict[str, Any]]:
  """The jobs' compile facts, computed in a fresh worker (held in live while it runs): {(kernel, target): facts}."""
  if not jobs: return {}
  got, _ = call_in_worker("explorer.tracing.enrichments.enrich:facts_in_worker", {"jobs": jobs}, progress, timeout_s, limits=limits, live=live)
  return {(j["kernel"], j["target"]): f for j, f in zip(jobs, got, strict=False)}

def with_facts(trace: TraceRecord, facts: dict[tuple[int, str], dict[str, Any]]) -> TraceRecord:
  """The trace with the facts on their records (kernels[kernel].targets[target].compile), a copy (with_values)."""
  return with_values(trace, facts, lambda rec, f: {**rec, "compile": f})

def add_facts(trace: TraceRecord, targets: Iterable[str] | None = None, kernels: Iterable[int] | None = None,
              progress: Progress | None = None, limits: Limits | None = None, timeout_s: float | None = None) -> TraceRecord:
  """The trace with compile facts on the records that lacked them (these targets and kernels; default all), computed in a worker."""
  return with_facts(trace, compute_facts(facts_jobs(trace, targets, kernels), progress, limits, timeout_s))

# ***** the analysis of a record: line map, live values, loop splits, program spec (explorer.schema.Analysis) *****

def blob_key(kernel: KernelRecord, target: str) -> str | None:
  """The rewrite blob a kernel's record on `target` addresses (its passes' groups, its UOps' numbers): the trace's own (None) for the
  host's record, the record's `rewrites` for one computed on first view, else the target's (rendered with the trace)."""
  rec = kernel.get("targets", {}).get(target)
  return None if target == kernel.get("host_target") else str(rec is not None and rec.get("rewrites") or target)

def analysis_jobs(trace: TraceRecord, targets: Iterable[str] | None = None, kernels: Iterable[int] | None = None) -> list[KernelWork]:
  """The analyses these kernels' records need on these targets (default: every kernel and target): those without one, recorded with
  the numbers an analysis rebuilds them by (trace schema 2 and later)."""
  return [{"kernel": k["index"], "target": t, "blob": blob_key(k, t), "arch": rec.get("arch") or "", "source": rec["source"],
           "linear_nums": rec["linear_nums"], "program_sink": rec["program_sink"], "passes": rec.get("passes") or []}
          for k, t, rec in each_record(trace, targets, kernels)
          if lacks_analysis(k, t, rec)]

def lacks_analysis(kernel: KernelRecord, target: str, rec: TargetRecord) -> bool:
  """Whether a record's analysis is still to compute and can be: it has none, and keeps the numbers it is rebuilt by (a kernel read
  light names the targets whose records do: explorer.store.pieces)."""
  if ANALYSIS_MARK in rec or rec.get("program_sink") is None: return False
  return target in kernel["light"].get("analysable", []) if "light" in kernel else rec.get("linear_nums") is not None

def analysis_in_worker(progress: Progress, jobs: list[KernelWork], blobs: dict[str, bytes]) -> list[Any]:
  """Each job's analysis, in order, from the blob its record was recorded in (blobs: by key, "" the trace's own)."""
  from explorer.tracing import tg
  loaded: dict[str, Any] = {}
  out = []
  for i, j in enumerate(jobs):
    progress("analysis", "start", f"{i + 1} of {len(jobs)}: kernel {j['kernel']} on {j['target']}")
    key = j["blob"] or ""
    if key not in loaded: loaded[key] = tg.RewriteBlob(blobs[key])
    passes = [tg.Pass(p["group"], p["step"], p["name"], p["depth"], p["matches"], p["sink"]) for p in j["passes"]]
    out.append(tg.blob_analysis(loaded[key], j["linear_nums"], j["program_sink"], j["source"], tg.render_target(j["target"], j["arch"]), passes))
  progress("analysis", "done", f"{len(jobs)} analysed")
  return out

def compute_analysis(jobs: list[KernelWork], blobs: dict[str, bytes], progress: Progress | None = None, limits: Limits | None = None,
                     timeout_s: float | None = None, tinygrad: str | None = None, live: Live | None = None) -> dict[tuple[int, str], dict[str, Any]]:
  """The jobs' analyses, computed in a fresh worker (held in live while it runs): {(kernel, target): analysis}. blobs: every blob
  the jobs name ("" the trace's); tinygrad: the one that recorded them (versions.recorded)."""
  if not jobs: return {}
  got, _ = call_in_worker("explorer.tracing.enrichments.enrich:analysis_in_worker", {"jobs": jobs, "blobs": blobs}, progress, timeout_s,
                          limits=limits, tinygrad=tinygrad, live=live)
  return {(j["kernel"], j["target"]): a for j, a in zip(jobs, got, strict=False)}

def add_analysis(trace: TraceRecord, blobs: dict[str, bytes], targets: Iterable[str] | None = None, kernels: Iterable[int] | None = None,
                 progress: Progress | None = None, limits: Limits | None = None, timeout_s: float | None = None) -> TraceRecord:
  """The trace with analyses on the records that lacked one (these targets and kernels; default all) and whose rewrite blob is among
  blobs ("" the trace's own), computed in a worker."""
  jobs = [j for j in analysis_jobs(trace, targets, kernels) if (j["blob"] or "") in blobs]
  return with_analysis(trace, compute_analysis(jobs, blobs, progress, limits, timeout_s, versions.recorded(trace)))

def with_analysis(trace: TraceRecord, analyses: dict[tuple[int, str], dict[str, Any]]) -> TraceRecord:
  """The trace with the analyses on their records, a copy (with_values)."""
  return with_values(trace, analyses, lambda rec, a: cast("TargetRecord", {**rec, **a}))

# ***** a kernel's record on a target the trace did not render *****

def target_in_worker(progress: Progress, blob: bytes, sinks: dict[int, int], target: str, arch: str, opt: str, rewrites: list[str],
                     beam_opts: dict[int, list[str]] | None = None) -> tuple[dict[int, Any], bytes]:
  """Kernels' records on `target`, their ASTs rebuilt from the trace's rewrite blob (sinks: kernel -> its AST's trace number) and
  rendered as an eager trace renders them (explorer.tracing.pipeline.renders), in this fresh process: {kernel: record, or {"error": ...}} and
  this process's rewrite blob, which the records' passes address. beam_opts: under BEAM, each kernel's opts chosen on the device."""
  from explorer.tracing import tg
  from explorer.tracing.pipeline.renders import _render_target
  order = sorted(sinks)
  progress("render", "start", f"{len(order)} kernel(s) on {target}")
  records, out_blob = _render_target(tg.recorded_sinks(blob, [sinks[n] for n in order]), target, arch, opt, tuple(rewrites), None,
                                     [beam_opts[n] for n in order] if beam_opts is not None else None)
  progress("render", "done", target)
  return dict(zip(order, records, strict=True)), out_blob

def compute_target(trace: TraceRecord, blob: bytes, target: str, kernels: Iterable[int], progress: Progress | None = None,
                   limits: Limits | None = None, timeout_s: float | None = None,
                   live: Live | None = None) -> tuple[dict[int, dict[str, Any]], str, bytes]:
  """These kernels' records on `target`, computed in a fresh worker (held in live while it runs): ({kernel: record}, the key their
  rewrite blob is kept under, that blob). Each record names the blob (`rewrites`)."""
  from explorer.spec import Variant
  variant = Variant.from_dict(trace["variant"])
  ks = {n: trace["kernels"][n] for n in kernels}
  beam = variant.opt.startswith("beam:")
  args = {"blob": blob, "sinks": {n: k["ast_sink"] for n, k in ks.items()}, "target": target, "arch": variant.arch(target), "opt": variant.opt,
          "rewrites": list(variant.rewrites), "beam_opts": {n: k.get("opts") or [] for n, k in ks.items()} if beam else None}
  (records, out_blob), _ = call_in_worker("explorer.tracing.enrichments.enrich:target_in_worker", args, progress, timeout_s, limits=limits,
                                          tinygrad=versions.recorded(trace), live=live)
  key = f"{target}@{uuid.uuid4().hex[:10]}"
  for rec in records.values():
    if "error" not in rec: rec["rewrites"] = key
  return records, key, out_blob

def with_target(trace: TraceRecord, target: str, records: dict[int, dict[str, Any]]) -> TraceRecord:
  """The trace with these kernels' records on `target` (or their errors) in place: a copy along the changed kernels (callers share
  traces)."""
  from explorer.store import add_target_record
  kernels: list[KernelRecord] = []
  for k in trace.get("kernels") or []:
    if (rec := records.get(k["index"])) is not None:
      k = {**k, "targets": dict(k.get("targets") or {}), "source_errors": dict(k.get("source_errors") or {})}
      if "light" not in k: k["sources"] = dict(k["sources"])  # a kernel read light has none: its `light` names them
      add_target_record(k, target, rec)
    kernels.append(k)
  return {**trace, "kernels": kernels}

def lacking(trace: TraceRecord, target: str, kernels: Iterable[int] | None = None) -> list[int]:
  """The kernels (of these; default all) with no record on `target` yet."""
  wanted = None if kernels is None else set(kernels)
  return [k["index"] for k in trace.get("kernels") or [] if (wanted is None or k["index"] in wanted) and target not in (k.get("targets") or {})
          and target not in (k.get("source_errors") or {})]
