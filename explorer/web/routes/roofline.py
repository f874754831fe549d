"""Roofline: each kernel's achieved FLOP/s and bytes/s against the peaks of the hardware its trace ran on."""
from __future__ import annotations
import asyncio, socket, time, uuid
from dataclasses import dataclass, field
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse
from explorer.analysis import roofline as rf
from explorer.web.http import deps
from explorer.web.services.traces import run_in_daemon_thread
from explorer.web.http.models import NOT_FOUND, ProbeStatus, documented
from explorer.web.routes.pages import trace_page
from explorer.tracing.workers import GATED_STAGE  # already imported by the server (explorer.tracing.pool)

router = APIRouter()

def roofline_of(trace: dict) -> tuple[dict | None, str | None]:
  """(the roofline, None) or (None, why there is none)."""
  if not trace.get("timing"): return None, "this trace was not timed: a roofline needs measured run times"
  if (peaks := rf.peaks_of_trace(trace)) is None:
    return None, (f"no spec-sheet peaks for {trace['env'].get('device_name') or trace['env']['device']} and no probe measured on this host yet")
  return rf.roofline(trace, peaks), None

ROOFLINE_ERRORS = {**NOT_FOUND, 409: "the trace is still queued or running, or it has no roofline: untimed, or no peaks known for its device"}

@router.get("/api/traces/{trace_id}/roofline", tags=["roofline"], summary="Each kernel's achieved FLOP/s and bytes/s against its device's peaks",
            responses=documented(ROOFLINE_ERRORS))
async def roofline_json(request: Request, trace_id: str) -> dict:
  rl, why = roofline_of(await deps.trace_or_404(request, trace_id))
  if rl is None: raise HTTPException(409, why)
  return rl

# ***** the probe: a job per device, polled *****

@dataclass
class Probe:
  """One run of the roofline probe on a device (bandwidth and FP32, explorer.tracing.probe.measure, in a worker)."""
  device: str
  id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
  status: str = "queued"  # queued | running | done | error
  detail: str = "starting a worker"
  result: dict | None = None
  error: str | None = None
  started: float = field(default_factory=time.time)
  finished: float | None = None

  def note(self, stage: str, status: str, detail: str) -> None:
    """Progress from the worker; GATED_STAGE: waiting for the device's lock (another measurement holds it), so still queued."""
    if self.finished is None: self.status, self.detail = "queued" if stage == GATED_STAGE else "running", detail or f"{stage} {status}"

  def end(self, fut: asyncio.Future) -> None:
    self.finished = time.time()
    if (e := fut.exception()) is not None: self.status, self.detail, self.error = "error", "", (str(e).strip().splitlines() or [type(e).__name__])[0]
    else: self.status, self.detail, self.result = "done", "", fut.result()

  def snapshot(self, trace_id: str) -> dict:
    return {"id": self.id, "device": self.device, "status": self.status, "detail": self.detail, "url": probe_url(trace_id), "result": self.result,
            "error": self.error, "elapsed_s": round((self.finished or time.time()) - self.started, 1)}

def probe_url(trace_id: str) -> str: return f"/api/traces/{trace_id}/roofline/probe"

def probes_of(request: Request) -> dict[str, Probe]:
  """The latest probe of each device, this server's (kept on the app's state, made on first use)."""
  if (probes := getattr(request.app.state, "probes", None)) is None: probes = request.app.state.probes = {}
  return probes

def start_probe(trace: dict, timeout_s: float) -> Probe:
  """In a daemon thread (not the loop's small shared pool): the worker it starts relays its progress to the probe's detail."""
  probe, loop = Probe(trace["env"]["device"]), asyncio.get_running_loop()
  def progress(stage: str, status: str, detail: str) -> None: loop.call_soon_threadsafe(probe.note, stage, status, detail)
  run_in_daemon_thread(lambda: rf.probe_for_trace(trace, timeout_s, progress)).add_done_callback(probe.end)
  return probe

@router.post("/api/traces/{trace_id}/roofline/probe", tags=["roofline"], response_model=ProbeStatus, status_code=202,
             summary="Start measuring the peaks of the trace's device (bandwidth and FP32): poll GET for progress and the result",
             responses=documented({**NOT_FOUND, 409: "the trace is still queued or running, or it ran on another host"}))
async def probe(request: Request, trace_id: str) -> JSONResponse:
  """Returns at once. One probe per device at a time: a request while one runs gets that one's status. The peaks measured are cached
  for every trace of the device, so GET .../roofline answers once the probe is done."""
  trace = await deps.trace_or_404(request, trace_id)
  if trace["env"]["host"] != socket.gethostname(): raise HTTPException(409, f"the trace ran on {trace['env']['host']}, not on this host")
  probes, device = probes_of(request), trace["env"]["device"]
  if (running := probes.get(device)) is None or running.finished is not None:
    running = probes[device] = start_probe(trace, float(request.app.state.settings.trace_timeout_s))
  return JSONResponse(running.snapshot(trace_id), status_code=202)

@router.get("/api/traces/{trace_id}/roofline/probe", tags=["roofline"], response_model=ProbeStatus,
            summary="The latest probe of the trace's device: its progress, then its result or error (status none: no probe yet)",
            responses=documented(NOT_FOUND))
async def probe_status(request: Request, trace_id: str) -> dict:
  trace = await deps.trace_or_404(request, trace_id)
  if (p := probes_of(request).get(device := trace["env"]["device"])) is not None: return p.snapshot(trace_id)
  return {"id": None, "device": device, "status": "none", "detail": f"no probe of {device} has run on this server: POST starts one",
          "url": probe_url(trace_id), "result": None, "error": None, "elapsed_s": 0.0}

@router.get("/t/{trace_id}/roofline", response_class=HTMLResponse, include_in_schema=False)
async def roofline_page(request: Request, trace_id: str) -> HTMLResponse:
  trace = await deps.stored_trace(request, trace_id)
  rl, why = roofline_of(trace) if trace is not None else (None, None)
  return await trace_page(request, trace_id, "roofline.html", "roofline", rl=rl, why=why,
                          svg=rf.roofline_svg(rl) if rl is not None and rl["plot"]["points"] else None, rate=rf.rate,
                          can_probe=trace is not None and trace["env"]["host"] == socket.gethostname())
