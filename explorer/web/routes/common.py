"""What the pages share: rendering one (off the event loop), a trace's page with its pipeline ribbon (the progress page in its place
while the trace runs), and the pass stepper of the rangeify and codegen pages."""
from __future__ import annotations
import asyncio
import collections
import time
from collections.abc import Mapping, Sequence
from typing import Any
from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse
from explorer.present.render import rendered_targets
from explorer.schema import KernelRecord, Pass, SpecCheck, TraceRecord, host_target
from explorer.stages import STAGE_TITLES
from explorer.text import fmt_seconds
from explorer.web.http import deps
from explorer.web.http.work import WorkGate
from explorer.web.services import admission
from explorer.web.services.enrichments import EnrichmentUnavailable, EnrichTask
from explorer.web.services.graphs import MAX_STEPS
from explorer.web.services.lifecycle import DONE, ERROR, Busy
from explorer.web.services.registry import Services
from explorer.web.urls import kernel_url, trace_url

async def page(request: Request, name: str, status_code: int = 200, **ctx: Any) -> HTMLResponse:
  return await deps.templates_of(request).render(request, name, ctx, status_code=status_code)

def ribbon(trace: TraceRecord, trace_id: str, current: str | tuple[str, ...] = ()) -> list[dict[str, Any]]:
  """The pipeline as links: each stage with a one-line fact and whether it worked; `current`, the page's."""
  return marked(ribbon_rows(trace, trace_id), current)

def marked(rows: list[dict[str, Any]], current: str | tuple[str, ...]) -> list[dict[str, Any]]:
  current = (current,) if isinstance(current, str) else current
  return [{**r, "current": r["key"] in current} for r in rows]

def ribbon_rows(trace: TraceRecord, trace_id: str) -> list[dict[str, Any]]:
  """The ribbon's stages (none current): a walk over every kernel, once per parsed trace (trace_page)."""
  failed = {f["stage"] for f in trace["failures"]}
  failed |= {stage for stage, check in trace.get("spec_checks", {}).items() if not check["ok"]}  # a spec violation is red too
  failed |= {"codegen" for k in trace["kernels"] for check in kernel_spec_checks(k) if not check["ok"]}
  done = set(trace["stage_seconds"])
  def state(*stages: str) -> str: return "error" if failed & set(stages) else "done" if set(stages) <= done else "skipped"
  sched, kernels, graph = trace["scheduler"], trace["kernels"], trace["tensor_graph"]
  counts = sched.get("stage_counts", {}) if sched is not None else {}
  host = host_target(kernels[0]) if kernels else None
  targets = [t for t in rendered_targets(trace) if t != host]
  first_target = (targets or ["host"])[0]
  time_s = (trace["totals"].get("time_s") or {}).get("median")  # a failed trace's totals are empty; an untimed one's time_s is None
  base, n_buffers = trace_url(trace_id), len(trace["buffers"])
  rows = [
    ("tensor", "Tensor graph", f"{base}/graph/tensor", f"{graph['uops'] if graph is not None else '–'} uops", state("tensor_graph")),
    ("rangeify", "Rangeify", f"{base}/rangeify", f"{len(rangeify_passes(trace))} passes · {counts.get('created', 0)} STAGEs",
     state("schedule")),
    ("bufferize", "Kernel graph", f"{base}/bufferize", f"{counts.get('kept', 0)} kept · {counts.get('fused', 0)} inlined · {n_buffers} buffers",
     state("kernel_graph")),
    ("kernels", "Kernels", kernel_url(trace_id, 0) if kernels else base, f"{len(kernels)} kernels · codegen", state("codegen")),
    ("source", "Source", kernel_url(trace_id, 0, code=first_target) if kernels else base,
     f"{len(targets)} target{'' if len(targets) == 1 else 's'} + host", state("render")),
    ("timings", "Timings", f"{base}#timings", "–" if time_s is None else f"{fmt_seconds(time_s)} total", state("run", "timing")),
    ("roofline", "Roofline", f"{base}/roofline", f"on {trace['env']['device']}", state("timing")),
    ("timeline", "Timeline", f"{base}/timeline", "host and device over time" if trace.get("timeline") else "not recorded",
     "done" if trace.get("timeline") else "skipped"),
  ]
  why = spec_rejections(trace)
  return [{"key": k, "title": t, "url": u, "fact": f, "state": s, "current": False, "why": why.get(k)} for k, t, u, f, s in rows]

