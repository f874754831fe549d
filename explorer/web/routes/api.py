"""The JSON API: one endpoint per page, plus job status and live progress (server-sent events)."""
from __future__ import annotations
import asyncio, functools, json, shutil, sys
from typing import Any, AsyncIterator, Literal
from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent
from explorer.version import __version__
from explorer.analysis import memory
from explorer.tracing.catalogue import catalogue
from explorer.spec import PRESETS, TARGETS
from explorer.store import tinygrad_version
from explorer.web.http import deps
from explorer.web.services.graphs import REF_RE, GraphBusy, GraphNotFound, GraphUnavailable, MAX_STEPS
from explorer.web.http.models import (NOT_FOUND, GraphView, Health, PassMatches, TargetJob, TargetRecord, TraceRequest, TraceStatus, TraceSummary,
                                 documented)
from explorer.web.http.templates import TARGET_LABELS
from explorer.web.http.work import Work

router = APIRouter(prefix="/api", tags=["api"])

@functools.cache
def has_dot() -> bool: return shutil.which("dot") is not None  # a PATH walk: once, not on every health check

@functools.cache
def tinygrad_installed() -> str: return tinygrad_version()  # package metadata read once, not on every health check

@router.get("/health", response_model=Health, response_model_exclude_none=True, summary="Server health",
            responses=documented(guards=(400, 403, 413, 414)))  # no token needed, never over the in-flight limit
async def health(request: Request) -> dict:
  """Liveness and versions; the store's path only to those trusted with it (a loopback client of a token-free server, a token holder)."""
  out = {"status": "ok", "version": __version__, "tinygrad": tinygrad_installed(), "tinygrad_imported": "tinygrad" in sys.modules,
         "jobs_running": request.app.state.jobs.running(), "dot": has_dot()}
  return out | ({"db": str(request.app.state.store.path)} if deps.trusted(request) else {})

@router.get("/presets", summary="Preset convolutions", responses=documented())
async def presets() -> dict[str, dict]:
  return {name: {**spec.to_dict(), "label": spec.label()} for name, spec in PRESETS.items()}

@router.get("/devices", summary="The devices a trace may name",
            responses=documented({503: "the worker that lists this host's devices failed, or the job queue does not answer"}))
async def devices(request: Request) -> dict[str, list[str]]:
  """The compute devices this host opens, best first (`kernel-explorer devices` lists the same); a trace's variant.device must be one
  of them (an index may follow: CUDA:1). Devices that read or write files, open sockets or emulate (DISK, TINYFS, PYTHON, NULL) never are.
  With a job queue (settings.queue): the devices its registered workers offer; a trace may then name any compute device."""
  return {"devices": await deps.offered_devices(request)}

@router.get("/targets", summary="Render targets", responses=documented())
async def targets() -> list[dict]:
  return [{"name": t, "label": TARGET_LABELS.get(t, t)} for t in TARGETS]

@router.get("/rewrites", summary="Custom codegen rewrites a trace may add (variant.rewrites)", responses=documented())
async def rewrites() -> list[dict[str, str]]:
  """The catalogue: each rewrite's name, how a variant names it (usage), where in codegen it runs (point: "sink", the graph the
  linearizer is handed; "linear", the linearized order), what it does, and its PatternMatcher and functions as they stand in the
  explorer's source. A user's own rewrite file is the CLI's alone (`--rewrite-file`): this server never runs user code."""
  return catalogue()

@router.post("/traces", response_model=TraceStatus, status_code=202, summary="Start a trace (or get the stored one)",
             responses={200: {"model": TraceStatus, "description": "already stored: served from the store"},
                        **documented({400: "the body is not text (UTF-8)", 422: "an invalid request, or a spec or variant this server refuses",
                                      429: "this client has max_jobs_per_client traces running or waiting (Retry-After)",
                                      503: "too many traces queued, this host's devices could not be listed, or the job queue "
                                           "does not answer (Retry-After)"})})
async def create_trace(request: Request, body: TraceRequest) -> Any:
  """Returns at once with the trace id (a hash of spec, variant, tinygrad version and device). Identical requests share one job;
  a stored trace comes back with status done (HTTP 200) without running again."""
  status, started = await deps.submit(request, body)
  return JSONResponse(status, status_code=202 if status["status"] != "done" else 200)

@router.post("/traces/{trace_id}/rerun", response_model=TraceStatus, status_code=202, summary="Run an accepted trace request again",
             responses={200: {"model": TraceStatus, "description": "already stored: served from the store"},
                        **documented({404: "no job or trace with this id", 409: "the stored request no longer validates",
                                      429: "this client has max_jobs_per_client traces running or waiting (Retry-After)",
                                      422: "a spec or variant this server now refuses",
                                      503: "too many traces queued, this host's devices could not be listed, or the job queue "
                                           "does not answer (Retry-After)"})})
