"""What the scheduler did: the tensor graph it was handed, its rangeify passes, and the bufferize decisions (STAGEs created, fused and
kept; buffers; the kernel graph), each page beside its JSON."""
from __future__ import annotations
import asyncio
from typing import Any
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from explorer.analysis import memory
from explorer.web.http import deps
from explorer.web.http.deps import ServicesDep, StoredTrace
from explorer.web.http.models import NOT_FOUND, documented
from explorer.web.routes.common import asked_pass, rangeify_passes, stepper, trace_page
from explorer.web.services.graphs import MAX_STEPS
from explorer.web.urls import graph_api_url, trace_api_url

api = APIRouter(prefix="/api", tags=["api"])
router = APIRouter(include_in_schema=False)

@router.get("/t/{trace_id}/graph/tensor", response_class=HTMLResponse)
async def tensor_graph(request: Request, trace_id: str, svc: ServicesDep) -> HTMLResponse:
  return await trace_page(request, svc, trace_id, "tensor.html", "tensor", api=graph_api_url(trace_id, "tensor"))

@router.get("/t/{trace_id}/rangeify", response_class=HTMLResponse)
async def rangeify(request: Request, trace_id: str, svc: ServicesDep, at: str | None = None) -> HTMLResponse:
  trace = await deps.stored_trace(svc, trace_id)
  passes = rangeify_passes(trace) if trace is not None else []
  step = stepper(passes, "rangeify", asked_pass(request), at, preferred="symbolic+reduce_collapse+debuf", trace_id=trace_id)
  return await trace_page(request, svc, trace_id, "rangeify.html", "rangeify", step=step, api=f"{trace_api_url(trace_id)}/rangeify")

@api.get("/traces/{trace_id}/rangeify", summary="The scheduler's rangeify passes with match counts", responses=documented(NOT_FOUND))
async def get_rangeify(trace: StoredTrace) -> dict[str, Any]:
  passes = rangeify_passes(trace)
  return {"passes": [{"index": i, **p} for i, p in enumerate(passes)], "max_steps": MAX_STEPS, "graph": "rangeify/{pass}/{before|after|m<j>}"}

BUFFER_PAGE = 200  # rows of the buffer table per page

@router.get("/t/{trace_id}/bufferize", response_class=HTMLResponse)
async def bufferize(request: Request, trace_id: str, svc: ServicesDep, offset: int = Query(0, ge=0, le=2**31)) -> HTMLResponse:
  """The kernel graph, the STAGE decisions, memory over the schedule and the buffers (paged: ?offset=, BUFFER_PAGE rows)."""
  trace = await deps.stored_trace(svc, trace_id)
  over = None if trace is None else await asyncio.to_thread(svc.traces.derived, trace_id, trace, "memory", memory.timeline)
  return await trace_page(request, svc, trace_id, "bufferize.html", "bufferize", api=f"{trace_api_url(trace_id)}/bufferize",
                          memory=over, offset=offset, per_page=BUFFER_PAGE)

@api.get("/traces/{trace_id}/bufferize", summary="Bufferize decisions: STAGEs created, fused and kept; buffers; the kernel graph",
         responses=documented(NOT_FOUND))
async def get_bufferize(trace_id: str, trace: StoredTrace, svc: ServicesDep) -> dict[str, Any]:
  sched = trace["scheduler"]
  over = await asyncio.to_thread(svc.traces.derived, trace_id, trace, "memory", memory.timeline)  # the page's, computed once
  return {"stages": sched.get("stages") if sched else None, "stage_counts": sched.get("stage_counts") if sched else None,  # older: absent
          "buffers": trace["buffers"], "schedule": trace["schedule"], "graph": "kernels", "memory": over}
