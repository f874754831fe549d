"""Diff two stored traces: /diff?a=&b= (while one is missing, a picker: two stored traces, or two variants of one preset traced by
POST /diff/variants, which lands on their diff), the permalink /diff/{a}/{b}?target=&target_b=, its JSON twin
/api/diff/{a}/{b}, and the two measurements as background jobs (/api/diff/{a}/{b}/timing and /numerics). "Compare with..." on every
trace page lists quick picks (the same spec with one variant field flipped, or two targets of the same trace) and stored traces."""
from __future__ import annotations
import asyncio
from collections.abc import Mapping
from typing import Any
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import ValidationError
from explorer.analysis.diff import comparable, headline, relation_label, time_headline, tinygrads_of
from explorer.schema import KernelRecord, TraceRecord
from explorer.spec import PRESETS, SpecError, knobs
from explorer.stages import STAGE_TITLES
from explorer.store import trace_key
from explorer.targets import TARGETS
from explorer.tinygrads import TINYGRAD, TRACEABLE
from explorer.web.http import deps
from explorer.web.http.deps import ServicesDep
from explorer.web.http.models import TraceRequest, documented
from explorer.web.http.templates import TARGET_LABELS
from explorer.web.http.work import Work
from explorer.web.routes.common import page
from explorer.web.services import admission
from explorer.web.services.diffs import MEASURES, fold, side_by_side
from explorer.web.services.lifecycle import Busy
from explorer.web.services.registry import Services
from explorer.web.services.remote import queue_answers
from explorer.web.urls import diff_url

router = APIRouter(include_in_schema=False)
api = APIRouter(prefix="/api", tags=["diff"])
OFFERED = tuple(name for name, (_, k) in knobs().items() if k.web == "offered")  # the variant fields a request may set

# ***** quick picks: the same spec with one thing changed *****

def request_of(trace: TraceRecord, **changes: Any) -> dict[str, Any]:
  """A trace request for this trace's spec and variant, with changes."""
  variant: Mapping[str, Any] = trace["variant"]
  v = {k: variant[k] for k in OFFERED if k in variant} | {"targets": list(trace["variant"]["targets"])}
  preset = trace["preset"]
  base = {"preset": preset} if preset in PRESETS and PRESETS[preset].to_dict() == trace["spec"] else {"spec": trace["spec"]}
  return {**base, "variant": {**v, **changes}}

def flips(trace: TraceRecord) -> list[tuple[str, str, dict[str, str]]]:
  """(name, label, variant changes) of the variants worth comparing with this one."""
  v = trace["variant"]
  out = []
  if v["algo"] == "winograd" and v["wino_impl"] == "explorer":
    other = {"staged": "fused", "fused": "staged", "single": "staged"}[v["staging"]]
    out.append(("staging", f"{v['staging']} → {other}", {"staging": other}))
    other = "materialized" if v["consts"] == "symbolic" else "symbolic"
    out.append(("consts", f"{v['consts']} → {other} constants", {"consts": other}))
    other = "F(2,3)" if v["tile"] == "F(4,3)" else "F(4,3)"
    out.append(("tile", f"tile {v['tile']} → {other}", {"tile": other}))
  if v["algo"] == "direct":
    out.append(("algo", "direct → Winograd (builtin)", {"algo": "winograd", "wino_impl": "builtin"}))
    out.append(("algo-explorer", "direct → Winograd (explorer, staged)", {"algo": "winograd", "wino_impl": "explorer"}))
  else:
    out.append(("algo", "Winograd → direct", {"algo": "direct", "wino_impl": "builtin", "tile": "F(4,3)", "staging": "staged", "consts": "symbolic"}))
  opt = v["opt"]
  if opt == "heuristic": out += [("opt", "heuristic → BEAM 2", {"opt": "beam:2"}), ("opt-none", "heuristic → no optimization", {"opt": "none"})]
  else: out.append(("opt", f"{opt} → heuristic", {"opt": "heuristic"}))
  return out

