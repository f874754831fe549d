"""A trace: starting one (the API, and a stored request run again), its status and live progress, its overview page and its JSON."""
from __future__ import annotations
import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from markupsafe import Markup
from sse_starlette import EventSourceResponse, ServerSentEvent
from explorer.analysis.diff import time_headline
from explorer.present.render import compile_summary, recorded_targets, rendered_targets
from explorer.schema import KernelRecord, TraceRecord, host_target, target_records
from explorer.stages import STAGE_TITLES
from explorer.store import Store, documents
from explorer.web.http import deps
from explorer.web.http.deps import ServicesDep, StoredTrace, templates_of
from explorer.web.http.models import NOT_FOUND, TraceRequest, TraceStatus, TraceSummary, documented
from explorer.web.http.templates import GZIPPED, Templates, accepts_gzip
from explorer.web.routes.common import page, progress_page, so_far, trace_page
from explorer.web.services import admission
from explorer.web.services.registry import TraceCache
from explorer.web.urls import diff_url, trace_url

api = APIRouter(prefix="/api", tags=["api"])
router = APIRouter(include_in_schema=False)

BUSY = {429: "this client has max_jobs_per_client traces running or waiting (Retry-After)",
        503: "too many traces queued, this host's devices could not be listed, or the job queue does not answer (Retry-After)"}

@api.post("/traces", response_model=TraceStatus, status_code=202, summary="Start a trace (or get the stored one)",
          responses={200: {"model": TraceStatus, "description": "already stored: served from the store"},
                     **documented({400: "the body is not text (UTF-8)",
                                   422: "an invalid request, or a spec or variant this server refuses", **BUSY})})
async def create_trace(request: Request, body: TraceRequest, svc: ServicesDep) -> Any:
  """Returns at once with the trace id (a hash of spec, variant, tinygrad version and device). Identical requests share one job;
  a stored trace comes back with status done (HTTP 200) without running again."""
  status, _ = await deps.submit(svc, body, deps.client_of(request))
  return JSONResponse(status, status_code=202 if status["status"] != "done" else 200)

@api.post("/traces/{trace_id}/rerun", response_model=TraceStatus, status_code=202, summary="Run an accepted trace request again",
          responses={200: {"model": TraceStatus, "description": "already stored: served from the store"},
                     **documented({404: "no job or trace with this id", 409: "the stored request no longer validates",
                                   422: "a spec or variant this server now refuses", **BUSY})})
async def rerun_trace(request: Request, trace_id: str, svc: ServicesDep) -> Any:
  """Re-submits the request stored with the job (an interrupted or failed one); the status says where it stands now."""
  status, _ = await deps.rerun(svc, trace_id, deps.client_of(request))
  return JSONResponse(status, status_code=202 if status["status"] != "done" else 200)

@router.post("/t/{trace_id}/rerun", response_class=HTMLResponse)
async def rerun_form(request: Request, trace_id: str, svc: ServicesDep) -> Response:
  """The Re-run button of an interrupted or failed trace: submit its stored request again and follow it."""
  status, _ = await deps.rerun(svc, trace_id, deps.client_of(request))
  return RedirectResponse(status.get("url") or trace_url(trace_id), status_code=303)

@api.get("/traces", response_model=list[TraceSummary], summary="Recent traces", responses=documented({422: "limit out of range"}))
async def list_traces(svc: ServicesDep, limit: int = Query(50, ge=1, le=500)) -> list[dict[str, Any]]:
  rows = await asyncio.to_thread(svc.store.recent, limit)
  keys = set(TraceSummary.model_fields)
  return [{k: v for k, v in {**r, "url": trace_url(r["id"])}.items() if k in keys} for r in rows]

@api.get("/traces/{trace_id}", response_model=dict[str, Any], responses=documented(NOT_FOUND),
         summary="A trace (light: kernel sources, UOp listings and passes are under /kernels/{n})")
async def get_trace(request: Request, trace_id: str, svc: ServicesDep) -> Response:
  """The stored trace (docs/reference/schema.md, "What a trace records"). `env.ran_on` says where each part ran: `worker`, `host` and `pid` of the
  process that ran it, `stages` (each stage it ran: NAME@HOST for a job queue worker, PID@HOST for a server's own process) and
  `targets` (each target added on first request, on the server)."""
  # made and gzipped when the trace was stored (explorer.store.documents), else from its light parse, and sent as it is kept: a
  # 10,000-kernel program's is 16 MB, which encoded whole in one call, then gzipped by the middleware, held the loop 150 and 100 ms
  if (doc := await asyncio.to_thread(svc.traces.document, trace_id)) is None:  # not stored: 409 while it runs, else 404
    await deps.trace_of(svc, trace_id, light=True)
    if (doc := await asyncio.to_thread(svc.traces.document, trace_id)) is None: raise HTTPException(404, f"no trace {trace_id}")  # (gone)
  if accepts_gzip(request): return Response(doc, media_type="application/json", headers=GZIPPED)
  return Response(await asyncio.to_thread(documents.opened, doc), media_type="application/json")

