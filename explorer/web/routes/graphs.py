"""A trace's graphs (JSON and SVG), every match of a rewrite pass and the graph a pass started from as Python. Each may start work
(a graph worker's expansion, a layout): it takes the request's work permit. The tensor graph's page is in routes/schedule.py."""
from __future__ import annotations
from typing import Any, Literal
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import Response
from explorer.present.graph_refs import REF_RE
from explorer.schema import TraceRecord, host_target
from explorer.targets import TARGETS
from explorer.web.http import deps
from explorer.web.http.deps import ServicesDep, StoredTrace
from explorer.web.http.models import NOT_FOUND, GraphView, Origin, PassMatches, documented
from explorer.web.http.work import Work
from explorer.web.urls import graph_api_url, trace_url

api = APIRouter(prefix="/api", tags=["api"])

GRAPH_ERRORS = {404: "no trace with this id, or no such graph in it", 409: "the trace is still queued or running, or the graph cannot be drawn",
                422: "full or nodes is not a boolean", 503: "the graph workers are busy (Retry-After)"}
MAX_MATCHES_PAGE = 500
IndexMode = Literal["auto", "hide", "show"]  # explorer.present.graphs.INDEX_MODES
EXPAND_QUERY = Query(None, max_length=400, pattern=r"^[0-9]{1,12}(,[0-9]{1,12}){0,31}$",
                     description="trace numbers (nodes[i].num) of cut-off nodes to open: their inputs two levels up are shown")

def expand_nums(expand: str | None) -> frozenset[int]: return frozenset(int(x) for x in expand.split(",")) if expand else frozenset()

def blob_target(trace: TraceRecord, target: str | None) -> str | None:
  """None (the host's blob) for the host's own target; else a target's rewrite blob: the target's name (one rendered with the trace), or
  the key a record computed on first view names (`cuda@3f2a...`, its `rewrites`)."""
  kernels = trace["kernels"]
  if target is None or (kernels and target == host_target(kernels[0])): return None
  if target.split("@")[0] not in TARGETS: raise HTTPException(404, f"unknown target {target!r}; known: {', '.join(TARGETS)}")
  return target

@api.get("/traces/{trace_id}/graphs", summary="The graphs of a trace, by reference", responses=documented(NOT_FOUND))
async def list_graphs(trace: StoredTrace) -> dict[str, Any]:
  n_rangeify = len(sched["passes"]) if (sched := trace["scheduler"]) is not None else 0
  kernels = trace["kernels"]
  return {"tensor": "tensor", "kernels": "kernels", "ast": [f"ast/{k['index']}" for k in kernels],
          "codegen": {k["index"]: f"codegen/{k['index']}/0..{len(k['passes']) - 1}/{{before|after|m<j>}}" for k in kernels},
          "rangeify": f"rangeify/0..{n_rangeify - 1}/{{before|after|m<j>}}", "svg": "append .svg to a graph URL for its layout"}

@api.get("/traces/{trace_id}/rewrites/{group}/{step}/matches", response_model=PassMatches, summary="Every match of one rewrite pass, paged",
         responses=documented({**GRAPH_ERRORS, 422: "offset or limit out of range"}))
async def pass_matches(trace_id: str, trace: StoredTrace, group: int, step: int, svc: ServicesDep, work: Work, offset: int = Query(0, ge=0),
                       limit: int = Query(100, ge=1, le=MAX_MATCHES_PAGE), target: str | None = None) -> dict[str, Any]:
  """group and step as in the trace's pass records (`passes[i].group`, `.step`; a target's passes with ?target=). Each match: its rule
  (file:line and the UPat's source as it stands in its file), the time tinygrad measured for it, the rewritten UOp before and after
  (graphs three sources deep) and the text diff of their Python forms. `total` is the pass's recorded match count; `call` is where
  in tinygrad the pass was run (the graph_rewrite call), `stack` the Python stack that opened its group (the host's passes)."""
  got = await svc.graphs.matches(trace_id, trace, group, step, offset, limit, blob_target(trace, target), permit=work.permit())
  stacks = (trace.get("rewrite_stacks") or []) if blob_target(trace, target) is None else []
  return {**got, "stack": next((s["frames"] for s in stacks if s["group"] == group), [])}

@api.get("/traces/{trace_id}/rewrites/{group}/origin/{num}", response_model=Origin, summary="Which pass and rule made a UOp",
         responses=documented(GRAPH_ERRORS))
async def uop_origin(trace_id: str, trace: StoredTrace, group: int, num: int, svc: ServicesDep, work: Work,
                     target: str | None = None) -> dict[str, Any]:
  """num: a UOp's trace number (a graph node's `num`); group: the rewrite group of the passes that may have made it (`passes[i].group`;
  a target's with ?target=). Read from the rewrite log itself (the match that produced it), not guessed from pass order."""
  return await svc.graphs.origin(trace_id, trace, group, num, blob_target(trace, target), permit=work.permit())