def quick_picks(svc: Services, trace_id: str, trace: TraceRecord) -> list[dict[str, Any]]:
  """Each pick with the id its trace has (or will have) and whether it is stored; picks the server would refuse are left out."""
  store, settings = svc.store, svc.settings
  picks = []
  for name, label, changes in flips(trace):
    try:
      spec, variant = deps.resolved(TraceRequest.model_validate(request_of(trace, **changes)), settings)
    except (ValidationError, SpecError): continue
    key = trace_key(spec, variant)
    picks.append({"name": name, "label": label, "id": key, "stored": store.has_trace(key), "url": diff_url(trace_id, key)})
  targets = trace["variant"]["targets"]
  if len(targets) >= 2:
    ta, tb = targets[:2]
    picks.append({"name": "targets", "label": f"{TARGET_LABELS.get(ta, ta)} vs {TARGET_LABELS.get(tb, tb)} source", "id": trace_id, "stored": True,
                  "url": diff_url(trace_id, trace_id, ta, tb)})
  return picks

async def picker_context(svc: Services, a: str, q: str | None) -> dict[str, Any]:
  """Quick picks for trace a, and stored traces to pick from (those of the same convolution first)."""
  trace = await deps.trace_of(svc, a, light=True)
  picks = await asyncio.to_thread(quick_picks, svc, a, trace)
  rows, total = await asyncio.to_thread(svc.store.search, text=q or None, limit=40)
  conv = trace["label"].split(" | ")[0]
  rows = sorted((r for r in rows if r["id"] != a), key=lambda r: not (r.get("label") or "").startswith(conv + " |"))
  return {"a": a, "trace_a": trace, "picks": picks, "stored": rows, "total": total, "q": q or "", "conv": conv}

@router.get("/diff/pick/{a}", response_class=HTMLResponse)
async def picker_fragment(request: Request, a: str, svc: ServicesDep, q: str | None = Query(None, max_length=200)) -> HTMLResponse:
  """The "compare with..." menu of a trace page (an HTML fragment)."""
  return await page(request, "_partials/diff_picker.html", **await picker_context(svc, a, q))

# ***** /diff: pick two stored traces, or trace two variants of one convolution and diff them *****

WINO_FIELDS = {"algo": "winograd", "wino_impl": "explorer"}
VARIANT_CHOICES: dict[str, tuple[str, dict[str, str]]] = {  # name: (label, variant fields), the variants worth tracing side by side
  "direct": ("direct", {"algo": "direct"}),
  "builtin": ("Winograd, tinygrad's builtin (WINO=1)", {"algo": "winograd", "wino_impl": "builtin"}),
  "staged": ("Winograd F(4,3), staged", {**WINO_FIELDS, "staging": "staged"}),
  "fused": ("Winograd F(4,3), fused", {**WINO_FIELDS, "staging": "fused"}),
  "single": ("Winograd F(4,3), one kernel", {**WINO_FIELDS, "staging": "single"}),
  "f23": ("Winograd F(2,3), staged", {**WINO_FIELDS, "tile": "F(2,3)"}),
  "materialized": ("Winograd F(4,3), staged, materialized constants", {**WINO_FIELDS, "consts": "materialized"}),
  "beam": ("direct, BEAM 2", {"algo": "direct", "opt": "beam:2"}),
  # the same convolution on an older tinygrad (in its environment): against its twin above, what changed between the versions
  **{f"{name}@{v}": (f"{label}, on tinygrad {v}", {**fields, "tinygrad": v}) for v in TRACEABLE if v != TINYGRAD
     for name, (label, fields) in (("direct", ("direct", {"algo": "direct"})), ("staged", ("Winograd F(4,3), staged", {**WINO_FIELDS})))},
}
PAIR_DEFAULTS = {"preset": "small", "va": "staged", "vb": "fused", "targets": ["cuda"]}
PICK_LIMIT = 200  # stored traces in each of the picker's lists (newest first; ?q= narrows them)

async def pair_context(svc: Services, a: str | None, b: str | None, q: str | None, values: dict[str, Any] | None = None,
                       error: str | None = None) -> dict[str, Any]:
  rows, total = await asyncio.to_thread(svc.store.search, text=q or None, limit=PICK_LIMIT)
  return {"pick_a": a, "pick_b": b, "all_stored": rows, "all_total": total, "q": q or "", "variant_choices": VARIANT_CHOICES,
          "presets": {n: s.label() for n, s in PRESETS.items()}, "target_names": TARGETS, "pair": values or PAIR_DEFAULTS, "pair_error": error}

