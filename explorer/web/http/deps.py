"""Lookups the API and the pages share: a trace or its job by id, its status, request resolution."""
from __future__ import annotations
import asyncio, dataclasses
from typing import Sequence
from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse
from explorer.settings import Settings
from explorer.spec import COMPUTE_DEVICES, TARGETS, ConvSpec, SpecError, Variant, device_problem, normalize_device
from explorer.store import trace_key
from explorer.web.http.access import has_token, is_loopback
from explorer.web.services.devices import DevicesUnavailable
from explorer.web.services.targets import TargetUnavailable
from explorer.web.services.traces import STAGES, Job, stored_job_status
from explorer.web.http.models import TraceRequest
from explorer.web.http.work import WorkGate

def trace_url(trace_id: str) -> str: return f"/t/{trace_id}"

def trusted(request: Request) -> bool:
  """A token holder (when the server has a token), else a loopback client: those may see server details such as paths."""
  if token := request.app.state.settings.token: return has_token(request, str(token))
  return request.client is None or is_loopback(request.client.host)

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

TARGET_FIELDS = ("name", "opts", "global_size", "local_size", "linear_uops", "ops", "flops", "bytes", "lds", "passes", "uops_listing")

def host_target(kernel: dict) -> str: return kernel.get("host_target") or "host"

def target_records(kernel: dict) -> dict[str, dict]:
  """Every target's record of a kernel (kernels[i].targets); a trace of schema 1 has the host's only, made from its kernel fields."""
  if kernel.get("targets"): return kernel["targets"]
  return {"host": {**{f: kernel.get(f) for f in TARGET_FIELDS}, "source": (kernel.get("sources") or {}).get("host", ""), "arch": None,
                   "notes": ["recorded before per-target records (trace schema 1): the other targets have their source only"], "compile": None}}