@api.get("/traces/{trace_id}/raw", summary="The trace as stored, with compile facts computed since", responses=documented(NOT_FOUND))
async def get_raw_trace(trace: StoredTrace) -> dict[str, Any]: return dict(trace)

@api.get("/traces/{trace_id}/status", response_model=TraceStatus, summary="Job status with per-stage progress",
         responses=documented({404: NOT_FOUND[404]}))
async def get_status(trace_id: str, svc: ServicesDep) -> dict[str, Any]:
  if (status := await admission.status_of(svc, trace_id)) is None: raise HTTPException(404, f"no trace {trace_id}")
  return status

def sse(event: str, data: Any) -> ServerSentEvent: return ServerSentEvent(json.dumps(data), event=event)

@api.get("/traces/{trace_id}/events", summary="Live progress as server-sent events",
         response_class=EventSourceResponse, responses={200: {"content": {"text/event-stream": {}}},
                                                        **documented({404: NOT_FOUND[404], 503: "max_streams live progress streams are "
                                                                      "open, or max_streams_per_client of this client's (Retry-After): "
                                                                      "poll /status instead"})})
async def events(trace_id: str, svc: ServicesDep) -> EventSourceResponse:
  """Events: `snapshot` (the whole status, first), `stage` (a stage started, finished or failed), `status`, `partial` (the trace reported
  more of itself: its schedule, or a kernel through codegen: GET /t/{id}/live shows it), then `done` (last); a comment every 10 s keeps
  idle connections open (sse-starlette, which also ends the stream when the client goes or the server stops)."""
  if (status := await admission.status_of(svc, trace_id)) is None: raise HTTPException(404, f"no trace {trace_id}")
  job = svc.jobs.get(trace_id)
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

@router.get("/t/{trace_id}/live", response_class=HTMLResponse)
async def live_fragment(request: Request, trace_id: str, svc: ServicesDep) -> HTMLResponse:
  """A running trace's panels as far as it has gone (its schedule, its kernels through codegen): what the page puts in place as it reports
  more. Empty once the trace is stored or when it has reported nothing yet."""
  return await page(request, "_partials/live.html", so_far=so_far(svc, trace_id))

@router.get("/t/{trace_id}", response_class=HTMLResponse)
async def trace_overview(request: Request, trace_id: str, svc: ServicesDep, target: str | None = None, q: str = Query("", max_length=200),
                         realize: int | None = Query(None, ge=0), offset: int = Query(0, ge=0, le=2**31)) -> HTMLResponse:
  """The overview; ?target=T turns the kernel table's figures (names, dims, uops, Estimates, registers) to that target's records. A
  program's adds its program view (realizes, timeline, kernels by model line, top kernels, memory); its kernel table is searched
  (?q= a kernel name, a function, a file:line), narrowed to one realize (?realize=), and paged (?offset=, PAGE rows)."""
  trace = await admission.stored_trace(svc, trace_id, light=True)
  if trace is None: return await progress_page(request, svc, trace_id)
  facts = await asyncio.to_thread(svc.traces.derived, trace_id, trace, "kernel table", table_facts)  # a walk over every kernel: off the loop
  kernels, available = trace["kernels"], facts["targets"]
  host = host_target(kernels[0]) if kernels else None
  target = target if target in available else host
  program = None
  if trace.get("realizes"):
    templates = templates_of(request)
    program = await templates.off_loop(program_view, svc.traces, templates, trace_id, trace, q, realize, offset)
  total = await asyncio.to_thread(svc.traces.derived, trace_id, trace, ("table total", target), lambda t: table_total(t, target))
  shown = program["page"] if program is not None else kernels
  rows: list[tuple[KernelRecord, Any]] = [(k, target_records(k).get(target or "", {})) for k in shown]
  compared = await asyncio.to_thread(compared_in, svc.store, trace_id)
  return await trace_page(request, svc, trace_id, "trace.html", "overview", light=True, stage_titles=STAGE_TITLES, table_target=target,
                          table_targets=available, table=facts, rows=rows, total=total, host_target=host, program=program, q=q,
                          compared_in=compared)