def kernel_spec_checks(kernel: KernelRecord) -> list[SpecCheck]:
  """The kernel's spec checks (its AST's; older traces' program too), none where the trace ran none."""
  if (spec := kernel.get("spec")) is None: return []
  return [spec["ast"], *([spec["program"]] if "program" in spec else [])]

def rangeify_passes(trace: TraceRecord) -> list[Pass]:
  """The scheduler's rangeify passes (none where scheduling failed)."""
  return trace["scheduler"]["passes"] if trace["scheduler"] is not None else []

def spec_rejections(trace: TraceRecord) -> dict[str, str]:
  """What a stage's red dot means where tinygrad's spec rejected UOps of it (a failure says so on the page), by ribbon key."""
  def said(check: SpecCheck) -> str:
    first, n = check["violations"][0]["message"] if check["violations"] else "?", check["violation_count"] or 1
    return (f"tinygrad's spec rejects this UOp: {first}" + (f" (and {n - 1} more)" if n > 1 else "") +
            f" [{check['spec']}]")
  checks = trace.get("spec_checks", {})  # absent where the trace checked none
  out = {key: said(checks[stage]) for stage, key in (("tensor_graph", "tensor"), ("kernel_graph", "bufferize"))
         if stage in checks and not checks[stage]["ok"]}
  bad = [c for k in trace["kernels"] for c in kernel_spec_checks(k) if not c["ok"]]
  return out | ({"kernels": said(bad[0])} if bad else {})

async def trace_page(request: Request, svc: Services, trace_id: str, template: str, current: str | tuple[str, ...], light: bool = False,
                     **ctx: Any) -> HTMLResponse:
  """A trace view; while the trace runs (or if it failed before storing anything) the progress page stands in, at the same URL. light:
  the template reads the trace light (no kernel's sources, listing or passes: explorer.store.pieces), as the route did."""
  trace = await admission.stored_trace(svc, trace_id, light)
  if trace is None: return await progress_page(request, svc, trace_id)
  rows = await asyncio.to_thread(svc.traces.derived, trace_id, trace, "ribbon", lambda t: ribbon_rows(t, trace_id))  # a big program's: 30 ms
  return await page(request, template, trace=trace, trace_id=trace_id, ribbon=marked(rows, current), base=trace_url(trace_id), **ctx)

async def progress_page(request: Request, svc: Services, trace_id: str) -> HTMLResponse:
  """What stands in for a trace that is not stored: its progress while it runs (or if it failed before storing anything); else 404."""
  status = await admission.status_of(svc, trace_id)
  if status is None: raise HTTPException(404, f"no trace {trace_id}")
  return await page(request, "progress.html", trace_id=trace_id, status=status, stage_titles=STAGE_TITLES, so_far=so_far(svc, trace_id))

def so_far(svc: Services, trace_id: str) -> dict[str, Any] | None:
  """What a running trace has reported so far (its schedule, its kernels through codegen), for the page that stands in for it."""
  job = svc.jobs.get(trace_id)
  return job.so_far.view() if job is not None and job.active and job.so_far.started else None

def attachment(name: str, download: bool) -> dict[str, str]:
  """The Content-Disposition of an export: a download, or shown in the browser."""
  return {"Content-Disposition": f'{"attachment" if download else "inline"}; filename="{name}"'}

def pick_pass(passes: Sequence[Mapping[str, Any]], asked: int | None, preferred: str | None = None) -> int:
  if asked is not None and 0 <= asked < len(passes): return asked
  if preferred is not None and (i := next((i for i, p in enumerate(passes) if p["name"] == preferred), None)) is not None: return i
  return next((i for i, p in enumerate(passes) if p["matches"]), 0)

def pick_at(at: str | None, p: Mapping[str, Any] | None) -> str:
  if at in ("before", "after"): return at
  if at and at.startswith("m") and at[1:].isdigit() and p is not None and 1 <= int(at[1:]) <= p["matches"]: return at
  return "after"

def pass_label(passes: Sequence[Mapping[str, Any]], j: int) -> str:
  """A pass as the list shows it: a nested rewrite with no name of its own (tinygrad's "graph_rewrite") is named by the pass it ran in."""
  p = passes[j]
  if p["name"] != "graph_rewrite" or not p.get("depth"): return str(p["name"])
  parent = next((passes[i]["name"] for i in range(j - 1, -1, -1) if (passes[i].get("depth") or 0) < p["depth"]), None)
  return f"graph_rewrite in {parent}" if parent else "graph_rewrite"

