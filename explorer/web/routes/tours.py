"""Teaching tours on the web: a trace's tour (/t/{id}/tour?step=), the built-in tours of the seed experiments (/tours/{kind}?a=&b=&step=),
annotations (a teacher's notes pinned to a tour step, a UOp graph node or a source line) and the glossary page.

Steps and their explanations come from explorer.present.tour (pure python, no tinygrad); each step shows its text next to the real view it names."""
from __future__ import annotations
import asyncio
import json
import re
from collections.abc import Callable
from typing import Any, Literal
from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, Field
from explorer.analysis.diff import comparable, tinygrads_of
from explorer.present.graph_refs import REF_RE
from explorer.present.tour import BUILTIN_TOURS, Step, compare_tour, hand_schedule_steps, told_kernels, tour_target, trace_tour
from explorer.schema import InterleavedTiming, TraceRecord, host_target, target_record
from explorer.spec import PRESETS, SpecError
from explorer.stages import ENRICH_ANALYSIS, ENRICH_TARGET, STAGE_TITLES
from explorer.store import trace_key
from explorer.targets import TARGETS
from explorer.web.http import deps
from explorer.web.http.deps import ServicesDep, StoredTrace
from explorer.web.http.models import NOT_FOUND, TraceRequest, TraceStatus, VariantIn, documented
from explorer.web.http.work import Work, WorkGate
from explorer.web.routes.common import Preparing, page, pick_pass, prepared, preparing_page, rangeify_passes, trace_page
from explorer.web.services import admission
from explorer.web.services.registry import Services
from explorer.web.urls import diff_url, kernel_url, pair_tour_api_url, pair_tour_url, trace_tour_api_url, trace_tour_url, trace_url

router = APIRouter()
MAX_NOTE_CHARS, MAX_NOTES_PER_TRACE = 2000, 200

# ***** steps: ids, URLs, and the view each one embeds *****

def tour_steps(trace: TraceRecord, target: str | None = None) -> list[Step]:
  try: return trace_tour(trace, target)
  except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
    raise HTTPException(409, f"this trace cannot be toured (incomplete: {type(e).__name__} {e})") from None

def pair_steps(kind: str, a: TraceRecord, b: TraceRecord, target: str | None = None, interleaved: InterleavedTiming | None = None) -> list[Step]:
  try: return compare_tour(kind, a, b, target, interleaved)
  except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
    raise HTTPException(409, f"these traces cannot be toured (incomplete: {type(e).__name__} {e})") from None

def view_url(trace_id: str, trace: TraceRecord, view: str, target: str | None = None) -> str:
  """The full page a step's view names (the tour embeds a part of it), on the tour's target (None: the host's)."""
  base = trace_url(trace_id)
  if view in ("timings", "program"): return f"{base}#{view}"
  if view == "source": return kernel_url(trace_id, 0, code="host") if trace["kernels"] else base
  if m := re.fullmatch(r"k/(\d+)(?:/(passes|uops|source))?", view):
    n, part = m.group(1), m.group(2)
    if part == "passes": return kernel_url(trace_id, n, graph="passes", target=target)
    if part == "uops": return kernel_url(trace_id, n, code="uops", target=target)
    return kernel_url(trace_id, n, target=target)
  return f"{base}/{view}"

def asked_target(asked: str | None, traces: list[TraceRecord]) -> tuple[str | None, list[str]]:
  """The target a tour speaks of (None: each kernel's host) and, where `asked` cannot be it, a notice naming what was asked and what is
  shown: nothing asked for is ignored in silence."""
  if asked is None: return None, []
  if asked not in TARGETS:
    return None, [f"There is no target {asked[:40]!r}: the explorer renders {', '.join(TARGETS)}. The tour speaks of each kernel's host target."]
  if any(tour_target(t, asked) is None for t in traces):
    return None, [f"Not every kernel of this tour has a {asked} record yet (a kernel page computes it when first opened with ?target={asked}):"
                  " the tour speaks of each kernel's host target."]
  return asked, []