@router.get("/diff", response_class=HTMLResponse)
async def diff_query(request: Request, svc: ServicesDep, a: str | None = Query(None, max_length=64), b: str | None = Query(None, max_length=64),
                     target: str | None = Query(None, max_length=16), target_b: str | None = Query(None, max_length=16),
                     q: str | None = Query(None, max_length=200)) -> Response:
  if a and b: return RedirectResponse(diff_url(a, b, target, target_b), status_code=303)
  ctx = await pair_context(svc, a, b, q)
  if not a and not b: return await page(request, "diff_pick.html", a=None, stored=[], picks=[], **ctx)
  return await page(request, "diff_pick.html", **{**ctx, **await picker_context(svc, a or b or "", q)})

def pair_requests(form: dict[str, list[str]]) -> tuple[dict[str, Any], list[TraceRequest]]:
  """The picker's "trace two variants" form as the two trace requests (A, B); values echo back into the form on error."""
  one = {k: v[-1].strip() for k, v in form.items()}
  values: dict[str, Any] = {**PAIR_DEFAULTS, **one, "targets": form.get("targets", [])}
  names = [str(values["va"]), str(values["vb"])]
  if bad := [n for n in names if n not in VARIANT_CHOICES]: raise SpecError(f"no variant {bad[0]!r}; choose one of {', '.join(VARIANT_CHOICES)}")
  return values, [TraceRequest.model_validate({"preset": values["preset"], "variant": {**VARIANT_CHOICES[n][1], "targets": values["targets"]}})
                  for n in names]

@router.post("/diff/variants", response_class=HTMLResponse)
async def trace_pair(request: Request, svc: ServicesDep) -> Response:
  """Start (or find) both variants' traces, as the home form starts one, then show their diff (a progress page while they run)."""
  import urllib.parse
  form = urllib.parse.parse_qs((await request.body()).decode(errors="replace"), keep_blank_values=True)
  values, busy = {**PAIR_DEFAULTS, **{k: v[-1] for k, v in form.items()}, "targets": form.get("targets", [])}, None
  try:
    values, reqs = pair_requests(form)
    ids = [status["id"] for status, _ in await deps.submit_all(svc, reqs, deps.client_of(request))]  # admitted together: both or neither
    return RedirectResponse(diff_url(*ids), status_code=303)
  except ValidationError as e: error = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())
  except SpecError as e: error = str(e)
  except Busy as e: error, busy = str(e), e
  resp = await page(request, "diff_pick.html", status_code=busy.status if busy else 422, a=None, stored=[], picks=[],
                    **await pair_context(svc, None, None, None, values, error))
  if busy: resp.headers["Retry-After"] = str(busy.retry_after_s)
  return resp

@router.post("/diff/quick", response_class=HTMLResponse)
async def quick_pick(request: Request, svc: ServicesDep) -> Response:
  """Start (or find) the trace of a quick pick, then show the diff (a progress page while B runs)."""
  import urllib.parse
  form = {k: v[-1] for k, v in urllib.parse.parse_qs((await request.body()).decode(errors="replace")).items()}
  a = form.get("a", "")
  trace = await deps.trace_of(svc, a, light=True)
  pick = next((f for f in flips(trace) if f[0] == form.get("pick")), None)
  if pick is None: raise HTTPException(422, f"no quick pick {form.get('pick')!r} for trace {a}")
  try: status, _ = await deps.submit(svc, TraceRequest.model_validate(request_of(trace, **pick[2])), deps.client_of(request))
  except (ValidationError, SpecError) as e: raise HTTPException(422, f"cannot trace that variant: {e}") from None
  return RedirectResponse(diff_url(a, status["id"]), status_code=303)

# ***** the diff page *****

def targets_of(a: TraceRecord, b: TraceRecord) -> list[str]:
  ts = list(dict.fromkeys([*a["variant"]["targets"], *b["variant"]["targets"]]))
  return ts + ["host"]

async def side_or_progress(request: Request, svc: Services, trace_id: str) -> TraceRecord | HTMLResponse:
  """The stored trace read light (a group's kernels are read whole as it is diffed and shown), or (while it runs) the progress page in
  its place: it reloads this URL when the trace is done."""
  if (trace := await admission.stored_trace(svc, trace_id, light=True)) is not None: return trace
  status = await admission.status_of(svc, trace_id)
  if status is None: raise HTTPException(404, f"no trace {trace_id}")
  return await page(request, "progress.html", trace_id=trace_id, status=status, stage_titles=STAGE_TITLES)

