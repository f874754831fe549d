"""The JSON API: one endpoint per page, plus job status and live progress (server-sent events)."""
from __future__ import annotations
import asyncio, json, shutil, sys
from typing import Any, AsyncIterator
from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from explorer import __version__
from explorer.spec import PRESETS, TARGETS
from explorer.store import tinygrad_version
from explorer.web import deps
from explorer.web.graphing import GraphBusy, GraphNotFound, GraphUnavailable, MAX_STEPS
from explorer.web.jobs import QueueFull
from explorer.web.models import GraphView, Health, TraceRequest, TraceStatus, TraceSummary
from explorer.web.render import TARGET_LABELS

router = APIRouter(prefix="/api", tags=["api"])

@router.get("/health", response_model=Health, summary="Server health")
async def health(request: Request) -> dict:
  return {"status": "ok", "version": __version__, "tinygrad": tinygrad_version(), "db": str(request.app.state.store.path),
          "tinygrad_imported": "tinygrad" in sys.modules, "jobs_running": request.app.state.jobs.running(), "dot": shutil.which("dot") is not None}

@router.get("/presets", summary="Preset convolutions")
async def presets() -> dict[str, dict]:
  return {name: {**spec.to_dict(), "label": spec.label()} for name, spec in PRESETS.items()}

@router.get("/targets", summary="Render targets")
async def targets() -> list[dict]:
  return [{"name": t, "label": TARGET_LABELS.get(t, t)} for t in TARGETS]

@router.post("/traces", response_model=TraceStatus, status_code=202, summary="Start a trace (or get the stored one)",
             responses={200: {"model": TraceStatus, "description": "already stored: served from the store"},
                        422: {"description": "invalid spec or variant"}, 503: {"description": "too many traces queued"}})
async def create_trace(request: Request, body: TraceRequest) -> Any:
  """Returns at once with the trace id (a hash of spec, variant, tinygrad version and device). Identical requests share one job;
  a stored trace comes back with status done (HTTP 200) without running again."""
  try: status, started = await deps.submit(request, body)
  except QueueFull as e: raise HTTPException(503, str(e), headers={"Retry-After": "60"}) from None
  return JSONResponse(status, status_code=202 if status["status"] != "done" else 200)

@router.get("/traces", response_model=list[TraceSummary], summary="Recent traces")
async def list_traces(request: Request, limit: int = Query(50, ge=1, le=500)) -> list[dict]:
  rows = await asyncio.to_thread(request.app.state.store.recent, limit)
  keys = set(TraceSummary.model_fields)
  return [{k: v for k, v in {**r, "url": deps.trace_url(r["id"])}.items() if k in keys} for r in rows]

@router.get("/traces/{trace_id}", summary="A trace (light: kernel sources, UOp listings and passes are under /kernels/{n})")
async def get_trace(request: Request, trace_id: str) -> dict:
  return deps.light_trace(trace_id, await deps.trace_or_404(request, trace_id))

@router.get("/traces/{trace_id}/raw", summary="The trace exactly as stored")
async def get_raw_trace(request: Request, trace_id: str) -> dict:
  return await deps.trace_or_404(request, trace_id)

@router.get("/traces/{trace_id}/status", response_model=TraceStatus, summary="Job status with per-stage progress")
async def get_status(request: Request, trace_id: str) -> dict:
  if (status := await deps.status_of(request, trace_id)) is None: raise HTTPException(404, f"no trace {trace_id}")
  return status

def sse(event: str, data: Any) -> str: return f"event: {event}\ndata: {json.dumps(data)}\n\n"

@router.get("/traces/{trace_id}/events", summary="Live progress as server-sent events",
            response_class=StreamingResponse, responses={200: {"content": {"text/event-stream": {}}}})
async def events(request: Request, trace_id: str) -> StreamingResponse:
  """Events: `snapshot` (the whole status, first), `stage` (a stage started, finished or failed), `status`, then `done` (last)."""
  if (status := await deps.status_of(request, trace_id)) is None: raise HTTPException(404, f"no trace {trace_id}")
  job = request.app.state.jobs.get(trace_id)
  async def stream() -> AsyncIterator[str]:
    yield sse("snapshot", status)
    if job is None or status["status"] in ("done", "error"):
      yield sse("done", {"status": status["status"], "error": status.get("error")})
      return
    seen = len(job.events)
    while True:
      waiter = job.changed
      while seen < len(job.events):
        ev = job.events[seen]; seen += 1
        yield sse(ev["event"], ev)
        if ev["event"] == "done": return
      try: await asyncio.wait_for(waiter.wait(), timeout=10)
      except asyncio.TimeoutError: yield ": keepalive\n\n"
      if await request.is_disconnected(): return
  return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