def step_api(trace_id: str, trace: TraceRecord, steps: list[Step], url_of: Callable[[str], str], target: str | None = None) -> list[dict[str, Any]]:
  return [{**{k: v for k, v in s.items() if k != "embed"}, "url": url_of(s["id"]),
           "view_url": view_url(trace_id, trace, s["view"], target) if s["view"] != "diff" else None} for s in steps]

def step_index(steps: list[Step], asked: str | None) -> int:
  return next((i for i, s in enumerate(steps) if s["id"] == asked), 0)

def note_anchor(step_id: str) -> str:
  """The step anchor a note is stored under: the trace's own step id (a pair tour prefixes a-/b-)."""
  return step_id[2:] if step_id[:2] in ("a-", "b-") else step_id

def embed(trace_id: str, trace: TraceRecord, view: str, target: str | None = None, focus: dict[str, Any] | None = None) -> dict[str, Any]:
  """What the tour shows next to a step's text: the kind of embed and the data it needs; a kernel's codegen (passes, uops, source) on
  the tour's target (None: the host's), the uops listing scrolled to the uop the step discusses (focus)."""
  kernels = trace["kernels"]
  if view == "graph/tensor": return {"kind": "graph", "ref": "tensor", "title": "Tensor graph (the UOp graph handed to the scheduler)"}
  if view == "rangeify":
    passes = rangeify_passes(trace)
    if not passes: return {"kind": "none"}
    p = pick_pass(passes, None, preferred="symbolic+reduce_collapse+debuf")
    top = [{"index": i, **passes[i]} for i in sorted(range(len(passes)), key=lambda i: -passes[i]["matches"])[:8]]
    return {"kind": "rangeify", "ref": f"rangeify/{p}/after", "pass": {"index": p, **passes[p]}, "top": top}
  if view == "bufferize": return {"kind": "bufferize"}
  if view == "timings": return {"kind": "timings"}
  if view == "source": return {"kind": "constants"}
  if (m := re.fullmatch(r"k/(\d+)(?:/(passes|uops|source))?", view)) and int(m.group(1)) < len(kernels):
    k = kernels[int(m.group(1))]
    part, on = m.group(2) or "ast", target or host_target(k)
    rec: dict[str, Any] = dict(target_record(k, on) or target_record(k) or {})
    if part == "passes":
      top = sorted(({"index": i, **q} for i, q in enumerate(rec.get("passes") or [])), key=lambda q: -q["matches"])[:10]  # {}: no record
      return {"kind": "passes", "kernel": k, "rec": rec, "target": on, "top": top}
    if part == "source":
      sources = k["sources"]
      own = "host" if on == host_target(k) else on  # the host's source is under "host"
      tabs = [own] + [t for t in trace["variant"]["targets"] if t in sources and t != own]
      tabs += [t for t in sources if t not in tabs]
      return {"kind": "source", "kernel": k, "tabs": tabs, "focus": focus or {}}
    if part == "uops": return {"kind": "uops", "kernel": k, "rec": rec, "target": on, "focus": focus or {}}
    return {"kind": "graph", "ref": f"ast/{k['index']}", "kernel": k, "title": f"AST of kernel {k['index']} ({k['role']}): the same for every target"}
  return {"kind": "none"}

# ***** a trace's tour *****

TargetQuery = Query(None, max_length=40, description="the codegen target the kernel steps speak of (default: each kernel's host); "
                   "one the trace has no record of on every kernel is not used, and `notices` says so")

@router.get("/api/traces/{trace_id}/tour", tags=["tours"], summary="The trace's teaching tour: steps explained from its own numbers",
            responses=documented({**NOT_FOUND, 409: "the trace is still queued or running, or too incomplete to tour",
                                  422: "a target over 40 characters"}))
async def get_trace_tour(trace_id: str, trace: StoredTrace, svc: ServicesDep, work: Work, target: str | None = TargetQuery) -> dict[str, Any]:
  trace = await rendered(svc, work, trace_id, trace, target)
  target, notices = asked_target(target, [trace])
  steps = await _trace_steps(svc, work, trace_id, trace, target)
  return {"trace_id": trace_id, "label": trace["label"], "target": target, "notices": notices,
          "steps": step_api(trace_id, trace, steps, lambda s: trace_tour_url(trace_id, s, target=target), target)}