async def target_job(request: Request, trace_id: str, trace: dict, target: str, work: WorkGate) -> JSONResponse:
  """Start (or follow) computing `target` for a stored trace: 202 with the job while it runs; the error as a 409 if it failed. Starting
  one needs the request's permit (403 cross-site); following one that runs does not."""
  service = request.app.state.targets
  if (job := service.status(trace_id, target)) is None:  # (a done job whose target the trace read here lacks: stored since, poll again)
    if target not in TARGETS: raise HTTPException(404, f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    try: job = service.start(trace_id, trace, target, work.permit())
    except TargetUnavailable as e: raise HTTPException(404 if target not in TARGETS else 409, str(e)) from None
  if job["status"] == "error":
    service.forget(trace_id, target)  # said once; the next request tries again
    raise HTTPException(409, f"computing {target} failed: {job['error']}")
  return JSONResponse(job, status_code=202)

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
  if job is not None: return job_status(job)
  row = await asyncio.to_thread(request.app.state.store.get_job, trace_id)  # failed, interrupted, or another server's
  return {**stored_job_status(row), "url": trace_url(trace_id), "cached": False} if row is not None else None

def resolve_request(req: TraceRequest, settings: Settings, offered: Sequence[str] = COMPUTE_DEVICES) -> tuple[ConvSpec, Variant]:
  """Spec and variant, validated with this server's limits and devices (SpecError -> 422). The variant is kept as asked, its device
  normalized (CPU:0 is CPU): the key hashes it."""
  spec, variant = req.to_spec(), req.variant.to_variant()
  if variant.device is not None:
    try: device = normalize_device(variant.device)
    except SpecError as e: raise SpecError(f"variant.device: {e}") from None
    if (why := device_problem(device, offered)) is not None: raise SpecError(f"variant.device: {why}")
    variant = dataclasses.replace(variant, device=device)
  spec.validate(memory_budget=int(settings.memory_budget_mb) << 20)
  variant.validate(max_repeats=int(settings.max_repeats), max_beam=int(settings.max_beam))
  variant.resolve(spec)  # raises where Winograd does not apply and fallback is off
  return spec, variant

async def offered_devices(request: Request) -> list[str]:
  try: return await request.app.state.devices.offered()
  except DevicesUnavailable as e: raise HTTPException(503, str(e), headers={"Retry-After": "30"}) from None

async def accepted_devices(request: Request) -> list[str]:
  """The devices a request may name (explorer.web.services.devices: this host's, or every one when queue workers run the jobs)."""
  try: return await request.app.state.devices.accepted()
  except DevicesUnavailable as e: raise HTTPException(503, str(e), headers={"Retry-After": "30"}) from None

async def checked_device(request: Request, device: str, field: str) -> str:
  """device in its normal form (CPU:0 is CPU), when this server accepts it; else SpecError (422) naming what it accepts. This host's
  devices are listed (once, in a worker) only for the name of a compute device, or to say what is accepted."""
  async def accepted() -> str:
    try: return ", ".join(await request.app.state.devices.accepted()) or "none"
    except DevicesUnavailable: return "this host's compute devices (they could not be listed just now)"
  try: normal = normalize_device(device)
  except SpecError as e: raise SpecError(f"{field}: {e}; this server offers: {await accepted()}") from None
  if normal.split(":")[0] not in COMPUTE_DEVICES:
    raise SpecError(f"{field}: device {normal.split(':')[0]} is not offered here; this server offers: {await accepted()}")
  if (why := device_problem(normal, await accepted_devices(request))) is not None: raise SpecError(f"{field}: {why}")
  return normal

async def submit(request: Request, req: TraceRequest) -> tuple[dict, bool]:
  """Start (or join, or serve from the store) the trace of this request. Returns (status, started_now)."""
  asked = req.variant.to_variant().device
  device = await checked_device(request, asked, "variant.device") if asked is not None else None
  spec, variant = resolve_request(req, request.app.state.settings, [device.split(":")[0]] if device else COMPUTE_DEVICES)
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
  client = request.client.host if request.client else None
  job = await jobs.submit(trace_id, spec, variant, req.model_dump(mode="json", exclude_defaults=True), client)
  return job_status(job), not joined

def stored_request(request: dict) -> tuple[ConvSpec, Variant]:
  """A job's stored request as its spec and variant (it validated when it was accepted)."""
  req = TraceRequest.model_validate(request)
  return req.to_spec(), req.variant.to_variant()

async def rerun(request: Request, trace_id: str) -> tuple[dict, bool]:
  """Submit an accepted job's stored request again (an interrupted or failed one); a stored trace is served as it is."""
  if (row := await asyncio.to_thread(request.app.state.store.get_job, trace_id)) is None or row["request"] is None:
    if await stored_trace(request, trace_id) is not None: return (await status_of(request, trace_id)) or {}, False
    raise HTTPException(404, f"no trace {trace_id}")
  try: req = TraceRequest.model_validate(row["request"])
  except ValueError as e: raise HTTPException(409, f"the stored request of {trace_id} no longer validates: {str(e).splitlines()[0]}") from None
  return await submit(request, req)

def light_trace(trace_id: str, trace: dict) -> dict:
  """The trace without the heavy per-kernel fields (sources, UOp listings, passes): those are under /kernels/{n}."""
  heavy = ("sources", "uops_listing", "passes")
  kernels = [{k: v for k, v in kern.items() if k not in heavy} | {"targets": sorted(kern.get("sources") or {}),
                                                                   "n_passes": len(kern.get("passes") or [])} for kern in trace.get("kernels") or []]
  sched = dict(trace.get("scheduler") or {})
  sched.pop("passes", None)
  if "groups" in sched: sched["groups"] = [{"name": g["name"], "passes": len(g.get("passes") or [])} for g in sched["groups"]]
  return {"id": trace_id, "url": trace_url(trace_id), **trace, "kernels": kernels, "scheduler": sched}
