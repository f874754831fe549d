"""A kernel: its page (graphs, passes, source per target, the UOp listing) and its JSON. What a trace does not record while tinygrad runs
(a kernel's record on another target, a record's analysis, its compile facts: explorer.web.services.enrichments) is computed when the
page or its URL first asks for it (that starts work: the request's permit), and the page fills it in when it is stored."""
from __future__ import annotations
import asyncio
import json
from typing import Any
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response
from explorer.analysis import sass
from explorer.analysis.program import bound_values
from explorer.schema import TraceRecord, host_target, target_records
from explorer.spec import SpecError, hand_opts, split_opts
from explorer.stages import ANALYSIS_MARK, ENRICH_ANALYSIS, ENRICH_FACTS, ENRICH_TARGET, lacks_facts
from explorer.store.documents import listed_kernel
from explorer.targets import SASS_TARGETS, TARGETS
from explorer.web.http import deps
from explorer.web.http.deps import LightTrace, ServicesDep, templates_of
from explorer.web.http.models import NOT_FOUND, Analysis, CompileFacts, EnrichmentJob, TargetRecord, documented
from explorer.web.http.work import Work
from explorer.web.routes.common import asked_pass, step_notices, stepper, trace_page
from explorer.web.services import admission
from explorer.web.services.enrichments import Asked, in_line
from explorer.web.services.lifecycle import Busy
from explorer.web.urls import trace_api_url

api = APIRouter(prefix="/api", tags=["api"])
router = APIRouter(include_in_schema=False)

@api.get("/traces/{trace_id}/kernels", summary="The trace's kernels (light), a page of them with offset and limit",
         responses=documented({**NOT_FOUND, 422: "offset or limit out of range"}))
async def list_kernels(trace_id: str, trace: LightTrace, response: Response, offset: int = Query(0, ge=0, le=2**31),
                       limit: int | None = Query(None, ge=1, le=1000, description="at most this many (default: all)"),
                       q: str = Query("", max_length=200, description="only the kernels whose name, provenance function or file:line "
                                                                          "(a program's: model.py:14) contains this")) -> list[dict[str, Any]]:
  """The kernels (those matching q) from `offset` on, `limit` of them; the X-Total-Count header says how many match."""
  from explorer.analysis.program import search
  kernels = await asyncio.to_thread(search, trace["kernels"], q)  # a big program's: off the event loop
  response.headers["X-Total-Count"] = str(len(kernels))
  return [listed_kernel(k) for k in kernels[offset:None if limit is None else offset + limit]]

@api.get("/traces/{trace_id}/kernels/{n}", summary="One kernel: facts, codegen passes, linearized UOps, source per target",
         responses=documented({**NOT_FOUND, 404: "no trace with this id, or no kernel n in it", 422: "n is not an integer"}))
async def get_kernel(trace_id: str, trace: LightTrace, n: int, svc: ServicesDep) -> dict[str, Any]:
  """The kernel's host fields, `sources` per target and `targets` (trace schema 2): each target's whole record, as
  /kernels/{n}/targets/{target} documents it."""
  return {**await deps.whole_kernel(svc, trace_id, trace, n), "graphs": {"ast": f"ast/{n}", "pass": f"codegen/{n}/{{pass}}/{{before|after|m<j>}}"}}

@api.get("/traces/{trace_id}/kernels/{n}/targets/{target}", response_model=TargetRecord, response_model_exclude_none=True,
         summary="One kernel on one target: name, opts, dims, UOps, Estimates, passes, source and compile facts",
         responses={202: {"model": EnrichmentJob, "description": "a target the trace did not render, being computed now for this "
                                                                 "kernel (then its neighbours, in the background): poll this URL"},
                    **documented({**NOT_FOUND, 404: "no trace with this id, no kernel n in it, or an unknown target (the detail lists "
                                  "the known ones)", 409: "the trace is still running, or this target cannot be computed for it "
                                  "(recorded before per-target records, or its computation failed: the detail says why)",
                                  422: "n is not an integer"})})