TOLD = ("The kernels this tour tells are being prepared in a worker: what its steps say is read off them (their records on the target "
        "it speaks of, their analyses). The tour opens by itself when they are stored.")

def big_asked(request: Request) -> bool: return request.query_params.get("big") == "1"

async def rendered(svc: Services, work: WorkGate, trace_id: str, trace: TraceRecord, target: str | None,
                   waiting: Preparing | None = None) -> TraceRecord:
  """The trace with the told kernels' records on `target`, rendered first where missing (as a kernel page does when first opened on
  it) and the request may start work; else as it is (asked_target then says the tour speaks of the host). waiting: a page's (prepared)."""
  if target not in TARGETS: return trace
  return await prepared(svc, work, trace_id, trace, ENRICH_TARGET, target, told_kernels(trace), waiting)

async def interleaved(svc: Services, a: str, b: str) -> InterleavedTiming | None:
  """The diff's interleaved timing of A and B, where it was measured (the diff page's "time interleaved"): the tour quotes it."""
  return await asyncio.to_thread(svc.store.get_diff, a, b, "timing")

async def analysed(svc: Services, work: WorkGate, trace_id: str, trace: TraceRecord, target: str | None,
                   waiting: Preparing | None = None) -> TraceRecord:
  """The trace with its records' analyses on the tour's target (the pressure its kernel steps tell), computed first where missing and
  the request may start work; else as it is (those steps then leave the pressure out). waiting: a page's (prepared)."""
  if (t := target or next((host_target(k) for k in trace["kernels"]), None)) is None: return trace
  return await prepared(svc, work, trace_id, trace, ENRICH_ANALYSIS, t, told_kernels(trace), waiting)

async def _trace_steps(svc: Services, work: WorkGate, trace_id: str, trace: TraceRecord, target: str | None = None,
                       waiting: Preparing | None = None) -> list[Step]:
  """The trace's own steps, then a step per hand schedule pinned to its tour (the Opts panel's "add to the trace's tour"), each told
  with the analyses of the targets they speak of."""
  pinned = await asyncio.to_thread(svc.enrichments.tour_schedules, trace_id)
  for t in dict.fromkeys([target, *(s["target"] for s in pinned)]): trace = await analysed(svc, work, trace_id, trace, t, waiting)
  # told once per parsed trace, target and pinned schedules: a class of students opening the teacher's step asks for it at once
  told = ("tour", target, json.dumps(pinned, sort_keys=True, default=str))
  return await asyncio.to_thread(svc.traces.derived, trace_id, trace, told, lambda tr: tour_steps(tr, target) + hand_schedule_steps(tr, pinned))

@router.get("/t/{trace_id}/tour", response_class=HTMLResponse, include_in_schema=False)
async def trace_tour_page(request: Request, trace_id: str, svc: ServicesDep, work: Work, step: str | None = None,
                          target: str | None = Query(None, max_length=40), big: str | None = Query(None, max_length=8)) -> HTMLResponse:
  # big: declared so that the response cache keeps a step's big-font page apart (its links keep ?big=1)
  trace = await admission.stored_trace(svc, trace_id)
  if trace is None: return await trace_page(request, svc, trace_id, "tour.html", ())
  waiting: Preparing = []
  trace = await rendered(svc, work, trace_id, trace, target, waiting)
  if waiting: return await preparing_page(request, svc, f"Tour of {trace['label']}", waiting, TOLD)
  target, notices = asked_target(target, [trace])
  steps = await _trace_steps(svc, work, trace_id, trace, target, waiting)
  if waiting: return await preparing_page(request, svc, f"Tour of {trace['label']}", waiting, TOLD)
  notes = await asyncio.to_thread(svc.store.annotations, trace_id)
  wants_big = big_asked(request)  # the one rule for ?big (its parameter is declared only for the response cache)
  ctx = tour_context(steps, step, lambda s: trace_tour_url(trace_id, s, wants_big, target), {"": (trace_id, trace)}, {"": notes}, target)
  ctx["notices"] = notices + ctx["notices"]
  links = target_links([trace], target, lambda t: trace_tour_url(trace_id, ctx["cur"]["id"], wants_big, t))
  return await trace_page(request, svc, trace_id, "tour.html", (), api=trace_tour_api_url(trace_id, target), pair=None,
                          target_links=links, **ctx)

