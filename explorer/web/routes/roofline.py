"""Roofline: each kernel's achieved FLOP/s and bytes/s against the peaks of the hardware its trace ran on."""
from __future__ import annotations
import asyncio, socket
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse
from explorer import roofline as rf
from explorer.web import deps
from explorer.web.jobs import run_in_daemon_thread
from explorer.web.routes.pages import trace_page

router = APIRouter()

def roofline_of(trace: dict) -> tuple[dict | None, str | None]:
  """(the roofline, None) or (None, why there is none)."""
  if not trace.get("timing"): return None, "this trace was not timed: a roofline needs measured run times"
  if (peaks := rf.peaks_of_trace(trace)) is None:
    return None, (f"no spec-sheet peaks for {trace['env'].get('device_name') or trace['env']['device']} and no probe measured on this host yet")
  return rf.roofline(trace, peaks), None

@router.get("/api/traces/{trace_id}/roofline")
async def roofline_json(request: Request, trace_id: str) -> dict:
  rl, why = roofline_of(await deps.trace_or_404(request, trace_id))
  if rl is None: raise HTTPException(409, why)
  return rl

@router.post("/api/traces/{trace_id}/roofline/probe")
async def probe(request: Request, trace_id: str) -> dict:
  """Measure the peaks of the trace's device with a short probe in a worker (bandwidth and FP32), and cache them."""
  trace = await deps.trace_or_404(request, trace_id)
  if trace["env"]["host"] != socket.gethostname(): raise HTTPException(409, f"the trace ran on {trace['env']['host']}, not on this host")
  # one probe per device at a time (concurrent requests share it), in a daemon thread: not in the loop's small shared thread pool
  if (inflight := getattr(request.app.state, "probes", None)) is None: inflight = request.app.state.probes = {}
  if (fut := inflight.get(device := trace["env"]["device"])) is None:
    fut = inflight[device] = run_in_daemon_thread(lambda: rf.probe_for_trace(trace, request.app.state.settings.trace_timeout_s))
    fut.add_done_callback(lambda _: inflight.pop(device, None))
  try: peaks = await asyncio.shield(fut)
  except Exception as e: raise HTTPException(503, f"the probe failed: {e}") from None
  return {"measured": peaks}

@router.get("/t/{trace_id}/roofline", response_class=HTMLResponse, include_in_schema=False)
async def roofline_page(request: Request, trace_id: str) -> HTMLResponse:
  trace = await deps.stored_trace(request, trace_id)
  rl, why = roofline_of(trace) if trace is not None else (None, None)
  return await trace_page(request, trace_id, "roofline.html", "roofline", rl=rl, why=why,
                          svg=rf.roofline_svg(rl) if rl is not None and rl["plot"]["points"] else None, rate=rf.rate,
                          can_probe=trace is not None and trace["env"]["host"] == socket.gethostname())
