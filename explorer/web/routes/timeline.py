"""Timeline: when each stage, rewrite pass, Tensor function and kernel launch of a trace happened on the host, and the memory its
devices' buffers held, from tinygrad's own profiler (explorer.tracing.pipeline.host_timeline)."""
from __future__ import annotations
import asyncio
from collections.abc import Callable
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse
from explorer.present.timeline import timeline_view
from explorer.schema import Timeline, TraceRecord
from explorer.web.http.deps import LightTrace, ServicesDep
from explorer.web.http.models import NOT_FOUND, documented
from explorer.web.routes.common import ribbon, trace_page
from explorer.web.services import admission
from explorer.web.urls import kernel_url

router = APIRouter()

NO_TIMELINE = "this trace was recorded before traces kept a timeline: trace it again to see one"
STAGE_PAGES = {"tensor_graph": "tensor", "schedule": "rangeify", "kernel_graph": "bufferize", "codegen": "kernels", "render": "source",
               "run": "timings", "timing": "timings", "reference check": "timings", "repeat": "timings"}  # stage -> its ribbon entry

def stage_links(trace: TraceRecord, trace_id: str) -> Callable[[str, int | None], str | None]:
  """The page each stage opens: the ribbon's; a program's codegen opens the first kernel of its realize."""
  pages = {r["key"]: r["url"] for r in ribbon(trace, trace_id, ())}
  realizes = trace.get("realizes") or []
  def url(stage: str, realize: int | None) -> str | None:
    if stage == "codegen" and realize is not None and realize < len(realizes) and (span := realizes[realize]["kernels"])[1] > span[0]:
      return kernel_url(trace_id, span[0])
    return pages.get(STAGE_PAGES.get(stage, ""))
  return url

def timeline_of(trace: TraceRecord) -> Timeline:
  if (tl := trace.get("timeline")) is None: raise HTTPException(409, NO_TIMELINE)
  return tl

@router.get("/api/traces/{trace_id}/timeline", tags=["timeline"], summary="The host's work over time: stages, tinygrad's passes, launches, memory",
            responses=documented({**NOT_FOUND, 409: "the trace is still queued or running, or was recorded before timelines"}))
async def timeline_json(trace: LightTrace) -> Timeline:
  """Times in microseconds from the trace's start on the host's clock; names interned (`names`, `lanes`)."""
  return timeline_of(trace)

@router.get("/t/{trace_id}/timeline", response_class=HTMLResponse, include_in_schema=False)
async def timeline_page(request: Request, trace_id: str, svc: ServicesDep) -> HTMLResponse:
  trace = await admission.stored_trace(svc, trace_id, light=True)
  tl = trace.get("timeline") if trace is not None else None
  view = None
  if trace is not None and tl is not None:  # off the event loop: the stages' links walk every kernel
    view = await asyncio.to_thread(lambda: timeline_view(tl, stage_links(trace, trace_id)))
  return await trace_page(request, svc, trace_id, "timeline.html", "timeline", light=True, view=view, why=NO_TIMELINE)