@api.get("/traces/{trace_id}/rewrites/{group}/origins", response_model=list[Origin], summary="Which pass and rule made each of some UOps",
         responses=documented({**GRAPH_ERRORS, 422: "nums is not 1 to 32 trace numbers, comma separated"}))
async def uop_origins(trace_id: str, trace: StoredTrace, group: int, svc: ServicesDep, work: Work,
                      nums: str | None = Query(None, max_length=320, pattern=r"^[0-9]{1,9}(,[0-9]{1,9}){0,31}$"),
                      target: str | None = None) -> list[dict[str, Any]]:
  """origin/{num} for each of nums (a source line's UOps: its line map's `linear_nums`), in one replay of the group."""
  permit = work.permit()  # asked first: a request from another site hears that, whatever else it got wrong
  if nums is None: return []  # no UOps asked: none to answer for
  return await svc.graphs.origins(trace_id, trace, group, tuple(int(n) for n in nums.split(",")), blob_target(trace, target), permit=permit)

@api.get("/traces/{trace_id}/rewrites/{group}/{step}/python", summary="The graph a pass started from, as Python (tinygrad's pyrender)",
         responses=documented(GRAPH_ERRORS))
async def pass_python(trace_id: str, trace: StoredTrace, group: int, step: int, svc: ServicesDep, work: Work,
                      target: str | None = None) -> dict[str, Any]:
  return await svc.graphs.python(trace_id, trace, group, step, blob_target(trace, target), permit=work.permit())

async def graph_trace(svc: ServicesDep, trace_id: str, ref: str) -> TraceRecord:
  """The trace a graph is drawn from: read light where the graph needs no kernel's codegen passes (explorer.store.pieces)."""
  return await deps.trace_of(svc, trace_id, light=ref in ("kernels", "tensor") or ref.startswith(("ast/", "rangeify/")))

@api.get("/traces/{trace_id}/graphs/{ref:path}.svg", summary="A graph laid out by graphviz (SVG)",
         response_class=Response, responses={200: {"content": {"image/svg+xml": {}}}, **documented(GRAPH_ERRORS)})
async def get_graph_svg(trace_id: str, ref: str, svc: ServicesDep, work: Work, full: bool = False, index: IndexMode = "auto",
                        stable_from: str | None = Query(None, max_length=200, description="the graph shown before this one: the UOps both hold "
                                                        "keep their place (a fresh layout, not cached)"),
                        expand: str | None = EXPAND_QUERY) -> Response:
  if stable_from is not None and not REF_RE.match(stable_from): raise HTTPException(404, f"stable_from names no graph: {stable_from!r}")
  trace = await graph_trace(svc, trace_id, ref)
  svg = await svc.graphs.svg(trace_id, trace, ref, full, trace_url(trace_id), index, stable_from, expand_nums(expand), permit=work.permit())
  return Response(svg, media_type="image/svg+xml", headers={"Cache-Control": "no-store" if stable_from else "public, max-age=86400"})

Grouping = Literal["line", "kernel"]  # graph_groups.GROUPINGS
BY_QUERY = Query("line", description="whole=1 on a tensor graph: its groups, by the model line (inside the module objects) that made each "
                 "UOp, or by the kernel it ended up in")

@api.get("/traces/{trace_id}/graphs/{ref:path}", response_model=GraphView, response_model_exclude_none=True, summary="A graph as JSON",
         responses=documented(GRAPH_ERRORS))
async def get_graph(trace_id: str, ref: str, svc: ServicesDep, work: Work, full: bool = False, nodes: bool = True,
                    index: IndexMode = "auto", expand: str | None = EXPAND_QUERY,
                    whole: bool = Query(False, description="every node, none cut (index arithmetic collapsed only with index=hide): the "
                                        "graph a page draws on a canvas and lays out itself; its SVG stays the simplified one"),
                    by: Grouping = BY_QUERY) -> dict[str, Any]:
  """ref: tensor | kernels | ast/{k} | codegen/{k}/{p}/{before|after|m<j>} | rangeify/{p}/{before|after|m<j>}.
  Graphs over the node limit are simplified (notes say how); full=1 lifts the limit to 1,000 nodes, whole=1 lifts it and adds
  `groups` (explorer.present.graph_groups: each {label, nodes, ops, parent (the index of the group holding it, or null), ...}, each
  node's `group` the deepest holding it). nodes=0 leaves nodes and edges out."""
  opened = expand_nums(expand)
  trace = await graph_trace(svc, trace_id, ref)
  view = await svc.graphs.view(trace_id, trace, ref, full, index, opened, permit=work.permit(), whole=whole, by=by)
  query = "&".join(q for q in ("full=1" if full else "", "" if index == "auto" else f"index={index}",
                               f"expand={','.join(map(str, sorted(opened)))}" if opened else "") if q)  # commas as they are: ids
  svg_url = graph_api_url(trace_id, ref, svg=True) + (f"?{query}" if query else "")
  out = {k: v for k, v in view.items() if k in GraphView.model_fields} | {"svg_url": svg_url}
  if not nodes: out["nodes"] = out["edges"] = None
  return out