def nesting(passes: Sequence[Mapping[str, Any]]) -> list[int | None]:
  """Per pass, the top-level pass it ran inside (None for a top-level one): the list groups nested rewrites under it, collapsed."""
  out: list[int | None] = []
  top: int | None = None
  for j, p in enumerate(passes):
    if not p.get("depth"): top = j
    out.append(None if not p.get("depth") else top)
  return out

def stepper(passes: Sequence[Mapping[str, Any]], prefix: str, asked_pass: int | None, asked_at: str | None, preferred: str | None = None,
            trace_id: str = "", blob_target: str | None = None) -> dict[str, Any]:
  """blob_target: whose rewrite blob the passes address (None: the host's), for the match list's API calls."""
  i = pick_pass(passes, asked_pass, preferred) if passes else 0
  p = passes[i] if passes else None
  top = nesting(passes)
  nested = collections.Counter(top)  # per pass, how many ran inside it
  return {"passes": [{"index": j, **q, "label": pass_label(passes, j), "top": top[j], "nested": nested[j]}
                     for j, q in enumerate(passes)], "pass": i, "at": pick_at(asked_at, p),
          "prefix": prefix,
          "max_steps": MAX_STEPS, "trace_id": trace_id, "blob_target": blob_target}

def step_notices(request: Request, step: dict[str, Any], what: str) -> list[str]:
  """What a page says when its URL asked for a pass or a step of it that does not exist: what was asked, and what is shown instead."""
  out, passes = [], step["passes"]
  asked, at = request.query_params.get("pass"), request.query_params.get("at")
  shown = f"pass {step['pass']} ({passes[step['pass']]['name']})" if passes else "no pass"
  if asked is not None and (not asked.isdigit() or int(asked) != step["pass"]):
    out.append(f"There is no pass {asked[:20]!r} in {what} (it has {len(passes)}, numbered 0 to {max(len(passes) - 1, 0)}): showing {shown}.")
  if at is not None and at != step["at"]:
    out.append(f"{at[:20]!r} is not a step of {shown} (before, after, or m1 to m{passes[step['pass']]['matches'] if passes else 0}): "
               f"showing {step['at']}.")
  return out

def asked_pass(request: Request) -> int | None:
  """?pass=N: not a parameter of its own (its name is Python's keyword)."""
  asked = request.query_params.get("pass")
  return int(asked) if asked and asked.isdigit() else None

# ***** a page whose parts are computed on its first view: it waits a moment, then says what it waits for *****

PAGE_WAIT_S = 1.5  # how long a page waits for what it shows before it says what it waits for, and comes back
Preparing = list[EnrichTask]  # what a page waits for (records, analyses, compile facts being computed): it shows those

async def prepared(svc: Services, work: WorkGate, trace_id: str, trace: TraceRecord, kind: str, target: str, kernels: list[int] | None,
                   waiting: Preparing | None) -> TraceRecord:
  """The trace with `kind` on `target` for these kernels (None: all), computed first where missing and the request may start work;
  else as it is. waiting None (the API): until it is stored; else (a page) the task is started, waited for PAGE_WAIT_S, and where it
  still runs added to `waiting`: the page says what it waits for and comes back (preparing_page), rather than hold its reader for the
  seconds a program's kernels take."""
  if not (missing := svc.enrichments.missing(trace, kind, target, kernels)) or (permit := work.permit_if_allowed()) is None: return trace
  try:
    if waiting is None: return await svc.enrichments.completed(trace_id, trace, kind, target, permit, kernels)
    task = svc.enrichments.start(trace_id, trace, kind, target, tuple(missing), permit, neighbours=False)
  except (EnrichmentUnavailable, Busy): return trace
  until = time.monotonic() + PAGE_WAIT_S  # a small trace's are stored by then: its page comes whole, at once
  while task.active and time.monotonic() < until: await asyncio.sleep(0.05)
  if task.active and waiting is not None: waiting.append(task)
  elif task.status == ERROR: svc.enrichments.forget(trace_id, kind, target, tuple(missing))  # its figures say "—"; asked again, tried again
  elif task.status == DONE:  # read again as it was given: light, or whole
    return await asyncio.to_thread(svc.enrichments.read, trace_id, () if any("light" in k for k in trace["kernels"]) else None) or trace
  return trace

async def preparing_page(request: Request, svc: Services, title: str, waiting: Preparing, what: str) -> HTMLResponse:
  """A page while what it shows is computed (`what`, in words): each task with where it stands; it comes back until they are stored."""
  resp = await page(request, "preparing.html", title=title, tasks=[svc.enrichments.view(t) for t in waiting], what=what)
  resp.headers["Cache-Control"] = "no-store"
  return resp

