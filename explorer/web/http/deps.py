"""The routes' dependencies (Annotated aliases: a route names what it needs in its signature) and what the HTTP edge makes of a request
before the services take it: a stored trace by id or 404/409, a request body turned into what it asks for (explorer.web.services.admission
admits it), a stored request validated again for a rerun."""
from __future__ import annotations
import asyncio
from collections.abc import Sequence
from typing import Annotated, Any, cast
from fastapi import Depends, HTTPException, Request
from fastapi.responses import JSONResponse
from explorer.schema import KernelRecord, TraceRecord, target_records
from explorer.settings import Settings
from explorer.spec import COMPUTE_DEVICES, ConvSpec, Variant, checked_device, resolve_request
from explorer.targets import TARGETS
from explorer.web.http.access import has_token, is_loopback
from explorer.web.http.models import TraceRequest
from explorer.web.http.templates import Templates
from explorer.web.http.work import WorkGate
from explorer.web.services import admission
from explorer.web.services.enrichments import EnrichmentFailed, EnrichmentUnavailable
from explorer.web.services.registry import Services

# async: FastAPI runs a plain `def` dependency in its thread pool, where every request would queue behind the pages being rendered
async def services(request: Request) -> Services: return cast(Services, request.app.state.services)
def templates_of(request: Request) -> Templates: return cast(Templates, request.app.state.templates)
async def templates(request: Request) -> Templates: return templates_of(request)

ServicesDep = Annotated[Services, Depends(services)]
TemplatesDep = Annotated[Templates, Depends(templates)]

async def trace_of(svc: Services, trace_id: str, light: bool = False) -> TraceRecord:
  """The stored trace; 409 while it runs, 404 when there is none."""
  if (trace := await admission.stored_trace(svc, trace_id, light)) is None:
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

async def enrichment_job(svc: Services, trace_id: str, trace: TraceRecord, kind: str, target: str, n: int, work: WorkGate) -> JSONResponse:
  """Start (or follow) computing kernel n's `kind` on `target` (EnrichmentService.follow): 202 with the task while it runs; 409 where
  it cannot be computed or it failed (said once: the next request tries again); 404 for a target there is none of. Starting one needs
  the request's permit (403 cross-site); following one that runs does not."""
  if target not in TARGETS: raise HTTPException(404, f"unknown target {target!r}; known: {', '.join(TARGETS)}")
  try: return JSONResponse(svc.enrichments.follow(trace_id, trace, kind, target, n, work.permit), status_code=202)
  except (EnrichmentUnavailable, EnrichmentFailed) as e: raise HTTPException(409, str(e)) from None

def resolved(req: TraceRequest, settings: Settings, offered: Sequence[str] = COMPUTE_DEVICES) -> tuple[ConvSpec, Variant]:
  """Spec and variant (its device normalized: the key hashes it), validated with this server's limits and `offered` devices
  (explorer.spec.resolve_request; SpecError -> 422)."""
  spec, variant, _ = resolve_request(req.to_spec(), req.variant.to_variant(), settings, offered)
  return spec, variant

async def device_here(svc: Services, device: str, field: str) -> str:
  """device in its normal form (CPU:0 is CPU), when this server accepts it; else SpecError (422) naming what it offers."""
  return checked_device(device, await svc.devices.accepted(), field)

def asked(req: TraceRequest) -> admission.Asked:
  """What a request body asks for, as the admission takes it (its device as written: the admission resolves it)."""
  return admission.Asked(req.to_spec(), req.variant.to_variant(), req.model_dump(mode="json", exclude_defaults=True))

async def submit(svc: Services, req: TraceRequest, client: str | None) -> tuple[dict[str, Any], bool]:
  """Start (or join, or serve from the store) the trace of this request (explorer.web.services.admission): (status, started_now)."""
  return (await admission.submit_all(svc, [asked(req)], client))[0]

async def submit_all(svc: Services, reqs: list[TraceRequest], client: str | None) -> list[tuple[dict[str, Any], bool]]:
  """submit for several requests admitted together (a diff's two variants): all or none of them start."""
  return await admission.submit_all(svc, [asked(r) for r in reqs], client)

def client_of(request: Request) -> str | None: return request.client.host if request.client else None

def stored_request(request: dict[str, Any]) -> tuple[ConvSpec, Variant]:
  """A job's stored request as its spec and variant, its device normalized (it was checked when it was accepted)."""
  req = TraceRequest.model_validate(request)
  spec, variant, _ = resolve_request(req.to_spec(), req.variant.to_variant(), None)
  return spec, variant

async def rerun(svc: Services, trace_id: str, client: str | None) -> tuple[dict[str, Any], bool]:
  """Submit an accepted job's stored request again (an interrupted or failed one); a stored trace is served as it is."""
  if (row := await asyncio.to_thread(svc.jobs.stored, trace_id)) is None or row["request"] is None:
    if await admission.stored_trace(svc, trace_id) is not None: return (await admission.status_of(svc, trace_id)) or {}, False
    raise HTTPException(404, f"no trace {trace_id}")
  try: req = TraceRequest.model_validate(row["request"])
  except ValueError as e: raise HTTPException(409, f"the stored request of {trace_id} no longer validates: {str(e).splitlines()[0]}") from None
  return await submit(svc, req, client)

__all__ = ["LightTrace", "ServicesDep", "StoredTrace", "TemplatesDep", "target_records"]