async def rerun_trace(request: Request, trace_id: str) -> Any:
  """Re-submits the request stored with the job (an interrupted or failed one); the status says where it stands now."""
  status, _ = await deps.rerun(request, trace_id)
  return JSONResponse(status, status_code=202 if status["status"] != "done" else 200)

@router.get("/traces", response_model=list[TraceSummary], summary="Recent traces", responses=documented({422: "limit out of range"}))
async def list_traces(request: Request, limit: int = Query(50, ge=1, le=500)) -> list[dict]:
  rows = await asyncio.to_thread(request.app.state.store.recent, limit)
  keys = set(TraceSummary.model_fields)
  return [{k: v for k, v in {**r, "url": deps.trace_url(r["id"])}.items() if k in keys} for r in rows]

@router.get("/traces/{trace_id}", summary="A trace (light: kernel sources, UOp listings and passes are under /kernels/{n})",
            responses=documented(NOT_FOUND))
async def get_trace(request: Request, trace_id: str) -> dict:
  """The stored trace (the README's "What a trace records"). `env.ran_on` says where each part ran: `worker`, `host` and `pid` of the
  process that ran it, `stages` (each stage it ran: NAME@HOST for a job queue worker, PID@HOST for a server's own process) and
  `targets` (each target added on first request, on the server)."""
  return deps.light_trace(trace_id, await deps.trace_or_404(request, trace_id))

@router.get("/traces/{trace_id}/raw", summary="The trace exactly as stored", responses=documented(NOT_FOUND))
async def get_raw_trace(request: Request, trace_id: str) -> dict:
  return await deps.trace_or_404(request, trace_id)

@router.get("/traces/{trace_id}/status", response_model=TraceStatus, summary="Job status with per-stage progress",
            responses=documented({404: NOT_FOUND[404]}))
async def get_status(request: Request, trace_id: str) -> dict:
  if (status := await deps.status_of(request, trace_id)) is None: raise HTTPException(404, f"no trace {trace_id}")
  return status

def sse(event: str, data: Any) -> ServerSentEvent: return ServerSentEvent(json.dumps(data), event=event)

@router.get("/traces/{trace_id}/events", summary="Live progress as server-sent events",
            response_class=EventSourceResponse, responses={200: {"content": {"text/event-stream": {}}},
                                                           **documented({404: NOT_FOUND[404], 503: "max_streams live progress streams are "
                                                                         "open, or max_streams_per_client of this client's (Retry-After): "
                                                                         "poll /status instead"})})
