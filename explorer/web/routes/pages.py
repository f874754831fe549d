"""Server-rendered pages. Every view has a stable URL; tabs and steps live in the query string (?code=cuda, ?pass=12&at=m3)."""
from __future__ import annotations
import asyncio, urllib.parse
from typing import Any
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from pydantic import ValidationError
from explorer.analysis import memory
from explorer.present.graphs import fmt_seconds
from explorer.spec import ALGOS, CONSTS, DTYPES, PRESETS, REWRITES, STAGINGS, TARGETS, TILES, WINO_IMPLS, SpecError, Variant
from explorer.web.http import deps
from explorer.web.services.graphs import MAX_STEPS
from explorer.web.services.traces import STAGE_TITLES, ClientBusy, QueueFull, busy_answer
from explorer.web.http.models import TraceRequest
from explorer.web.http.templates import pygments_css
from explorer.web.http.work import Work

router = APIRouter(include_in_schema=False)
PYGMENTS_CSS = pygments_css()

async def page(request: Request, name: str, status_code: int = 200, **ctx: Any) -> HTMLResponse:
  return await request.app.state.templates.render(request, name, ctx, status_code=status_code)

@router.get("/assets/pygments.css")
async def pygments_stylesheet() -> Response:
  return PlainTextResponse(PYGMENTS_CSS, media_type="text/css", headers={"Cache-Control": "public, max-age=86400"})

# ***** home: the form and the recent traces *****

FORM_DEFAULTS = {**PRESETS["small"].to_dict(), **{k: v for k, v in Variant().to_dict().items() if k not in ("notes", "device", "rewrite_file")},
                 "preset": "small", "padding": "", "beam": 2, "peel": 2}

def home_context(recent: list[dict], values: dict | None = None, error: str | None = None) -> dict:
  return {"presets": {n: {**s.to_dict(), "label": s.label()} for n, s in PRESETS.items()}, "targets": TARGETS, "algos": ALGOS,
          "wino_impls": WINO_IMPLS, "tiles": TILES, "stagings": STAGINGS, "consts_options": CONSTS, "dtypes": list(DTYPES), "recent": recent,
          "values": values or FORM_DEFAULTS, "error": error, "rewrite_catalogue": REWRITES}

@router.get("/", response_class=HTMLResponse)
async def home(request: Request) -> HTMLResponse:
  recent = await asyncio.to_thread(request.app.state.store.recent, 30)
  return await page(request, "home.html", **home_context(recent))

SPEC_FIELDS = ("batch", "cin", "cout", "height", "width", "kernel", "stride", "padding", "groups")

def form_to_request(form: dict[str, list[str]]) -> tuple[dict, TraceRequest]:
  """The home form's fields (application/x-www-form-urlencoded) as a TraceRequest; values echo back into the form on error.
  A preset name wins over the shape fields; preset=custom uses the fields."""
  one = {k: v[-1].strip() for k, v in form.items()}
  values = {**FORM_DEFAULTS, **one, "targets": form.get("targets", []), "fallback": "fallback" in one, "time": "time" in one,
            "rewrites": form.get("rewrites", [])}
  spec: dict[str, Any] = {k: one[k] for k in SPEC_FIELDS if one.get(k, "") != ""}
  spec["dtype"] = one.get("dtype", "float32")
  opt = one.get("opt", "heuristic")
  if opt == "beam": opt = f"beam:{one.get('beam', '').strip() or '2'}"
  variant = {"algo": one.get("algo", "direct"), "wino_impl": one.get("wino_impl", "builtin"), "tile": one.get("tile", "F(4,3)"),
             "staging": one.get("staging", "staged"), "consts": one.get("consts", "symbolic"), "opt": opt, "targets": form.get("targets", []),
             "warmup": one.get("warmup", "2"), "repeats": one.get("repeats", "10"), "fallback": values["fallback"], "time": values["time"],
             "rewrites": [f"peel:{one.get('peel', '').strip() or '2'}" if r == "peel" else r for r in form.get("rewrites", [])]}
  if (preset := one.get("preset", "custom")) in PRESETS: return values, TraceRequest.model_validate({"preset": preset, "variant": variant})
  return values, TraceRequest.model_validate({"spec": spec, "variant": variant})

def validation_message(e: ValidationError) -> str:
  parts = []
  for err in e.errors():
    loc = ".".join(str(x) for x in err.get("loc", ()))
    parts.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
  return "; ".join(parts)

