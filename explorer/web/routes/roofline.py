"""Roofline: each kernel's achieved FLOP/s and bytes/s against the peaks of the hardware its trace ran on, and the probe that measures
those peaks where no spec sheet has them."""
from __future__ import annotations
import socket
from typing import Any
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse
from explorer.analysis import roofline as rf
from explorer.web.http.deps import LightTrace, ServicesDep
from explorer.web.http.models import NOT_FOUND, ProbeStatus, documented
from explorer.web.routes.common import trace_page
from explorer.web.services import admission

router = APIRouter()

roofline_of = rf.trace_roofline  # the export shows the same roofline

ROOFLINE_ERRORS = {**NOT_FOUND, 409: "the trace is still queued or running, or it has no roofline: untimed, or no peaks known for its device"}

@router.get("/api/traces/{trace_id}/roofline", tags=["roofline"], summary="Each kernel's achieved FLOP/s and bytes/s against its device's peaks",
            responses=documented(ROOFLINE_ERRORS))
async def roofline_json(trace: LightTrace) -> dict[str, Any]:
  rl, why = roofline_of(trace)
  if rl is None: raise HTTPException(409, why)
  return rl

@router.post("/api/traces/{trace_id}/roofline/probe", tags=["roofline"], response_model=ProbeStatus, status_code=202,
             summary="Start measuring the peaks of the trace's device (bandwidth and FP32): poll GET for progress and the result",
             responses=documented({**NOT_FOUND, 409: "the trace is still queued or running, or it ran on another host"}))
async def probe(trace_id: str, trace: LightTrace, svc: ServicesDep) -> JSONResponse:
  """Returns at once. One probe per device at a time: a request while one runs gets that one's status. The peaks measured are cached
  for every trace of the device, so GET .../roofline answers once the probe is done."""
  if trace["env"]["host"] != socket.gethostname(): raise HTTPException(409, f"the trace ran on {trace['env']['host']}, not on this host")
  return JSONResponse(svc.probes.start(trace).view(trace_id), status_code=202)

@router.get("/api/traces/{trace_id}/roofline/probe", tags=["roofline"], response_model=ProbeStatus,
            summary="The latest probe of the trace's device: its progress, then its result or error (status none: no probe yet)",
            responses=documented(NOT_FOUND))
async def probe_status(trace_id: str, trace: LightTrace, svc: ServicesDep) -> dict[str, Any]:
  device = trace["env"]["device"]
  return p.view(trace_id) if (p := svc.probes.latest(device)) is not None else svc.probes.none(trace_id, device)

@router.get("/t/{trace_id}/roofline", response_class=HTMLResponse, include_in_schema=False)
async def roofline_page(request: Request, trace_id: str, svc: ServicesDep) -> HTMLResponse:
  trace = await admission.stored_trace(svc, trace_id, light=True)
  rl, why = roofline_of(trace) if trace is not None else (None, None)
  return await trace_page(request, svc, trace_id, "roofline.html", "roofline", light=True, rl=rl, why=why,
                          svg=rf.roofline_svg(rl) if rl is not None and rl["plot"]["points"] else None, rate=rf.rate,
                          can_probe=trace is not None and trace["env"]["host"] == socket.gethostname())