async def events(request: Request, trace_id: str) -> EventSourceResponse:
  """Events: `snapshot` (the whole status, first), `stage` (a stage started, finished or failed), `status`, then `done` (last); a
  comment every 10 s keeps idle connections open (sse-starlette, which also ends the stream when the client goes or the server stops)."""
  if (status := await deps.status_of(request, trace_id)) is None: raise HTTPException(404, f"no trace {trace_id}")
  job = request.app.state.jobs.get(trace_id)
  async def stream() -> AsyncIterator[ServerSentEvent]:
    yield sse("snapshot", status)
    if job is None or status["status"] not in ("queued", "running"):
      yield sse("done", {"status": status["status"], "error": status.get("error")})
      return
    seen = len(job.events)
    while True:
      waiter = job.changed
      while seen < len(job.events):
        ev = job.events[seen]; seen += 1
        yield sse(ev["event"], ev)
        if ev["event"] == "done": return
      await waiter.wait()
  return EventSourceResponse(stream(), ping=10, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

@router.get("/traces/{trace_id}/kernels", summary="The trace's kernels (light)", responses=documented(NOT_FOUND))
async def list_kernels(request: Request, trace_id: str) -> list[dict]:
  return deps.light_trace(trace_id, await deps.trace_or_404(request, trace_id))["kernels"]

@router.get("/traces/{trace_id}/kernels/{n}", summary="One kernel: facts, codegen passes, linearized UOps, source per target",
            responses=documented({**NOT_FOUND, 404: "no trace with this id, or no kernel n in it", 422: "n is not an integer"}))
async def get_kernel(request: Request, trace_id: str, n: int) -> dict:
  """The kernel's host fields, `sources` per target and `targets` (trace schema 2): each target's whole record, as
  /kernels/{n}/targets/{target} documents it."""
  trace = await deps.trace_or_404(request, trace_id)
  return {**deps.kernel_or_404(trace, n), "graphs": {"ast": f"ast/{n}", "pass": f"codegen/{n}/{{pass}}/{{before|after|m<j>}}"}}

@router.get("/traces/{trace_id}/kernels/{n}/targets/{target}", response_model=TargetRecord, response_model_exclude_none=True,
            summary="One kernel on one target: name, opts, dims, UOps, Estimates, passes, source and compile facts",
            responses={202: {"model": TargetJob, "description": "a target the trace did not ask for, being computed now: poll this URL"},
                       **documented({**NOT_FOUND, 404: "no trace with this id, no kernel n in it, or an unknown target (the detail lists "
                                     "the known ones)", 409: "the trace is still running, or this target cannot be computed for it "
                                     "(recorded before per-target records, or its computation failed: the detail says why)",
                                     422: "n is not an integer"})})
async def get_kernel_target(request: Request, trace_id: str, n: int, target: str, work: Work) -> Any:
  """A target the trace did not ask for is computed on this first request, in a worker, and stored with the trace: 202 with the job's
  progress until it is, then 200 with the record (every later request too, at once)."""
  trace = await deps.trace_or_404(request, trace_id)
  records = deps.target_records(deps.kernel_or_404(trace, n))
  if target in records: return records[target]
  return await deps.target_job(request, trace_id, trace, target, work)

@router.get("/traces/{trace_id}/bufferize", summary="Bufferize decisions: STAGEs created, fused and kept; buffers; the kernel graph",
            responses=documented(NOT_FOUND))
async def get_bufferize(request: Request, trace_id: str) -> dict:
  trace = await deps.trace_or_404(request, trace_id)
  sched = trace.get("scheduler") or {}
  return {"stages": sched.get("stages"), "stage_counts": sched.get("stage_counts"), "buffers": trace.get("buffers"),
          "schedule": trace.get("schedule"), "graph": "kernels", "memory": memory.timeline(trace)}

@router.get("/traces/{trace_id}/rangeify", summary="The scheduler's rangeify passes with match counts", responses=documented(NOT_FOUND))
async def get_rangeify(request: Request, trace_id: str) -> dict:
  trace = await deps.trace_or_404(request, trace_id)
  passes = (trace.get("scheduler") or {}).get("passes") or []
  return {"passes": [{"index": i, **p} for i, p in enumerate(passes)], "max_steps": MAX_STEPS, "graph": "rangeify/{pass}/{before|after|m<j>}"}

@router.get("/traces/{trace_id}/graphs", summary="The graphs of a trace, by reference", responses=documented(NOT_FOUND))
async def list_graphs(request: Request, trace_id: str) -> dict:
  trace = await deps.trace_or_404(request, trace_id)
  n_rangeify = len((trace.get("scheduler") or {}).get("passes") or [])
  kernels = trace.get("kernels") or []
  return {"tensor": "tensor", "kernels": "kernels", "ast": [f"ast/{k['index']}" for k in kernels],
          "codegen": {k["index"]: f"codegen/{k['index']}/0..{len(k.get('passes') or []) - 1}/{{before|after|m<j>}}" for k in kernels},
          "rangeify": f"rangeify/0..{n_rangeify - 1}/{{before|after|m<j>}}", "svg": "append .svg to a graph URL for its layout"}

GRAPH_ERRORS = {404: "no trace with this id, or no such graph in it", 409: "the trace is still queued or running, or the graph cannot be drawn",
                422: "full or nodes is not a boolean", 503: "the graph workers are busy (Retry-After)"}

def graph_errors(fn: Any) -> Any:
  async def wrapped(*args: Any, **kwargs: Any) -> Any:
    try: return await fn(*args, **kwargs)
    except GraphNotFound as e: raise HTTPException(404, str(e)) from None
    except GraphBusy as e: raise HTTPException(503, str(e), headers={"Retry-After": "5"}) from None
    except GraphUnavailable as e: raise HTTPException(409, str(e)) from None
  return wrapped

MAX_MATCHES_PAGE = 500
IndexMode = Literal["auto", "hide", "show"]  # explorer.present.graphs.INDEX_MODES
EXPAND_QUERY = Query(None, max_length=400, pattern=r"^[0-9]{1,12}(,[0-9]{1,12}){0,31}$",
                     description="trace numbers (nodes[i].num) of cut-off nodes to open: their inputs two levels up are shown")

def _expand_nums(expand: str | None) -> frozenset[int]: return frozenset(int(x) for x in expand.split(",")) if expand else frozenset()

def _blob_target(trace: dict, target: str | None) -> str | None:
  """None (the host's blob) for the host's own target; else the target, which must be one the trace recorded."""
  host = ((trace.get("kernels") or [{}])[0]).get("host_target")
  if target is None or target == host: return None
  if target not in TARGETS: raise HTTPException(404, f"unknown target {target!r}; known: {', '.join(TARGETS)}")
  return target

@router.get("/traces/{trace_id}/rewrites/{group}/{step}/matches", response_model=PassMatches, summary="Every match of one rewrite pass, paged",
            responses=documented({**GRAPH_ERRORS, 422: "offset or limit out of range"}))
async def pass_matches(request: Request, trace_id: str, group: int, step: int, work: Work, offset: int = Query(0, ge=0),
                       limit: int = Query(100, ge=1, le=MAX_MATCHES_PAGE), target: str | None = None) -> dict:
  """group and step as in the trace's pass records (`passes[i].group`, `.step`; a target's passes with ?target=). Each match: its rule
  (file:line and the UPat's source as it stands in its file), the time tinygrad measured for it, the rewritten UOp before and after
  (graphs three sources deep) and the text diff of their Python forms. `total` is the pass's recorded match count; `call` is where
  in tinygrad the pass was run (the graph_rewrite call)."""
  trace = await deps.trace_or_404(request, trace_id)
  return await graph_errors(request.app.state.graphs.matches)(trace_id, trace, group, step, offset, limit, _blob_target(trace, target),
                                                              permit=work.permit())

@router.get("/traces/{trace_id}/rewrites/{group}/{step}/python", summary="The graph a pass started from, as Python (tinygrad's pyrender)",
            responses=documented(GRAPH_ERRORS))
async def pass_python(request: Request, trace_id: str, group: int, step: int, work: Work, target: str | None = None) -> dict:
  trace = await deps.trace_or_404(request, trace_id)
  return await graph_errors(request.app.state.graphs.python)(trace_id, trace, group, step, _blob_target(trace, target), permit=work.permit())

@router.get("/traces/{trace_id}/graphs/{ref:path}.svg", summary="A graph laid out by graphviz (SVG)",
            response_class=Response, responses={200: {"content": {"image/svg+xml": {}}}, **documented(GRAPH_ERRORS)})
async def get_graph_svg(request: Request, trace_id: str, ref: str, work: Work, full: bool = False, index: IndexMode = "auto",
                        stable_from: str | None = Query(None, max_length=200, description="the graph shown before this one: the UOps both hold "
                                                        "keep their place (a fresh layout, not cached)"),
                        expand: str | None = EXPAND_QUERY) -> Response:
  trace = await deps.trace_or_404(request, trace_id)
  if stable_from is not None and not REF_RE.match(stable_from): raise HTTPException(404, f"stable_from names no graph: {stable_from!r}")
  svg = await graph_errors(request.app.state.graphs.svg)(trace_id, trace, ref, full, deps.trace_url(trace_id), index, stable_from,
                                                         _expand_nums(expand), permit=work.permit())
  return Response(svg, media_type="image/svg+xml", headers={"Cache-Control": "no-store" if stable_from else "public, max-age=86400"})

@router.get("/traces/{trace_id}/graphs/{ref:path}", response_model=GraphView, response_model_exclude_none=True, summary="A graph as JSON",
            responses=documented(GRAPH_ERRORS))
async def get_graph(request: Request, trace_id: str, ref: str, work: Work, full: bool = False, nodes: bool = True, index: IndexMode = "auto",
                    expand: str | None = EXPAND_QUERY) -> dict:
  """ref: tensor | kernels | ast/{k} | codegen/{k}/{p}/{before|after|m<j>} | rangeify/{p}/{before|after|m<j>}.
  Graphs over the node limit are simplified (notes say how); full=1 lifts the limit. nodes=0 leaves nodes and edges out."""
  trace = await deps.trace_or_404(request, trace_id)
  opened = _expand_nums(expand)
  view = await graph_errors(request.app.state.graphs.view)(trace_id, trace, ref, full, index, opened, permit=work.permit())
  query = "&".join(q for q in ("full=1" if full else "", "" if index == "auto" else f"index={index}",
                               f"expand={','.join(map(str, sorted(opened)))}" if opened else "") if q)
  svg_url = f"/api/traces/{trace_id}/graphs/{ref}.svg" + (f"?{query}" if query else "")
  out = {k: v for k, v in view.items() if k in GraphView.model_fields} | {"svg_url": svg_url}
  if not nodes: out["nodes"] = out["edges"] = None
  return out