def target_links(traces: list[TraceRecord], target: str | None, url_of: Callable[[str | None], str]) -> list[dict[str, Any]]:
  """The tour's target switcher: each kernel's host (None) and every other target; one some kernel has no record of yet is computed
  when chosen (marked +, as the kernel page's target row marks one, its title saying so)."""
  hosts = sorted({host_target(k) for tr in traces for k in tr["kernels"]})
  offered = [t for t in TARGETS if t not in hosts]
  def later(t: str) -> bool: return not all(tour_target(tr, t) is not None for tr in traces)
  return [{"label": f"host ({', '.join(hosts)})", "url": url_of(None), "active": target is None, "title": None}] + \
         [{"label": f"{t} +" if later(t) else t, "url": url_of(t), "active": t == target,
           "title": "not rendered yet: computed when chosen" if later(t) else None} for t in offered]

def note_key(step: Step, traces: dict[str, tuple[str, TraceRecord]]) -> tuple[str, str]:
  """(which trace, which step anchor) a step's notes are stored under: a pair tour's a-/b- steps under their own trace's step id,
  its comparison step under trace A as compare-{B's id}."""
  side = step.get("side", "")
  if side == "both": return "a", f"compare-{traces['b'][0]}"
  return side, note_anchor(step["id"])

def tour_context(steps: list[Step], asked: str | None, url_of: Callable[[str], str], traces: dict[str, tuple[str, TraceRecord]],
                 notes: dict[str, list[dict[str, Any]]], target: str | None = None) -> dict[str, Any]:
  """The template's view of one step: the step list, this step, its neighbours, the trace it is about, its embed and notes."""
  def step_notes(s: Step) -> list[dict[str, Any]]:
    side, anchor = note_key(s, traces)
    return [n for n in notes.get(side, []) if n["anchor_kind"] == "step" and n["anchor"] == anchor]
  i = step_index(steps, asked)
  cur = steps[i]
  notice = (f"This tour has no step {asked[:60]!r} (its steps: {', '.join(s['id'] for s in steps[:12])}{', ...' if len(steps) > 12 else ''}): "
            f"showing step 1, {cur['title']}.") if asked is not None and asked != cur["id"] else None
  side, anchor = note_key(cur, traces)
  trace_id, trace = traces[side]
  view = cur.get("embed") or ({"kind": "diff", "headline": cur.get("headline") or []} if cur["view"] == "diff" else
                              embed(trace_id, trace, cur["view"], target, cur.get("focus")))
  return {"steps": [{**s, "url": url_of(s["id"]), "notes": len(step_notes(s))} for s in steps], "index": i, "cur": cur,
          "prev_url": url_of(steps[i - 1]["id"]) if i > 0 else None, "next_url": url_of(steps[i + 1]["id"]) if i + 1 < len(steps) else None,
          "view": view, "view_url": None if cur["view"] == "diff" else view_url(trace_id, trace, cur["view"], target), "step_trace_id": trace_id,
          "step_trace": trace, "step_anchor": anchor, "step_notes": step_notes(cur), "max_note_chars": MAX_NOTE_CHARS,
          "notices": [notice] if notice else []}

# ***** built-in tours: two traces, started (or reused) with one click *****

def tour_or_404(kind: str) -> dict[str, Any]:
  if kind not in BUILTIN_TOURS: raise HTTPException(404, f"no built-in tour {kind!r} (there are {', '.join(BUILTIN_TOURS)})")
  return BUILTIN_TOURS[kind]

def tour_request(preset: str, variant: Any) -> TraceRequest:
  fields = {k: v for k, v in variant.to_dict().items() if k in VariantIn.model_fields}
  return TraceRequest.model_validate({"preset": preset, "variant": fields})

def tour_ids(kind: str) -> tuple[str, str]:
  t = tour_or_404(kind)
  return trace_key(PRESETS[t["preset"]], t["a"]), trace_key(PRESETS[t["preset"]], t["b"])

