"""Lookups the API and the pages share: a trace or its job by id, its status, request resolution."""
from __future__ import annotations
import asyncio
from fastapi import HTTPException, Request
from explorer.settings import Settings
from explorer.spec import ConvSpec, Variant
from explorer.store import trace_key
from explorer.web.jobs import STAGES, Job
from explorer.web.models import TraceRequest

def trace_url(trace_id: str) -> str: return f"/t/{trace_id}"

async def stored_trace(request: Request, trace_id: str) -> dict | None:
  return await asyncio.to_thread(request.app.state.traces.get, trace_id)

async def trace_or_404(request: Request, trace_id: str) -> dict:
  if (trace := await stored_trace(request, trace_id)) is None:
    job = request.app.state.jobs.get(trace_id)
    if job is not None and job.status in ("queued", "running"): raise HTTPException(409, f"trace {trace_id} is still {job.status}")
    raise HTTPException(404, f"no trace {trace_id}")
  return trace

def kernel_or_404(trace: dict, n: int) -> dict:
  kernels = trace.get("kernels") or []
  if not 0 <= n < len(kernels): raise HTTPException(404, f"trace has no kernel {n} (it has {len(kernels)})")
  return kernels[n]

def stages_of_trace(trace: dict) -> list[dict]:
  failed = {f["stage"]: f["error"] for f in trace.get("failures") or []}
  seconds = trace.get("stage_seconds") or {}
  rows = []
  for s in STAGES:
    if s in failed: rows.append({"stage": s, "status": "error", "detail": failed[s]})
    elif s in seconds: rows.append({"stage": s, "status": "done", "detail": f"{seconds[s]:.2f}s"})
    else: rows.append({"stage": s, "status": "skipped", "detail": ""})
  return rows

def job_status(job: Job) -> dict:
  return {**job.snapshot(), "url": trace_url(job.id), "cached": False}

async def status_of(request: Request, trace_id: str) -> dict | None:
  """queued/running (from the job), done (from the store) or error (a job that failed without a trace); None: unknown id."""
  job = request.app.state.jobs.get(trace_id)
  if job is not None and job.status in ("queued", "running"): return job_status(job)
  trace = await stored_trace(request, trace_id)
  if trace is not None:
    failures = trace.get("failures") or []
    error = f"stage {failures[0]['stage']} failed: {failures[0]['error']}" if failures else None
    return {"id": trace_id, "status": "done", "url": trace_url(trace_id), "label": trace.get("label"), "cached": True,
            "stages": stages_of_trace(trace), "error": error}
  return job_status(job) if job is not None else None

def resolve_request(req: TraceRequest, settings: Settings) -> tuple[ConvSpec, Variant]:
  """Spec and variant, validated with this server's limits (SpecError -> 422). The variant is kept as asked: the key hashes it."""
  spec, variant = req.to_spec(), req.variant.to_variant()
  spec.validate(memory_budget=int(settings.memory_budget_mb) << 20)
  variant.validate(max_repeats=int(settings.max_repeats), max_beam=int(settings.max_beam))
  variant.resolve(spec)  # raises where Winograd does not apply and fallback is off
  return spec, variant

async def submit(request: Request, req: TraceRequest) -> tuple[dict, bool]:
  """Start (or join, or serve from the store) the trace of this request. Returns (status, started_now)."""
  spec, variant = resolve_request(req, request.app.state.settings)
  trace_id = trace_key(spec, variant)
  store, jobs = request.app.state.store, request.app.state.jobs
  if await asyncio.to_thread(store.has_trace, trace_id):
    try:
      if await stored_trace(request, trace_id) is not None:
        return (await status_of(request, trace_id)) or {}, False
    except Exception:  # a corrupt row: drop it and trace again
      await asyncio.to_thread(store.delete_trace, trace_id)
      request.app.state.traces.forget(trace_id)
  existing = jobs.get(trace_id)
  joined = existing is not None and existing.status in ("queued", "running")
  job = jobs.submit(trace_id, spec, variant)
  return job_status(job), not joined

def light_trace(trace_id: str, trace: dict) -> dict:
  """The trace without the heavy per-kernel fields (sources, UOp listings, passes): those are under /kernels/{n}."""
  heavy = ("sources", "uops_listing", "passes")
  kernels = [{k: v for k, v in kern.items() if k not in heavy} | {"targets": sorted(kern.get("sources") or {}),
                                                                   "n_passes": len(kern.get("passes") or [])} for kern in trace.get("kernels") or []]
  sched = dict(trace.get("scheduler") or {})
  sched.pop("passes", None)
  if "groups" in sched: sched["groups"] = [{"name": g["name"], "passes": len(g.get("passes") or [])} for g in sched["groups"]]
  return {"id": trace_id, "url": trace_url(trace_id), **trace, "kernels": kernels, "scheduler": sched}
