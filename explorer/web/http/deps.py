"""The routes' dependencies (Annotated aliases: a route names what it needs in its signature) and the lookups pages and the API share:
a trace or its job by id, its status, a request turned into a spec and a variant and submitted."""
from __future__ import annotations
import asyncio
from typing import Annotated, Any, cast
from collections.abc import Sequence
from fastapi import Depends, HTTPException, Request
from fastapi.responses import JSONResponse
from explorer.schema import KernelRecord, TraceRecord, target_records
from explorer.settings import Settings
from explorer.spec import COMPUTE_DEVICES, ENRICH_FACTS, ENRICH_TARGET, TARGETS, ConvSpec, Variant, checked_device, resolve_request
from explorer.store import trace_key
from explorer.web.http.access import has_token, is_loopback
from explorer.web.http.models import TraceRequest
from explorer.web.http.templates import Templates
from explorer.web.urls import trace_url
from explorer.web.http.work import WorkGate
from explorer.web.services.registry import Services
from explorer.web.services.enrichments import EnrichmentUnavailable
from explorer.web.services.traces import STAGES, Job, stored_job_status

# async: FastAPI runs a plain `def` dependency in its thread pool, where every request would queue behind the pages being rendered
async def services(request: Request) -> Services: return cast(Services, request.app.state.services)
def templates_of(request: Request) -> Templates: return cast(Templates, request.app.state.templates)
async def templates(request: Request) -> Templates: return templates_of(request)

ServicesDep = Annotated[Services, Depends(services)]
TemplatesDep = Annotated[Templates, Depends(templates)]

async def stored_trace(svc: Services, trace_id: str, light: bool = False) -> TraceRecord | None:
  """The stored trace, parsed (whole, or light: its kernels' light halves, explorer.store.pieces), off the event loop."""
  return await asyncio.to_thread(svc.traces.get, trace_id, light)

async def trace_of(svc: Services, trace_id: str, light: bool = False) -> TraceRecord:
  """The stored trace; 409 while it runs, 404 when there is none."""
  if (trace := await stored_trace(svc, trace_id, light)) is None:
    job = svc.jobs.get(trace_id)
    if job is not None and job.active: raise HTTPException(409, f"trace {trace_id} is still {job.status}")
    raise HTTPException(404, f"no trace {trace_id}")
  return trace

async def trace_or_404(trace_id: str, svc: ServicesDep) -> TraceRecord: return await trace_of(svc, trace_id)

async def light_trace_or_404(trace_id: str, svc: ServicesDep) -> TraceRecord: return await trace_of(svc, trace_id, light=True)

StoredTrace = Annotated[TraceRecord, Depends(trace_or_404)]  # the route's {trace_id}, stored (404 or 409 otherwise)
LightTrace = Annotated[TraceRecord, Depends(light_trace_or_404)]  # the same, read light: its kernels without sources, listings, passes

def kernel_or_404(trace: TraceRecord, n: int) -> KernelRecord:
  """Kernel n as the trace has it (read light: without its sources, listing and passes); 404 where there is none."""
  kernels = trace["kernels"]
  if not 0 <= n < len(kernels): raise HTTPException(404, f"trace has no kernel {n} (it has {len(kernels)})")
  return kernels[n]

async def whole_kernel(svc: Services, trace_id: str, trace: TraceRecord, n: int) -> KernelRecord:
  """Kernel n whole (a trace read light: with its heavy half, one row read); 404 where there is none."""
  kernel_or_404(trace, n)
  return await asyncio.to_thread(svc.traces.kernel, trace_id, trace, n)

def trusted(request: Request, settings: Settings) -> bool:
  """A token holder (when the server has a token), else a loopback client: those may see server details such as paths."""
  if token := settings.token: return has_token(request, str(token))
  return request.client is None or is_loopback(request.client.host)

WHAT = {ENRICH_TARGET: "rendering kernel {n} for {target}", ENRICH_FACTS: "compiling kernel {n} for {target}"}