def builtin_tours() -> list[dict[str, Any]]:
  """The built-in tours as the home page and GET /api/tours list them."""
  ret = []
  for kind, t in BUILTIN_TOURS.items():
    a, b = tour_ids(kind)
    ret.append({"kind": kind, "title": t["title"], "preset": t["preset"], "preset_label": PRESETS[t["preset"]].label(), "a_label": t["a"].label(),
                "b_label": t["b"].label(), "a": a, "b": b, "url": pair_tour_url(kind, a, b)})
  return ret

async def start_tour(request: Request, svc: Services, kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
  t = tour_or_404(kind)
  client = deps.client_of(request)
  try:
    a, _ = await deps.submit(svc, tour_request(t["preset"], t["a"]), client)
    b, _ = await deps.submit(svc, tour_request(t["preset"], t["b"]), client)
  except SpecError as e: raise HTTPException(422, str(e)) from None
  return a, b

class TourStart(BaseModel):
  kind: str
  url: str
  a: TraceStatus
  b: TraceStatus

@router.get("/api/tours", tags=["tours"], summary="The built-in tours (seed experiments): preset, the two variants, their trace ids",
            responses=documented())
async def list_tours() -> list[dict[str, Any]]:
  return builtin_tours()

@router.post("/api/tours/{kind}", tags=["tours"], response_model=TourStart, status_code=202,
             summary="Start a built-in tour's two traces (or reuse the stored ones)",
             responses={200: {"model": TourStart, "description": "both already stored"},
                        **documented({404: "no built-in tour of this kind", 422: "a variant this server refuses",
                                      429: "this client has max_jobs_per_client traces running or waiting (Retry-After)",
                                      503: "too many traces queued, this host's devices could not be listed, or the job queue "
                                           "does not answer (Retry-After)"})})
async def api_start_tour(request: Request, kind: str, svc: ServicesDep) -> Any:
  a, b = await start_tour(request, svc, kind)
  body = {"kind": kind, "url": pair_tour_url(kind, a["id"], b["id"]), "a": a, "b": b}
  return JSONResponse(body, status_code=200 if a["status"] == b["status"] == "done" else 202)

@router.get("/api/tours/{kind}", tags=["tours"], summary="A built-in tour's steps over two traces (a and b default to the tour's own)",
            responses=documented({404: "no built-in tour of this kind, or no trace a or b",
                                  409: "trace a or b is still queued or running, or too incomplete to tour", 422: "a target over 40 characters"}))
async def api_pair_tour(kind: str, svc: ServicesDep, work: Work, a: str | None = None, b: str | None = None,
                        target: str | None = TargetQuery) -> dict[str, Any]:
  da, db = tour_ids(kind)
  a, b = a or da, b or db
  ta, tb = await deps.trace_of(svc, a), await deps.trace_of(svc, b)
  ta, tb = await rendered(svc, work, a, ta, target), await rendered(svc, work, b, tb, target)
  target, notices = asked_target(target, [ta, tb])
  ta, tb = await analysed(svc, work, a, ta, target), await analysed(svc, work, b, tb, target)
  steps = pair_steps(kind, ta, tb, target, await interleaved(svc, a, b))
  def url_of(s: str) -> str: return pair_tour_url(kind, a, b, s, target=target)
  out = []
  for s in steps:
    tid, tr = (b, tb) if s.get("side") == "b" else (a, ta)
    out.append({**s, "url": url_of(s["id"]), "view_url": view_url(tid, tr, s["view"], target) if s["view"] != "diff" else None})
  return {"kind": kind, "title": BUILTIN_TOURS[kind]["title"], "a": a, "b": b, "target": target, "notices": notices, "steps": out}

@router.post("/tours/{kind}", include_in_schema=False)
async def form_start_tour(request: Request, kind: str, svc: ServicesDep) -> Response:
  """The home page's one-click button: start both traces, then the tour page (it shows their progress until both are stored)."""
  a, b = await start_tour(request, svc, kind)
  return RedirectResponse(pair_tour_url(kind, a["id"], b["id"], big=big_asked(request)), status_code=303)

@router.get("/tours/{kind}", response_class=HTMLResponse, include_in_schema=False)
async def pair_tour_page(request: Request, kind: str, svc: ServicesDep, work: Work, a: str | None = None, b: str | None = None,
                         step: str | None = None, target: str | None = Query(None, max_length=40),
                         big: str | None = Query(None, max_length=8)) -> Response:  # big: as trace_tour_page's
  t = tour_or_404(kind)
  if a is None or b is None:
    da, db = tour_ids(kind)
    return RedirectResponse(pair_tour_url(kind, a or da, b or db, step, big_asked(request), target), status_code=303)
  ta, tb = await admission.stored_trace(svc, a), await admission.stored_trace(svc, b)
  if ta is None or tb is None:
    statuses = [await admission.status_of(svc, x) or {"id": x, "status": "error", "error": f"no trace {x}", "stages": []} for x in (a, b)]
    return await page(request, "tour_progress.html", kind=kind, tour=t, statuses=statuses, stage_titles=STAGE_TITLES)
  waiting: Preparing = []
  ta, tb = await rendered(svc, work, a, ta, target, waiting), await rendered(svc, work, b, tb, target, waiting)
  if waiting: return await preparing_page(request, svc, t["title"], waiting, TOLD)
  target, notices = asked_target(target, [ta, tb])
  ta, tb = await analysed(svc, work, a, ta, target, waiting), await analysed(svc, work, b, tb, target, waiting)
  if waiting: return await preparing_page(request, svc, t["title"], waiting, TOLD)
  steps = pair_steps(kind, ta, tb, target, await interleaved(svc, a, b))
  notes = {"a": await asyncio.to_thread(svc.store.annotations, a), "b": await asyncio.to_thread(svc.store.annotations, b)}
  wants_big = big_asked(request)  # the one rule for ?big (its parameter is declared only for the response cache)
  ctx = tour_context(steps, step, lambda s: pair_tour_url(kind, a, b, s, wants_big, target), {"a": (a, ta), "b": (b, tb)}, notes, target)
  ctx["notices"] = notices + ctx["notices"]
  links = target_links([ta, tb], target, lambda x: pair_tour_url(kind, a, b, ctx["cur"]["id"], wants_big, x))
  timing = None
  if ctx["cur"]["view"] == "diff":  # the A-against-B step times the pair interleaved, as the diff page does (or shows it timed)
    timing = {"state": await asyncio.to_thread(svc.diffs.measure_status, a, b, "timing"), "comparable": comparable(ta, tb, "timing"),
              "tinygrads": tinygrads_of(ta, tb)}
  shown = await page(request, "tour.html", pair={"kind": kind, "title": t["title"], "a": (a, ta), "b": (b, tb)}, trace_id=ctx["step_trace_id"],
                     timing=timing, api=pair_tour_api_url(kind, a, b, target), diff_url=diff_url(a, b, target), target_links=links, **ctx)
  if timing is not None: shown.headers["Cache-Control"] = "no-store"  # its measurement's progress, as it stands now
  return shown

# ***** annotations *****

NODE_RE = re.compile(r"^(?P<ref>[a-z0-9/]+)#(?P<node>\d{1,6})$")
LINE_RE = re.compile(r"^(?P<kernel>\d{1,4}):(?P<target>[a-z]{1,12}):(?P<line>\d{1,7})$")
COMPARE_RE = re.compile(r"^compare-[0-9a-f]{16}$")

class AnnotationIn(BaseModel):
  """A note pinned to a tour step (anchor: the step id, e.g. `k0-ast`; a pair tour's comparison step: `compare-{B's id}` on trace A),
  a UOp graph node (`{graph ref}#{i}`: `ast/1#12` is nodes[12] of GET /api/traces/{id}/graphs/ast/1) or a source line
  (`{kernel}:{target}:{line}`: `1:cuda:12`, 1-based; target `uops` for the linearized UOp listing)."""
  model_config = {"extra": "forbid", "str_strip_whitespace": True}
  anchor_kind: Literal["step", "node", "line"]
  anchor: str = Field(min_length=1, max_length=120)
  text: str = Field(min_length=1, max_length=MAX_NOTE_CHARS)

class Annotation(BaseModel):
  id: int
  trace_id: str
  anchor_kind: Literal["step", "node", "line"]
  anchor: str
  text: str
  created: float

def check_anchor(trace: TraceRecord, kind: str, anchor: str) -> None:
  """422 unless the anchor names something this trace renders."""
  kernels = trace["kernels"]
  if kind == "step":
    if COMPARE_RE.match(anchor) or anchor in {s["id"] for s in tour_steps(trace)}: return
    raise HTTPException(422, f"anchor: this trace's tour has no step {anchor!r}")
  if kind == "node":
    if (m := NODE_RE.match(anchor)) is None or not REF_RE.match(m.group("ref")):
      raise HTTPException(422, "anchor: a node anchor is {graph ref}#{node number}, e.g. ast/0#12")
    if (k := re.fullmatch(r"ast/(\d+)", m.group("ref"))) and int(k.group(1)) >= len(kernels):
      raise HTTPException(422, f"anchor: the trace has no kernel {k.group(1)}")
    return
  if (m := LINE_RE.match(anchor)) is None: raise HTTPException(422, "anchor: a line anchor is {kernel}:{target}:{line}, e.g. 0:cuda:12")
  n, target, line = int(m.group("kernel")), m.group("target"), int(m.group("line"))
  if n >= len(kernels): raise HTTPException(422, f"anchor: the trace has no kernel {n}")
  text = "\n".join(kernels[n]["uops_listing"]) if target == "uops" else kernels[n]["sources"].get(target)
  if text is None: raise HTTPException(422, f"anchor: kernel {n} has no {target} source")
  if not 1 <= line <= (lines := len(text.splitlines())): raise HTTPException(422, f"anchor: the {target} source of kernel {n} has {lines} lines")

@router.get("/api/traces/{trace_id}/annotations", tags=["annotations"], response_model=list[Annotation], summary="A trace's notes",
            responses=documented(NOT_FOUND))
async def list_annotations(trace_id: str, trace: StoredTrace, svc: ServicesDep) -> list[dict[str, Any]]:
  return await asyncio.to_thread(svc.store.annotations, trace_id)

@router.post("/api/traces/{trace_id}/annotations", tags=["annotations"], response_model=Annotation, status_code=201,
             summary="Pin a note to a tour step, a graph node or a source line",
             responses=documented({400: "the body is not text (UTF-8)", **NOT_FOUND,
                                   409: f"the trace is still queued or running, or already has {MAX_NOTES_PER_TRACE} notes",
                                   422: "an invalid note, or an anchor that names nothing in this trace"}))
async def add_annotation(trace_id: str, body: AnnotationIn, trace: StoredTrace, svc: ServicesDep) -> dict[str, Any]:
  check_anchor(trace, body.anchor_kind, body.anchor)
  note = await asyncio.to_thread(svc.store.add_annotation, trace_id, body.anchor_kind, body.anchor, body.text, MAX_NOTES_PER_TRACE)
  if note is None: raise HTTPException(409, f"trace {trace_id} already has {MAX_NOTES_PER_TRACE} notes; delete some first")
  return note

@router.delete("/api/traces/{trace_id}/annotations/{note_id}", tags=["annotations"], status_code=204, summary="Delete a note",
               responses=documented({404: "the trace has no such note", 422: "note_id is not a positive integer"}))
async def delete_annotation(trace_id: str, svc: ServicesDep, note_id: int = Path(ge=1, le=2**63 - 1)) -> Response:  # SQLite's INTEGER
  if not await asyncio.to_thread(svc.store.delete_annotation, trace_id, note_id):
    raise HTTPException(404, f"trace {trace_id} has no note {note_id}")
  return Response(status_code=204)

# ***** glossary *****

@router.get("/glossary", response_class=HTMLResponse, include_in_schema=False)
async def glossary(request: Request) -> HTMLResponse:
  return await page(request, "glossary.html")

TEMPLATE_GLOBALS = {"builtin_tours": builtin_tours, "max_note_chars": MAX_NOTE_CHARS}  # the home page lists the built-in tours