def pick_targets(a: TraceRecord, b: TraceRecord, target: str | None, target_b: str | None) -> tuple[str, str]:
  ts = targets_of(a, b)
  ta = target if target in ts else ts[0]
  return ta, target_b if target_b in ts else ta

GROUPS_PER_PAGE = 40  # groups whose sources a diff page shows side by side

def group_kernels(svc: Services, trace_id: str, trace: TraceRecord, refs: list[dict[str, Any]]) -> list[KernelRecord]:
  """A group's kernels, whole (with their sources)."""
  return [svc.traces.kernel(trace_id, trace, k["index"]) for k in refs]

@router.get("/diff/{a}/{b}", response_class=HTMLResponse)
async def diff_page(request: Request, a: str, b: str, svc: ServicesDep, work: Work, target: str | None = Query(None, max_length=16),
                    target_b: str | None = Query(None, max_length=16), offset: int = Query(0, ge=0, le=2**31)) -> Response:
  """Both traces' kernels matched and compared; each group's sources side by side, GROUPS_PER_PAGE groups a page (?offset=: a big
  program's diff lists every group in its table, and shows the sources of a page of them)."""
  ta_trace = await side_or_progress(request, svc, a)
  if isinstance(ta_trace, HTMLResponse): return ta_trace
  tb_trace = await side_or_progress(request, svc, b)
  if isinstance(tb_trace, HTMLResponse): return tb_trace
  ta, tb = await asyncio.to_thread(pick_targets, ta_trace, tb_trace, target, target_b)  # (each a walk over every kernel: off the loop)
  diffs = svc.diffs
  d = await diffs.structural(a, ta_trace, b, tb_trace, ta, tb, work.permit())
  shown = d["groups"][offset:offset + GROUPS_PER_PAGE]
  rows = await asyncio.to_thread(lambda: [fold(side_by_side(g["source"], group_kernels(svc, a, ta_trace, g["a"]),
                                                            group_kernels(svc, b, tb_trace, g["b"]))) for g in shown])
  gr = await diffs.cached_graphs(a, b)
  measures = {k: await asyncio.to_thread(diffs.measure_status, a, b, k) for k in MEASURES}
  timed = measures["timing"].get("result") if measures["timing"].get("status") == "done" else None
  def told() -> dict[str, Any]:
    return {"graph_of": {g["index"]: g for g in (gr or {}).get("groups") or []}, "verdict": headline(d, timed),
            "targets": targets_of(ta_trace, tb_trace), "comparable": {k: comparable(ta_trace, tb_trace, k) for k in MEASURES},
            "tinygrads": tinygrads_of(ta_trace, tb_trace)}
  resp = await page(request, "diff.html", a=a, b=b, ta=ta_trace, tb=tb_trace, d=d, rows=rows, graphs=gr, measures=measures, target=ta,
                    shown=shown, offset=offset, per_page=GROUPS_PER_PAGE, timed=timed is not None and time_headline(timed) is not None,
                    target_b=tb, diff_url=diff_url, rel_label=relation_label, **await asyncio.to_thread(told))
  if any(m.get("status") in ("queued", "running") for m in measures.values()): resp.headers["Cache-Control"] = "no-store"  # it changes then
  return resp

@router.get("/diff/{a}/{b}/graphs", response_class=HTMLResponse)
async def graphs_fragment(request: Request, a: str, b: str, svc: ServicesDep, work: Work) -> HTMLResponse:
  """The UOp graph diff of every matched group (an HTML fragment the diff page loads: it may take a worker's few seconds)."""
  ta_trace, tb_trace = await deps.trace_of(svc, a, light=True), await deps.trace_of(svc, b, light=True)
  permit = work.permit()
  d = await svc.diffs.structural(a, ta_trace, b, tb_trace, *await asyncio.to_thread(pick_targets, ta_trace, tb_trace, None, None), permit)
  gr = await svc.diffs.graph_diff(a, ta_trace, b, tb_trace, d["groups"], permit)
  return await page(request, "_partials/diff_graphs.html", graphs=gr, d=d)

# ***** JSON *****

def api_graphs(gr: dict[str, Any] | None) -> dict[str, Any] | None:
  """The graph diff without its drawings' SVG (the page has them)."""
  if gr is None: return None
  return {"error": gr.get("error"), "groups": [{"index": g["index"], "graph": g["graph"], "rules": g.get("rules")} for g in gr.get("groups", [])]}