@router.post("/t", response_class=HTMLResponse)
async def submit_form(request: Request) -> Response:
  form = urllib.parse.parse_qs((await request.body()).decode(errors="replace"), keep_blank_values=True)
  values, error = {**FORM_DEFAULTS, **{k: v[-1] for k, v in form.items()}, "targets": form.get("targets", []),
                   "rewrites": form.get("rewrites", [])}, None
  busy: tuple[int, str] | None = None
  try:
    values, req = form_to_request(form)
    status, _ = await deps.submit(request, req)
    return RedirectResponse(status["url"], status_code=303)
  except ValidationError as e: error = validation_message(e)
  except SpecError as e: error = str(e)
  except (QueueFull, ClientBusy) as e: error, busy = str(e), busy_answer(e)
  recent = await asyncio.to_thread(request.app.state.store.recent, 30)
  resp = await page(request, "home.html", status_code=busy[0] if busy else 422, **home_context(recent, values, error))
  if busy: resp.headers["Retry-After"] = busy[1]
  return resp

@router.post("/t/{trace_id}/rerun", response_class=HTMLResponse)
async def rerun_form(request: Request, trace_id: str) -> Response:
  """The Re-run button of an interrupted or failed trace: submit its stored request again and follow it."""
  status, _ = await deps.rerun(request, trace_id)
  return RedirectResponse(status.get("url") or deps.trace_url(trace_id), status_code=303)

# ***** trace pages *****

def ribbon(trace: dict, trace_id: str, current: str | tuple[str, ...]) -> list[dict]:
  """The pipeline as links: each stage with a one-line fact and whether it worked."""
  failed = {f["stage"] for f in trace.get("failures") or []}
  failed |= {stage for stage, check in (trace.get("spec_checks") or {}).items() if not check.get("ok", True)}  # a spec violation is red too
  failed |= {"codegen" for k in trace.get("kernels") or [] for check in (k.get("spec") or {}).values() if not check.get("ok", True)}
  done = set(trace.get("stage_seconds") or {})
  def state(*stages: str) -> str: return "error" if failed & set(stages) else "done" if set(stages) <= done else "skipped"
  sched, totals, kernels = trace.get("scheduler") or {}, trace.get("totals") or {}, trace.get("kernels") or []
  counts = sched.get("stage_counts") or {}
  targets = (trace.get("variant") or {}).get("targets") or []
  n_targets, first_target = len(targets), (targets or ["host"])[0]
  time_s = (totals.get("time_s") or {}).get("median")
  base, n_buffers = deps.trace_url(trace_id), len(trace.get("buffers") or [])
  rows = [
    ("tensor", "Tensor graph", f"{base}/graph/tensor", f"{(trace.get('tensor_graph') or {}).get('uops', '–')} uops", state("tensor_graph")),
    ("rangeify", "Rangeify", f"{base}/rangeify", f"{len(sched.get('passes') or [])} passes · {counts.get('created', 0)} STAGEs", state("schedule")),
    ("bufferize", "Kernel graph", f"{base}/bufferize", f"{counts.get('kept', 0)} kept · {counts.get('fused', 0)} fused · {n_buffers} buffers",
     state("kernel_graph")),
    ("kernels", "Kernels", f"{base}/k/0" if kernels else base, f"{len(kernels)} kernels · codegen", state("codegen")),
    ("source", "Source", f"{base}/k/0?code={first_target}" if kernels else base, f"{n_targets} targets + host", state("render")),
    ("timings", "Timings", f"{base}#timings", "–" if time_s is None else f"{fmt_seconds(time_s)} total", state("run", "timing")),
    ("roofline", "Roofline", f"{base}/roofline", f"on {(trace.get('env') or {}).get('device', '–')}", state("timing")),
  ]
  current = (current,) if isinstance(current, str) else current
  return [{"key": k, "title": t, "url": u, "fact": f, "state": s, "current": k in current} for k, t, u, f, s in rows]

async def trace_page(request: Request, trace_id: str, template: str, current: str | tuple[str, ...], **ctx: Any) -> HTMLResponse:
  """A trace view; while the trace runs (or if it failed before storing anything) the progress page stands in, at the same URL."""
  trace = await deps.stored_trace(request, trace_id)
  if trace is None:
    status = await deps.status_of(request, trace_id)
    if status is None: raise HTTPException(404, f"no trace {trace_id}")
    return await page(request, "progress.html", trace_id=trace_id, status=status, stage_titles=STAGE_TITLES)
  return await page(request, template, trace=trace, trace_id=trace_id, ribbon=ribbon(trace, trace_id, current), base=deps.trace_url(trace_id), **ctx)

@router.get("/t/{trace_id}", response_class=HTMLResponse)
async def trace_overview(request: Request, trace_id: str, target: str | None = None) -> HTMLResponse:
  """The overview; ?target=T turns the kernel table's figures (names, dims, uops, Estimates, registers) to that target's records."""
  trace = await deps.stored_trace(request, trace_id)
  kernels = (trace or {}).get("kernels") or []
  available = list(dict.fromkeys(t for k in kernels for t in deps.target_records(k)))
  host = deps.host_target(kernels[0]) if kernels else None
  target = target if target in available else host
  views = [deps.target_records(k).get(target or "", {}) for k in kernels]
  return await trace_page(request, trace_id, "trace.html", "overview", stage_titles=STAGE_TITLES, table_target=target, table_targets=available,
                          views=views, host_target=host)