async def enrichment_job(svc: Services, trace_id: str, trace: TraceRecord, kind: str, target: str, n: int, work: WorkGate) -> JSONResponse:
  """Start (or follow) computing kernel n's `kind` on `target` (explorer.web.services.enrichments): 202 with the job while it runs;
  its error as a 409 if it failed (said once: the next request tries again). Starting one needs the request's permit (403
  cross-site); following one that runs does not."""
  kernels = (n,)
  if (job := svc.enrichments.status(trace_id, kind, target, kernels)) is None:  # (a done job the trace read here lacks: stored since)
    if target not in TARGETS: raise HTTPException(404, f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    try: job = svc.enrichments.start(trace_id, trace, kind, target, kernels, work.permit())
    except EnrichmentUnavailable as e: raise HTTPException(409, str(e)) from None
  if job.status == "error":
    svc.enrichments.forget(trace_id, kind, target, kernels)
    raise HTTPException(409, f"{WHAT.get(kind, 'the {kind} of kernel {n} on {target}').format(n=n, target=target, kind=kind)} failed: {job.error}")
  return JSONResponse(svc.enrichments.view(job), status_code=202)

def stages_of_trace(trace: TraceRecord) -> list[dict[str, str]]:
  failed = {f["stage"]: f["error"] for f in trace["failures"]}
  seconds = trace["stage_seconds"]
  rows = []
  for s in STAGES:
    if s in failed: rows.append({"stage": s, "status": "error", "detail": failed[s]})
    elif s in seconds: rows.append({"stage": s, "status": "done", "detail": f"{seconds[s]:.2f}s"})
    else: rows.append({"stage": s, "status": "skipped", "detail": ""})
  return rows

def job_status(job: Job) -> dict[str, Any]: return {**job.view(), "url": trace_url(job.id), "cached": False}

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

def resolved(req: TraceRequest, settings: Settings, offered: Sequence[str] = COMPUTE_DEVICES) -> tuple[ConvSpec, Variant]:
  """Spec and variant (its device normalized: the key hashes it), validated with this server's limits and `offered` devices
  (explorer.spec.resolve_request; SpecError -> 422)."""
  spec, variant, _ = resolve_request(req.to_spec(), req.variant.to_variant(), settings, offered)
  return spec, variant

async def device_here(svc: Services, device: str, field: str) -> str:
  """device in its normal form (CPU:0 is CPU), when this server accepts it; else SpecError (422) naming what it offers."""
  return checked_device(device, await svc.devices.accepted(), field)

async def submit(svc: Services, req: TraceRequest, client: str | None) -> tuple[dict[str, Any], bool]:
  """Start (or join, or serve from the store) the trace of this request. Returns (status, started_now). This host's devices are
  listed (once, in a worker) only where the request names a device."""
  return (await submit_all(svc, [req], client))[0]

async def submit_all(svc: Services, reqs: list[TraceRequest], client: str | None) -> list[tuple[dict[str, Any], bool]]:
  """submit for several requests admitted together (a diff's two variants): each served from the store where it is there; the others
  admitted as one by the job manager (all or none of them start) and started or joined. (status, started_now) per request."""
  resolved = []
  for req in reqs:
    asked = req.variant.to_variant()
    offered = COMPUTE_DEVICES if asked.device is None else await svc.devices.accepted()
    spec, variant, _ = resolve_request(req.to_spec(), asked, svc.settings, offered)
    resolved.append((trace_key(spec, variant), spec, variant, req.model_dump(mode="json", exclude_defaults=True)))
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

def client_of(request: Request) -> str | None: return request.client.host if request.client else None

def stored_request(request: dict[str, Any]) -> tuple[ConvSpec, Variant]:
  """A job's stored request as its spec and variant, its device normalized (it was checked when it was accepted)."""
  req = TraceRequest.model_validate(request)
  spec, variant, _ = resolve_request(req.to_spec(), req.variant.to_variant(), None)
  return spec, variant

async def rerun(svc: Services, trace_id: str, client: str | None) -> tuple[dict[str, Any], bool]:
  """Submit an accepted job's stored request again (an interrupted or failed one); a stored trace is served as it is."""
  if (row := await asyncio.to_thread(svc.jobs.stored, trace_id)) is None or row["request"] is None:
    if await stored_trace(svc, trace_id) is not None: return (await status_of(svc, trace_id)) or {}, False
    raise HTTPException(404, f"no trace {trace_id}")
  try: req = TraceRequest.model_validate(row["request"])
  except ValueError as e: raise HTTPException(409, f"the stored request of {trace_id} no longer validates: {str(e).splitlines()[0]}") from None
  return await submit(svc, req, client)

__all__ = ["LightTrace", "ServicesDep", "StoredTrace", "TemplatesDep", "target_records"]