TWO = {404: "no trace a or no trace b", 409: "trace a or b is still queued or running"}

@api.get("/diff/{a}/{b}", summary="Diff two stored traces: kernels matched by role and data flow, buffers, metrics, sources, graphs, measurements",
         responses=documented({**TWO, 422: "a query parameter out of its bounds"}))
async def diff_json(a: str, b: str, svc: ServicesDep, work: Work, target: str | None = Query(None, max_length=16),
                    target_b: str | None = Query(None, max_length=16),
                    graphs: bool = Query(True, description="compute the UOp graph diff if it is not cached "
                                                           "(a worker, a few seconds)")) -> dict[str, Any]:
  """The structural diff (explorer.analysis.diff.diff_traces) with each group's UOp graph diff (`graph`), the cached interleaved timing and
  output comparison (null until measured: POST .../timing or .../numerics) and `target`/`target_b` (the sources diffed)."""
  ta_trace, tb_trace = await deps.trace_of(svc, a, light=True), await deps.trace_of(svc, b, light=True)
  ta, tb = await asyncio.to_thread(pick_targets, ta_trace, tb_trace, target, target_b)
  diffs = svc.diffs
  permit = work.permit()
  d = await diffs.structural(a, ta_trace, b, tb_trace, ta, tb, permit)
  gr = await (diffs.graph_diff(a, ta_trace, b, tb_trace, d["groups"], permit) if graphs else diffs.cached_graphs(a, b))
  by_group = {g["index"]: g for g in (gr or {}).get("groups", [])}
  measured = {k: (await asyncio.to_thread(diffs.measure_status, a, b, k)).get("result") for k in MEASURES}
  notes = d["notes"] + ([gr["error"]] if gr and gr.get("error") else [])
  return {**d, "groups": [{**g, "graph": (got := by_group.get(g["index"]) or {}).get("graph"), "rules": got.get("rules")} for g in d["groups"]],
          "timing": measured["timing"],
          "numerics": measured["numerics"], "notes": notes, "url": diff_url(a, b, ta, tb)}

@api.get("/diff/{a}/{b}/{kind}", summary="A measurement of two traces: its job's progress, or its cached result",
         responses=documented({**TWO, 404: "no such measurement (timing or numerics), or no trace a or b"}))
async def measure_status(a: str, b: str, kind: str, svc: ServicesDep) -> dict[str, Any]:
  if kind not in MEASURES: raise HTTPException(404, f"no measurement {kind!r}: timing or numerics")
  await deps.trace_of(svc, a, light=True); await deps.trace_of(svc, b, light=True)
  return await asyncio.to_thread(svc.diffs.measure_status, a, b, kind)

@api.post("/diff/{a}/{b}/{kind}", status_code=202, summary="Start a measurement: interleaved re-timing (A, B, B, A...) or the outputs compared",
          responses=documented({404: "no such measurement (timing or numerics), or no trace a or b",
                                409: "trace a or b is still queued or running, or the two cannot be measured together (specs or devices differ)",
                                422: "repeats or warmup out of bounds", 503: "the job queue does not answer (Retry-After)"}))
async def start_measure(request: Request, a: str, b: str, kind: str, svc: ServicesDep, repeats: int = Query(20, ge=1, le=1000),
                        warmup: int = Query(3, ge=0, le=1000)) -> Any:
  """Runs in one worker off the event loop, one measurement at a time; poll GET for progress. The result is cached in the store."""
  if kind not in MEASURES: raise HTTPException(404, f"no measurement {kind!r}: timing or numerics")
  ta_trace, tb_trace = await deps.trace_of(svc, a), await deps.trace_of(svc, b)
  if (why := comparable(ta_trace, tb_trace, kind)) is not None: raise HTTPException(409, f"cannot measure these two together: {why}")
  max_repeats = int(svc.settings.max_repeats)
  if repeats > max_repeats or warmup > max_repeats: raise HTTPException(422, f"repeats and warmup are limited to {max_repeats}")
  await queue_answers(svc.diffs.queue)
  return JSONResponse(svc.diffs.start_measure(a, ta_trace, b, tb_trace, kind, repeats, warmup, deps.client_of(request)), status_code=202)