@router.get("/t/{trace_id}/bufferize", response_class=HTMLResponse)
async def bufferize(request: Request, trace_id: str) -> HTMLResponse:
  trace = await deps.stored_trace(request, trace_id)
  return await trace_page(request, trace_id, "bufferize.html", "bufferize", api=f"/api/traces/{trace_id}/bufferize",
                          memory=memory.timeline(trace) if trace else None)

@router.get("/t/{trace_id}/graph/tensor", response_class=HTMLResponse)
async def tensor_graph(request: Request, trace_id: str) -> HTMLResponse:
  return await trace_page(request, trace_id, "tensor.html", "tensor", api=f"/api/traces/{trace_id}/graphs/tensor")

def pick_pass(passes: list[dict], asked: int | None, preferred: str | None = None) -> int:
  if asked is not None and 0 <= asked < len(passes): return asked
  if preferred is not None and (i := next((i for i, p in enumerate(passes) if p["name"] == preferred), None)) is not None: return i
  return next((i for i, p in enumerate(passes) if p["matches"]), 0)

def pick_at(at: str | None, p: dict | None) -> str:
  if at in ("before", "after"): return at
  if at and at.startswith("m") and at[1:].isdigit() and p is not None and 1 <= int(at[1:]) <= p["matches"]: return at
  return "after"

def stepper(passes: list[dict], prefix: str, asked_pass: int | None, asked_at: str | None, preferred: str | None = None, trace_id: str = "",
            blob_target: str | None = None) -> dict:
  """blob_target: whose rewrite blob the passes address (None: the host's), for the match list's API calls."""
  i = pick_pass(passes, asked_pass, preferred) if passes else 0
  p = passes[i] if passes else None
  return {"passes": [{"index": j, **q} for j, q in enumerate(passes)], "pass": i, "at": pick_at(asked_at, p), "prefix": prefix,
          "max_steps": MAX_STEPS, "trace_id": trace_id, "blob_target": blob_target}

@router.get("/t/{trace_id}/rangeify", response_class=HTMLResponse)
async def rangeify(request: Request, trace_id: str, at: str | None = None) -> HTMLResponse:
  asked = request.query_params.get("pass")
  trace = await deps.stored_trace(request, trace_id)
  passes = ((trace or {}).get("scheduler") or {}).get("passes") or []
  step = stepper(passes, "rangeify", int(asked) if asked and asked.isdigit() else None, at, preferred="symbolic+reduce_collapse+debuf",
                 trace_id=trace_id)
  return await trace_page(request, trace_id, "rangeify.html", "rangeify", step=step, api=f"/api/traces/{trace_id}/rangeify")

@router.get("/t/{trace_id}/k/{n}", response_class=HTMLResponse)
async def kernel_page(request: Request, trace_id: str, n: int, work: Work, graph: str = "ast", code: str | None = None, at: str | None = None,
                      target: str | None = None) -> HTMLResponse:
  trace = await deps.stored_trace(request, trace_id)
  if trace is None: return await trace_page(request, trace_id, "kernel.html", "kernels")
  k = deps.kernel_or_404(trace, n)
  records = deps.target_records(k)
  pending, pending_error = (target if target in TARGETS and target not in records else None), None
  if pending is not None:  # computed on this first request, in a worker; the page follows it and reloads when it is stored
    try: await deps.target_job(request, trace_id, trace, pending, work)
    except HTTPException as e: pending_error = e.detail
  target = target if target in records else deps.host_target(k)
  rec = records[target]
  asked = request.query_params.get("pass")
  browsable = target == deps.host_target(k) or all("group" in p for p in rec.get("passes") or [])  # trace schema 1: host passes only
  prefix, passes = (f"codegen/{n}", k.get("passes") or []) if target == deps.host_target(k) else (f"codegen@{target}/{n}", rec["passes"])
  step = stepper(passes if browsable else [], prefix, int(asked) if asked and asked.isdigit() else None, at, trace_id=trace_id,
                 blob_target=None if target == deps.host_target(k) else target)
  tabs = [t for t in (trace.get("variant") or {}).get("targets") or [] if t in k["sources"] or t in k.get("source_errors", {})]
  tabs += [t for t in k["sources"] if t not in tabs and t != "host"] + ["host", "uops"]
  tabs += ["compiled"] if (rec.get("compile") or {}).get("disasm") else []
  code = code if code in tabs else target if target in tabs else tabs[0]
  resp = await trace_page(request, trace_id, "kernel.html", ("kernels", "source"), kernel=k, step=step, api=f"/api/traces/{trace_id}/kernels/{n}",
                          graph_mode="passes" if graph == "passes" else "ast", code=code, code_tabs=tabs, target=target, rec=rec, records=records,
                          all_targets=TARGETS, pending=pending, pending_error=pending_error)
  if pending: resp.headers["Cache-Control"] = "no-store"  # the page changes when the target is stored
  return resp
