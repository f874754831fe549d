"""Scheduling a kernel by hand: POST its opts (a job, in a worker: tinygrad's own apply_opts), GET the result, and the kernel page's
Opts panel fragment (the result beside the kernel's own record: name, dims, registers, peak live values, UOps, time ratio, source diff)."""
from __future__ import annotations
import asyncio
import difflib
from typing import Any, Literal
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse
from explorer.schema import KernelRecord, host_target, target_records
from explorer.spec import HAND_OPTS_QUERY, SpecError, hand_opts, split_opts
from explorer.web.http import deps
from explorer.web.http.deps import ServicesDep, StoredTrace, templates_of
from explorer.web.http.models import NOT_FOUND, HandOptsRequest, HandSchedule, OptsJob, documented
from explorer.web.http.work import Work
from explorer.web.services.enrichments import EnrichmentUnavailable
from explorer.web.urls import trace_tour_url

api = APIRouter(prefix="/api", tags=["api"])
router = APIRouter(include_in_schema=False)

def _target(kernel: KernelRecord, target: str | None) -> str: return target or host_target(kernel)

def _opts(text: str | None) -> tuple[str, ...]: return hand_opts(split_opts(text))

def _answer(svc: Any, trace_id: str, n: int, target: str, start: str, opts: tuple[str, ...]) -> Any:
  """200 with the stored result, 202 with the running job, the job's failure (422: tinygrad refused an opt, 409: it failed), or None."""
  if (got := svc.enrichments.stored_opts(trace_id, n, target, start, opts)) is not None: return got
  if (job := svc.enrichments.opts_status(trace_id, n, target, start, opts)) is None: return None
  if job.status == "error":
    svc.enrichments.forget_opts(trace_id, n, target, start, opts)  # said once; asking again tries again
    refused = job.error and not job.error.startswith(("the worker", "WorkerFailed"))
    raise HTTPException(422 if refused and "(opt " in job.error else 409, f"scheduling kernel {n} by hand failed: {job.error}")
  if job.status == "done" and job.result is not None: return job.result
  return JSONResponse(job.view(), status_code=202)

RESPONSES = {202: {"model": OptsJob, "description": "being computed, in a worker: poll GET with the same target, opts and from"},
             **documented({**NOT_FOUND, 404: "no trace with this id or no kernel n in it (GET: or this schedule was never asked for)",
                           409: "the trace is still running, the kernel cannot be scheduled again here, or computing failed (the detail "
                                "says why)", 422: "an opt is not OP:AXIS:ARG, or tinygrad refused it (its reason, which opt)"})}

@api.post("/traces/{trace_id}/kernels/{n}/opts", response_model=HandSchedule, summary="Schedule a kernel by hand: apply opts, see the result",
          responses=RESPONSES)
async def post_opts(trace_id: str, trace: StoredTrace, n: int, body: HandOptsRequest, svc: ServicesDep, work: Work) -> Any:
  """Start (or follow) the kernel through tinygrad's codegen with `from`'s opts then `opts`, on `target`: 202 with the job, then (GET)
  200 with the record; on the trace's own target and device it is also timed interleaved with the original opts."""
  k = deps.kernel_or_404(trace, n)
  target, opts = _target(k, body.target), hand_opts(body.opts, body.start)
  if (got := _answer(svc, trace_id, n, target, body.start, opts)) is not None: return got
  try: svc.enrichments.start_opts(trace_id, trace, n, target, body.start, opts, work.permit(), on_device=not svc.settings.queue)
  except EnrichmentUnavailable as e: raise HTTPException(409, str(e)) from None
  return _answer(svc, trace_id, n, target, body.start, opts)

@api.get("/traces/{trace_id}/kernels/{n}/opts", response_model=HandSchedule, summary="A kernel scheduled by hand (POST asks for it)",
         responses=RESPONSES)
async def get_opts(trace_id: str, trace: StoredTrace, n: int, svc: ServicesDep, target: str | None = Query(None, max_length=16),
                   opts: str | None = Query(None, max_length=400, pattern=HAND_OPTS_QUERY, description="OP:AXIS:ARG,... (UPCAST:0:4,LOCAL:1:8)"),
                   start: Literal["current", "none", "heuristic"] = Query("current", alias="from")) -> Any:
  k = deps.kernel_or_404(trace, n)
  try: wanted = _opts(opts), hand_opts([], start)
  except SpecError as e: raise HTTPException(422, str(e)) from None
  if (got := _answer(svc, trace_id, n, _target(k, target), start, wanted[0])) is None:
    raise HTTPException(404, f"kernel {n} was not scheduled with these opts on {_target(k, target)}: POST them first")
  return got

@api.post("/traces/{trace_id}/kernels/{n}/opts/tour", summary="Pin a computed hand schedule to the trace's tour (a step of its own)",
          responses=documented({**NOT_FOUND, 404: "no trace, no kernel n, or this schedule was not computed (POST .../opts first)",
                                422: "an opt is not OP:AXIS:ARG"}))
async def pin_to_tour(trace_id: str, trace: StoredTrace, n: int, body: HandOptsRequest, svc: ServicesDep) -> dict[str, Any]:
  k = deps.kernel_or_404(trace, n)
  target, opts = _target(k, body.target), hand_opts(body.opts, body.start)
  if svc.enrichments.stored_opts(trace_id, n, target, body.start, opts) is None:
    raise HTTPException(404, f"kernel {n} was not scheduled with these opts on {target}: POST .../opts first")
  pins = await asyncio.to_thread(svc.enrichments.add_to_tour, trace_id, n, target, body.start, opts)
  return {"tour": trace_tour_url(trace_id), "pinned": len(pins)}

def compared_schedules(own: dict[str, Any], got: dict[str, Any], own_label: str) -> dict[str, Any]:
  """What opts_result.html shows: the hand schedule (B) beside A (the kernel's own record, or another schedule) and their source diff."""
  diff = list(difflib.unified_diff((own.get("source") or "").splitlines(), got["record"]["source"].splitlines(), own_label, "by hand",
                                   lineterm="", n=2))
  return {"own": own, "got": got, "own_label": own_label, "diff": diff}

@router.get("/t/{trace_id}/k/{n}/opts", response_class=HTMLResponse)
async def opts_fragment(request: Request, trace_id: str, trace: StoredTrace, n: int, svc: ServicesDep, target: str | None = None,
                        opts: str | None = Query(None, max_length=400), start: str = Query("current", alias="from"),
                        vs: str | None = Query(None, max_length=400), vs_from: str = Query("none", max_length=16)) -> HTMLResponse:
  """The Opts panel's result: the hand schedule beside the kernel's own record on the target, or (vs, vs_from) beside another hand
  schedule of it, computed earlier: two schedules diffed."""
  k = deps.kernel_or_404(trace, n)
  target = _target(k, target)
  try: wanted, other = _opts(opts), None if vs is None else _opts(vs)
  except SpecError as e: raise HTTPException(422, str(e)) from None
  got = svc.enrichments.stored_opts(trace_id, n, target, start, wanted)
  if got is None: raise HTTPException(404, "not computed yet: POST the opts first")
  against = None if other is None else svc.enrichments.stored_opts(trace_id, n, target, vs_from, other)
  own: dict[str, Any] = dict(against["record"] if against is not None else target_records(k).get(target) or {})
  label = "original" if against is None else f"by hand: {', '.join(against['opts']) or 'no opts'}"
  return templates_of(request).TemplateResponse(request, "_partials/opts_result.html",
                                                {**compared_schedules(own, got, label), "target": target, "trace_id": trace_id, "n": n,
                                                 "vs": None if against is None else ",".join(against["opts"])})
