"""Admitting traces and saying where one stands: what was asked resolved against this server's devices and limits, served from the
store where it is there, else started or joined as a job (explorer.web.services.traces); and a trace's status, whichever of the
job manager and the store holds it. The HTTP edge turns a request's body into an `Asked` and these answers into responses."""
from __future__ import annotations
import asyncio
from dataclasses import dataclass
from typing import Any
from explorer.schema import TraceRecord
from explorer.spec import COMPUTE_DEVICES, ConvSpec, Variant, resolve_request
from explorer.stages import STAGES
from explorer.store import trace_key
from explorer.web.services.registry import Services
from explorer.web.services.traces import TraceTask, stored_job_status
from explorer.web.urls import trace_url

@dataclass(frozen=True)
class Asked:
  """A trace as a request asks for it, before this server resolves it: its spec, its variant (device as written) and the request
  as it is stored (what a rerun submits again)."""
  spec: ConvSpec
  variant: Variant
  request: dict[str, Any]

async def stored_trace(svc: Services, trace_id: str, light: bool = False) -> TraceRecord | None:
  """The stored trace, parsed (whole, or light: its kernels' light halves, explorer.store.pieces), off the event loop."""
  return await asyncio.to_thread(svc.traces.get, trace_id, light)

def stages_of_trace(trace: TraceRecord) -> list[dict[str, str]]:
  failed = {f["stage"]: f["error"] for f in trace["failures"]}
  seconds = trace["stage_seconds"]
  rows = []
  for s in STAGES:
    if s in failed: rows.append({"stage": s, "status": "error", "detail": failed[s]})
    elif s in seconds: rows.append({"stage": s, "status": "done", "detail": f"{seconds[s]:.2f}s"})
    else: rows.append({"stage": s, "status": "skipped", "detail": ""})
  return rows

def job_status(job: TraceTask) -> dict[str, Any]: return {**job.view(), "url": trace_url(job.id), "cached": False}

async def status_of(svc: Services, trace_id: str) -> dict[str, Any] | None:
  """queued/running (from the job), done (from the store) or error (a job that failed without a trace); None: unknown id."""
  job = svc.jobs.get(trace_id)
  if job is not None and job.active: return job_status(job)
  trace = await stored_trace(svc, trace_id)
  if trace is not None:
    failures = trace["failures"]
    error = f"stage {failures[0]['stage']} failed: {failures[0]['error']}" if failures else None
    return {"id": trace_id, "status": "done", "url": trace_url(trace_id), "label": trace["label"], "cached": True,
            "stages": stages_of_trace(trace), "error": error}
  if job is not None: return job_status(job)
  row = await asyncio.to_thread(svc.jobs.stored, trace_id)  # failed, interrupted, or another server's
  return {**stored_job_status(row), "url": trace_url(trace_id), "cached": False} if row is not None else None

async def submit_all(svc: Services, asked: list[Asked], client: str | None) -> list[tuple[dict[str, Any], bool]]:
  """Several traces admitted together (a diff's two variants): each served from the store where it is there; the others admitted as
  one by the job manager (all or none of them start) and started or joined. (status, started_now) per trace. This host's devices
  are listed (once, in a worker) only where a variant names a device; SpecError where one does not resolve."""
  resolved = []
  for a in asked:
    offered = COMPUTE_DEVICES if a.variant.device is None else await svc.devices.accepted()
    spec, variant, _ = resolve_request(a.spec, a.variant, svc.settings, offered)
    resolved.append((trace_key(spec, variant), spec, variant, a.request))
  stored = {tid: status for tid, *_ in resolved if (status := await _stored_status(svc, tid)) is not None}
  pending = [r for r in resolved if r[0] not in stored]
  new = {tid for tid, *_ in pending if (job := svc.jobs.get(tid)) is None or not job.active}  # read with the admission: no await between
  jobs = {job.id: job for job in await svc.jobs.submit_all(pending, client)}
  return [(stored[tid], False) if tid in stored else (job_status(jobs[tid]), tid in new) for tid, *_ in resolved]

async def _stored_status(svc: Services, trace_id: str) -> dict[str, Any] | None:
  """The status of a stored trace of this id (None: none is stored; a corrupt row is dropped, to trace again)."""
  if not await asyncio.to_thread(svc.store.has_trace, trace_id): return None
  try:
    if await stored_trace(svc, trace_id) is not None: return (await status_of(svc, trace_id)) or {}
  except Exception:  # a corrupt row: drop it and trace again
    await asyncio.to_thread(svc.store.delete_trace, trace_id)
    svc.traces.forget(trace_id)
  return None