@router.get("/traces/{trace_id}/kernels", summary="The trace's kernels (light)")
async def list_kernels(request: Request, trace_id: str) -> list[dict]:
  return deps.light_trace(trace_id, await deps.trace_or_404(request, trace_id))["kernels"]

@router.get("/traces/{trace_id}/kernels/{n}", summary="One kernel: facts, codegen passes, linearized UOps, source per target")
async def get_kernel(request: Request, trace_id: str, n: int) -> dict:
  trace = await deps.trace_or_404(request, trace_id)
  return {**deps.kernel_or_404(trace, n), "graphs": {"ast": f"ast/{n}", "pass": f"codegen/{n}/{{pass}}/{{before|after|m<j>}}"}}

@router.get("/traces/{trace_id}/bufferize", summary="Bufferize decisions: STAGEs created, fused and kept; buffers; the kernel graph")
async def get_bufferize(request: Request, trace_id: str) -> dict:
  trace = await deps.trace_or_404(request, trace_id)
  sched = trace.get("scheduler") or {}
  return {"stages": sched.get("stages"), "stage_counts": sched.get("stage_counts"), "buffers": trace.get("buffers"),
          "schedule": trace.get("schedule"), "graph": "kernels"}

@router.get("/traces/{trace_id}/rangeify", summary="The scheduler's rangeify passes with match counts")
async def get_rangeify(request: Request, trace_id: str) -> dict:
  trace = await deps.trace_or_404(request, trace_id)
  passes = (trace.get("scheduler") or {}).get("passes") or []
  return {"passes": [{"index": i, **p} for i, p in enumerate(passes)], "max_steps": MAX_STEPS, "graph": "rangeify/{pass}/{before|after|m<j>}"}

@router.get("/traces/{trace_id}/graphs", summary="The graphs of a trace, by reference")
async def list_graphs(request: Request, trace_id: str) -> dict:
  trace = await deps.trace_or_404(request, trace_id)
  n_rangeify = len((trace.get("scheduler") or {}).get("passes") or [])
  kernels = trace.get("kernels") or []
  return {"tensor": "tensor", "kernels": "kernels", "ast": [f"ast/{k['index']}" for k in kernels],
          "codegen": {k["index"]: f"codegen/{k['index']}/0..{len(k.get('passes') or []) - 1}/{{before|after|m<j>}}" for k in kernels},
          "rangeify": f"rangeify/0..{n_rangeify - 1}/{{before|after|m<j>}}", "svg": "append .svg to a graph URL for its layout"}

def graph_errors(fn: Any) -> Any:
  async def wrapped(*args: Any, **kwargs: Any) -> Any:
    try: return await fn(*args, **kwargs)
    except GraphNotFound as e: raise HTTPException(404, str(e)) from None
    except GraphBusy as e: raise HTTPException(503, str(e), headers={"Retry-After": "5"}) from None
    except GraphUnavailable as e: raise HTTPException(409, str(e)) from None
  return wrapped

@router.get("/traces/{trace_id}/graphs/{ref:path}.svg", summary="A graph laid out by graphviz (SVG)",
            response_class=Response, responses={200: {"content": {"image/svg+xml": {}}}, 404: {}, 409: {"description": "cannot be drawn"},
                                                503: {"description": "graph workers busy"}})
async def get_graph_svg(request: Request, trace_id: str, ref: str, full: bool = False) -> Response:
  trace = await deps.trace_or_404(request, trace_id)
  svg = await graph_errors(request.app.state.graphs.svg)(trace_id, trace, ref, full, deps.trace_url(trace_id))
  return Response(svg, media_type="image/svg+xml", headers={"Cache-Control": "public, max-age=86400"})

@router.get("/traces/{trace_id}/graphs/{ref:path}", response_model=GraphView, response_model_exclude_none=True, summary="A graph as JSON",
            responses={404: {}, 409: {"description": "cannot be drawn"}, 503: {"description": "graph workers busy"}})
async def get_graph(request: Request, trace_id: str, ref: str, full: bool = False, nodes: bool = True) -> dict:
  """ref: tensor | kernels | ast/{k} | codegen/{k}/{p}/{before|after|m<j>} | rangeify/{p}/{before|after|m<j>}.
  Graphs over the node limit are simplified (notes say how); full=1 lifts the limit. nodes=0 leaves nodes and edges out."""
  trace = await deps.trace_or_404(request, trace_id)
  view = await graph_errors(request.app.state.graphs.view)(trace_id, trace, ref, full)
  svg_url = f"/api/traces/{trace_id}/graphs/{ref}.svg" + ("?full=1" if full else "")
  out = {k: v for k, v in view.items() if k in GraphView.model_fields} | {"svg_url": svg_url}
  if not nodes: out["nodes"] = out["edges"] = None
  return out