async def get_kernel_target(trace_id: str, trace: LightTrace, n: int, target: str, svc: ServicesDep, work: Work) -> Any:
  """A target the trace did not render is computed on this first request, for this kernel first (its AST rebuilt from the trace's
  rewrite blob and rendered in a worker as a trace renders it), and stored with the trace: 202 with the job's progress until it is,
  then 200 with the record (every later request too, at once). Its neighbours follow in the background."""
  k = await deps.whole_kernel(svc, trace_id, trace, n)
  records = target_records(k)
  if target in records: return records[target]
  if target in k["source_errors"]: raise HTTPException(409, f"rendering kernel {n} for {target} failed: {k['source_errors'][target]}")
  return await deps.enrichment_job(svc, trace_id, trace, ENRICH_TARGET, target, n, work)

def enrichment_responses(what: str) -> dict[int | str, dict[str, Any]]:
  """The answers of a record's enrichment URL: 202 while it is computed, then 200; `what` is the work that may fail."""
  return {202: {"model": EnrichmentJob, "description": "being computed now, in a worker: poll this URL"},
          **documented({**NOT_FOUND, 404: "no trace with this id, no kernel n in it", 409: "the trace is still running, it has no record of "
                        f"this kernel on this target (compute the target first), or {what} failed (the detail says why)",
                        422: "n is not an integer"})}

@api.get("/traces/{trace_id}/kernels/{n}/targets/{target}/facts", response_model=CompileFacts,
         summary="One kernel's compile facts on one target (registers, spills, occupancy, disassembly), computed on first request",
         responses=enrichment_responses("compiling"))
async def get_kernel_facts(trace_id: str, trace: LightTrace, n: int, target: str, svc: ServicesDep, work: Work) -> Any:
  """A trace records no compile facts while it runs: they are computed on this first request (a real compiler of this machine, in a
  worker) and stored with the trace: 202 with the job's progress until they are, then 200 (every later request too, at once)."""
  rec = target_records(deps.kernel_or_404(trace, n)).get(target)
  if rec is not None and not lacks_facts(rec, target): return rec["compile"]
  return await deps.enrichment_job(svc, trace_id, trace, ENRICH_FACTS, target, n, work)

@api.get("/traces/{trace_id}/kernels/{n}/targets/{target}/analysis", response_model=Analysis,
         summary="One kernel's analysis on one target (line map, live values, loop splits, program spec), computed on first request",
         responses=enrichment_responses("the analysis"))
async def get_kernel_analysis(trace_id: str, trace: LightTrace, n: int, target: str, svc: ServicesDep, work: Work) -> Any:
  """A trace records the line map, live values, loop splits and program spec of its records only when asked (`trace --analysis`): they
  are read from the rewrite blob on this first request, in a worker, and stored with the trace: 202 with the job's progress until they
  are, then 200 (every later request too, at once)."""
  rec = target_records(await deps.whole_kernel(svc, trace_id, trace, n)).get(target)
  if rec is not None and ANALYSIS_MARK in rec: return {f: rec.get(f) for f in Analysis.__annotations__}  # a field may be absent: null
  return await deps.enrichment_job(svc, trace_id, trace, ENRICH_ANALYSIS, target, n, work)

# ***** SASS: each instruction with its line, its UOps and the registers live there (compile facts, with the line map) *****

async def sass_job(svc: Any, trace_id: str, trace: TraceRecord, n: int, target: str, work: Any) -> Any:
  """The next enrichment kernel n's SASS on `target` waits for (its record, its compile facts, its line map), started or followed:
  a 202 response, or None when everything is there. 404 for a target without SASS, 409 when one cannot be had (the detail says why)."""
  k = await deps.whole_kernel(svc, trace_id, trace, n)
  if target not in SASS_TARGETS: raise HTTPException(404, f"SASS is shown for {' and '.join(SASS_TARGETS)} records, not {target[:40]!r}")
  rec = target_records(k).get(target)
  if rec is None:
    if target in k["source_errors"]: raise HTTPException(409, f"rendering kernel {n} for {target} failed: {k['source_errors'][target]}")
    return await deps.enrichment_job(svc, trace_id, trace, ENRICH_TARGET, target, n, work)
  if lacks_facts(rec, target): return await deps.enrichment_job(svc, trace_id, trace, ENRICH_FACTS, target, n, work)
  if ANALYSIS_MARK not in rec and rec.get("linear_nums") is not None:  # absent: recorded before line maps, none to read
    return await deps.enrichment_job(svc, trace_id, trace, ENRICH_ANALYSIS, target, n, work)
  return None

