"""What the scheduler did: the tensor graph it was handed, its rangeify passes, and the bufferize decisions (STAGEs created, fused and
kept; buffers; the kernel graph), each page beside its JSON."""
from __future__ import annotations
import asyncio
from typing import Any
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup
from explorer.analysis import memory
from explorer.present.render import stage_rows
from explorer.schema import TraceRecord
from explorer.web.http.deps import LightTrace, ServicesDep, templates_of
from explorer.web.http.models import NOT_FOUND, documented
from explorer.web.routes.common import asked_pass, rangeify_passes, stepper, trace_page
from explorer.web.services import admission
from explorer.web.services.graphs import MAX_STEPS
from explorer.web.urls import graph_api_url, trace_api_url

api = APIRouter(prefix="/api", tags=["api"])
router = APIRouter(include_in_schema=False)

@router.get("/t/{trace_id}/graph/tensor", response_class=HTMLResponse)
async def tensor_graph(request: Request, trace_id: str, svc: ServicesDep) -> HTMLResponse:
  return await trace_page(request, svc, trace_id, "tensor.html", "tensor", light=True, api=graph_api_url(trace_id, "tensor"))

@router.get("/t/{trace_id}/rangeify", response_class=HTMLResponse)
async def rangeify(request: Request, trace_id: str, svc: ServicesDep, at: str | None = None) -> HTMLResponse:
  trace = await admission.stored_trace(svc, trace_id, light=True)
  passes = rangeify_passes(trace) if trace is not None else []
  step = stepper(passes, "rangeify", asked_pass(request), at, preferred="symbolic+reduce_collapse+debuf", trace_id=trace_id)
  return await trace_page(request, svc, trace_id, "rangeify.html", "rangeify", light=True, step=step, api=f"{trace_api_url(trace_id)}/rangeify")

@api.get("/traces/{trace_id}/rangeify", summary="The scheduler's rangeify passes with match counts", responses=documented(NOT_FOUND))
async def get_rangeify(trace: LightTrace) -> dict[str, Any]:
  passes = rangeify_passes(trace)
  return {"passes": [{"index": i, **p} for i, p in enumerate(passes)], "max_steps": MAX_STEPS, "graph": "rangeify/{pass}/{before|after|m<j>}"}

BUFFER_PAGE, STAGE_PAGE = 200, 200  # rows of the buffer table and of the STAGE table per page

def stage_rows_of(trace: TraceRecord) -> list[tuple[str, Any, int]]:
  return stage_rows(sched.get("stages") or {}) if (sched := trace["scheduler"]) is not None else []

@router.get("/t/{trace_id}/bufferize", response_class=HTMLResponse)
async def bufferize(request: Request, trace_id: str, svc: ServicesDep, offset: int = Query(0, ge=0, le=2**31),
                    stages: int = Query(0, ge=0, le=2**31)) -> HTMLResponse:
  """The kernel graph, the STAGE decisions, memory over the schedule and the buffers (paged: ?offset=, BUFFER_PAGE rows), and the STAGE
  table (paged: ?stages=, STAGE_PAGE rows: a program's thousands of STAGEs were a 4 MB page)."""
  trace = await admission.stored_trace(svc, trace_id, light=True)
  drawn, rows = None, []
  if trace is not None:
    templates = templates_of(request)
    def draw(t: TraceRecord) -> Markup | None:  # (a program's: a bar per step, 10,000 of them, 20 ms: once per parse, not per page)
      over = svc.traces.derived(trace_id, t, "memory", memory.over_schedule)
      return templates.macro("_partials/memory.html", "memory_timeline", over) if over else None
    drawn = await asyncio.to_thread(svc.traces.derived, trace_id, trace, "memory drawn", draw)
    rows = await asyncio.to_thread(svc.traces.derived, trace_id, trace, "stage rows", stage_rows_of)
  return await trace_page(request, svc, trace_id, "bufferize.html", "bufferize", light=True, api=f"{trace_api_url(trace_id)}/bufferize",
                          memory_drawn=drawn, offset=offset, per_page=BUFFER_PAGE, stage_rows=rows, stage_offset=stages, stage_page=STAGE_PAGE)

@api.get("/traces/{trace_id}/bufferize", summary="Bufferize decisions: STAGEs created, fused and kept; buffers; the kernel graph",
         responses=documented(NOT_FOUND))
async def get_bufferize(trace_id: str, trace: LightTrace, svc: ServicesDep) -> dict[str, Any]:
  sched = trace["scheduler"]
  over = await asyncio.to_thread(svc.traces.derived, trace_id, trace, "memory", memory.over_schedule)  # the page's, computed once
  return {"stages": sched.get("stages") if sched else None, "stage_counts": sched.get("stage_counts") if sched else None,  # older: absent
          "buffers": trace["buffers"], "schedule": trace["schedule"], "graph": "kernels", "memory": over}