def table_facts(trace: TraceRecord) -> dict[str, Any]:
  """What the kernel table and the timings read off every kernel (once per parse): the targets some kernel has a record of (`targets`;
  `rendered`: with the ones the trace asked for, the host's first), the longest median time (the bars' scale), the first kernel's time
  (its clock's badge) and the compile time in words."""
  kernels = trace["kernels"]
  timed = [t for k in kernels if (t := k.get("time_s"))]
  return {"targets": recorded_targets(kernels), "rendered": rendered_targets(trace),
          "tmax": max((t["median"] for t in timed), default=0), "first_timed": timed[0] if timed else None,
          "compiled": compile_summary(trace)}

def table_total(trace: TraceRecord, target: str | None) -> dict[str, int]:
  """The kernel table's footer, summed as its rows show them: linear UOps, FLOPs and bytes of each kernel's record on the table's
  target, or the kernel's own figures where it has none there yet (`own`: how many; its neighbours' records land in the background)."""
  rows: list[Any] = [target_records(k).get(target or "") or k for k in trace["kernels"]]
  own = sum(1 for r, k in zip(rows, trace["kernels"], strict=True) if r is k)
  return {**{f: sum(r[f] for r in rows) for f in ("linear_uops", "flops", "bytes")}, "own": own}

def compared_in(store: Store, trace_id: str) -> list[dict[str, str]]:
  """The stored diffs that timed this trace interleaved with another: a link to each, in words from this trace's side ("as A: B is
  1.13x faster ..."). A ratio between two traces is quoted from these, never from their own separate timings."""
  out = []
  for a, b, timing in store.timings_of(trace_id):
    words = time_headline(timing) if timing.get("compared") else None
    if words: out.append({"url": diff_url(a, b), "words": f"a diff as {'A' if a == trace_id else 'B'}: {words}"})
  return out

@router.get("/t/{trace_id}/source", response_class=HTMLResponse)
async def program_source(request: Request, trace_id: str, svc: ServicesDep) -> HTMLResponse:
  """A captured program's source as it ran, each line with the count of kernels whose provenance names it (#L<n> anchors)."""
  trace = await admission.stored_trace(svc, trace_id, light=True)
  if trace is None: return await trace_page(request, svc, trace_id, "program_source.html", "overview")  # running, failed or none
  if (program := trace["program"]) is None: raise HTTPException(404, "a convolution's trace has no program source")
  file = program.get("file")  # absent where the program's source came from no file
  counts = await asyncio.to_thread(svc.traces.derived, trace_id, trace, "kernels by line", lambda t: kernels_by_line(t, file))
  return await trace_page(request, svc, trace_id, "program_source.html", "overview", light=True, lines=(program["source"] or "").splitlines(),
                          counts=counts, file_name=os.path.basename(file or ""))

def kernels_by_line(trace: TraceRecord, file: str | None) -> dict[int | None, int]:
  """How many kernels' provenance names each line of `file` (a walk of every kernel: once per parsed trace, off the event loop)."""
  counts: dict[int | None, int] = {}
  for k in trace["kernels"]:
    for line in {e["line"] for e in k.get("provenance", []) if e["file"] and e["file"] == file}:
      counts[line] = counts.get(line, 0) + 1
  return counts

PAGE = 200  # kernel rows per page of a program's kernel table

def program_view(traces: TraceCache, templates: Templates, trace_id: str, trace: TraceRecord, q: str, realize: int | None,
                 offset: int) -> dict[str, Any]:
  """What a program's overview shows beside its kernel table (the whole program's summary, and its drawing: computed once per parsed
  trace and roofs, not per request; the drawing of one realize opened, per request), and the page of kernels the search and paging pick."""
  from explorer.analysis import program
  from explorer.analysis.roofline import peaks_of_trace
  peaks = peaks_of_trace(trace)
  roofs = json.dumps(peaks, sort_keys=True, default=str)
  whole = traces.derived(trace_id, trace, ("program", roofs), lambda t: program.summary(t, peaks))
  def drawn(t: TraceRecord) -> Markup:
    return templates.macro("_partials/program_body.html", "program_body", t, {**whole, "realize": realize}, trace_url(trace_id))
  found = program.search(trace["kernels"], q)
  if realize is not None: found = [k for k in found if k.get("realize", 0) == realize]
  return {**whole, "peaks": peaks, "found": len(found), "offset": offset, "page": found[offset:offset + PAGE], "page_size": PAGE,
          "realize": realize, "found_totals": program.totals(found, peaks) if q or realize is not None else None,
          "drawn": traces.derived(trace_id, trace, ("program drawn", roofs), drawn) if realize is None else drawn(trace)}