def sass_or_409(rec: TargetRecord) -> dict[str, Any]:
  if (view := sass.view(rec)) is not None: return view
  if (facts := rec["compile"]) is None: raise HTTPException(409, "the kernel did not compile: no SASS")
  raise HTTPException(409, facts.get("sass_note") or f"the kernel did not compile: {facts['message'] or 'no SASS'}")

@api.get("/traces/{trace_id}/kernels/{n}/targets/{target}/sass",
         summary="One kernel's SASS (cuda, ptx): each instruction with its source line, that line's UOps and the registers live there",
         responses=enrichment_responses("its SASS"))
async def get_kernel_sass(trace_id: str, trace: LightTrace, n: int, target: str, svc: ServicesDep, work: Work) -> Any:
  """nvdisasm on the cubin of the record's compile (line information on, the same code): {tool, lines_of, count, registers, peak_live,
  peak_offset, peak_line, spills, mix, instructions: [{offset, text, op, line, live, ulive, uops}], heaviest: [{uop, op, instructions}],
  lines: {line: [offsets]}, uops_mapped, estimate (the UOp-level live values)}. What it needs and the trace lacks (the record on this
  target, its compile facts, its line map) is computed first, in a worker: 202 with that job until it is stored."""
  if (pending := await sass_job(svc, trace_id, trace, n, target, work)) is not None: return pending
  return sass_or_409(target_records(await deps.whole_kernel(svc, trace_id, trace, n))[target])

@router.get("/t/{trace_id}/k/{n}/sass", response_class=HTMLResponse)
async def kernel_sass_page(request: Request, trace_id: str, n: int, svc: ServicesDep, work: Work, target: str = "cuda") -> HTMLResponse:
  """The kernel's source beside its SASS, coloured by line; a line, an instruction or a UOp clicked highlights the others."""
  trace = await admission.stored_trace(svc, trace_id, light=True)
  if trace is None: return await trace_page(request, svc, trace_id, "sass.html", ("kernels", "sass"))
  k = await deps.whole_kernel(svc, trace_id, trace, n)
  target = target if target in SASS_TARGETS else SASS_TARGETS[0]
  pending, error, view = None, None, None
  try:
    if (job := await sass_job(svc, trace_id, trace, n, target, work)) is not None: pending = json.loads(bytes(job.body))
    else: view = sass_or_409(target_records(k)[target])
  except HTTPException as e: error = e.detail
  except Busy as e: pending = {"detail": in_line(e)}  # its script asks again as Retry-After says
  resp = await trace_page(request, svc, trace_id, "sass.html", ("kernels", "sass"), light=True, kernel=k, rec=target_records(k).get(target),
                          target=target, sass=view, pending=pending, error=error, targets=SASS_TARGETS,
                          api=f"{trace_api_url(trace_id)}/kernels/{n}/targets/{target}/sass")
  if pending: resp.headers["Cache-Control"] = "no-store"
  return resp

@router.get("/t/{trace_id}/k/{n}/facts", response_class=HTMLResponse)
async def kernel_facts_fragment(request: Request, trace_id: str, n: int, trace: LightTrace, svc: ServicesDep,
                                target: str | None = None) -> HTMLResponse:
  """The kernel page's compile facts and disassembly, as the page shows them: what its placeholder is replaced by once computed."""
  k = await deps.whole_kernel(svc, trace_id, trace, n)
  records = target_records(k)
  target = target if target in records else host_target(k)
  return templates_of(request).TemplateResponse(request, "_compile_facts.html", {"rec": records[target], "target": target, "k": k,
                                                                                 "trace_id": trace_id, "facts_pending": False,
                                                                                 "facts_error": None})

@router.get("/t/{trace_id}/k/{n}/analysis", response_class=HTMLResponse)
async def kernel_analysis_fragment(request: Request, trace_id: str, n: int, trace: LightTrace, svc: ServicesDep,
                                   target: str | None = None) -> HTMLResponse:
  """The kernel page's analysis block and its own source tab (with the line map), as the page shows them: what their placeholders are
  replaced by once the analysis is stored."""
  k = await deps.whole_kernel(svc, trace_id, trace, n)
  records = target_records(k)
  target = target if target in records else host_target(k)
  return templates_of(request).TemplateResponse(request, "_analysis.html", {
    "k": k, "rec": records[target], "target": target, "trace_id": trace_id, "host": target == host_target(k),
    "tab": "host" if target == host_target(k) else target, "analysis_pending": False, "analysis_error": None})

@router.get("/t/{trace_id}/k/{n}", response_class=HTMLResponse)
async def kernel_page(request: Request, trace_id: str, n: int, svc: ServicesDep, work: Work, graph: str = "ast", code: str | None = None,
                      at: str | None = None, target: str | None = None, opts: str | None = Query(None, max_length=400),
                      opts_from: str = Query("none", alias="from", max_length=16)) -> HTMLResponse:
  """opts (OP:AXIS:ARG,...) and from: a hand schedule's permalink: the Opts panel opens on it and (its script) asks for it."""
  trace = await admission.stored_trace(svc, trace_id, light=True)
  if trace is None: return await trace_page(request, svc, trace_id, "kernel.html", "kernels")
  k = await deps.whole_kernel(svc, trace_id, trace, n)
  records, host = target_records(k), host_target(k)
  if target is None and code in TARGETS and code not in records: target = code  # a source tab not rendered yet: render it, as ?target= does
  notices = []
  if target is not None and target not in TARGETS:  # nothing asked for is ignored in silence
    notices.append(f"There is no target {target[:40]!r}: the explorer renders {', '.join(TARGETS)}. Showing the host's, {host}.")
  # the record computed now where the trace has none (the page puts it in place when it is stored), else its enrichments still to do
  asked_target = target if target in TARGETS else None
  first = svc.enrichments.first_view(trace_id, trace, k, n, asked_target, work.permit_if_allowed)
  target, asked = first.shown, first.record or Asked()
  pending = asked_target if first.record else None
  pending_error, pending_detail = asked.error, asked.detail if asked.running else ""
  rec = records[target]
  analysis_pending, analysis_error = bool(first.analysis and first.analysis.running), first.analysis and first.analysis.error
  facts_pending, facts_error = bool(first.facts and first.facts.running), first.facts and first.facts.error
  browsable = target == host or all("group" in p for p in rec["passes"])  # trace schema 1: host passes only
  prefix, passes = (f"codegen/{n}", k["passes"]) if target == host else (f"codegen@{target}/{n}", rec["passes"])
  step = stepper(passes if browsable else [], prefix, asked_pass(request), at, trace_id=trace_id,
                 blob_target=None if target == host else (rec.get("rewrites") or target))
  notices += step_notices(request, step, f"kernel {n}'s {target} codegen")
  tabs = [t for t in trace["variant"]["targets"] if t in k["sources"] or t in k["source_errors"]]
  tabs += [t for t in k["sources"] if t not in tabs and t != "host"] + ["host", "uops"]
  tabs += ["compiled"] if facts_pending or ((compiled := rec["compile"]) and compiled.get("disasm")) else []
  own_tab = "host" if target == host else target  # the host's source is under "host"
  if code is not None and code not in tabs: notices.append(f"There is no {code[:40]!r} source tab here: showing {own_tab}.")
  code = code if code in tabs else own_tab if own_tab in tabs else tabs[0]
  resp = await trace_page(request, svc, trace_id, "kernel.html", ("kernels", "source"), light=True, kernel=k, step=step,
                          api=f"{trace_api_url(trace_id)}/kernels/{n}", graph_mode="passes" if graph == "passes" else "ast", code=code,
                          code_tabs=tabs, target=target, rec=rec, records=records, all_targets=TARGETS, pending=pending,
                          pending_error=pending_error, pending_detail=pending_detail, facts_pending=facts_pending, facts_error=facts_error,
                          analysis_pending=analysis_pending, analysis_error=analysis_error, asked_opts=_asked_opts(opts, opts_from),
                          asked_from=opts_from, notices=notices, bound=bound_values(trace, k))
  if pending or facts_pending or analysis_pending: resp.headers["Cache-Control"] = "no-store"  # it changes when they are stored
  return resp

def _asked_opts(opts: str | None, start: str) -> str | None:
  """A permalink's opts as the panel's script takes them (None: none asked, or text that is no opt list: the panel starts empty)."""
  if opts is None: return None
  try: return ",".join(hand_opts(split_opts(opts), start))
  except SpecError: return None
