"""Graphs for the server: expansion in worker processes, simplification and layout, all cached in the store. A graph
reference (explorer.present.graphs) names one drawable graph of a trace, and is the tail of its URLs:
  tensor                       the tensor graph handed to the scheduler
  kernels                      the kernel graph: kernels and the buffers between them (from the trace alone, no expansion)
  ast/{k}                      kernel k's AST as the scheduler made it
  codegen/{k}/{p}/{at}         codegen pass p of kernel k; at = before | after | m{j} (after its j-th match)
  codegen@{target}/{k}/{p}/{at}  the same for another target's codegen (its own process and rewrite blob): codegen@cuda/0/5/after
  rangeify/{p}/{at}            rangeify (scheduler) pass p, same `at`
"""
from __future__ import annotations
import asyncio
from collections.abc import Callable
from typing import Any, cast
from explorer.present import expand_worker as expand, graph_groups, graphs
from explorer.present.graph_refs import (
  GraphNotFound,
  Ref,
  blob_of,
  blob_passes,
  find_pass,
  graph_title,
  kernel_of,
  parse_ref,
  passes_of,
  spec_messages,
)
from explorer.schema import Pass, TraceRecord, realizes_of
from explorer.store import Store
from explorer.tracing import versions
from explorer.tracing.workers.pool import WorkerPool
from explorer.tracing.workers.process import Limits, WorkerFailed, WorkersBusy, call_in_worker
from explorer.web.services.lifecycle import Busy
from explorer.web.services.permit import WorkPermit
from explorer.web.urls import trace_url

MAX_STEPS = 60     # matches one can step through in a pass (each replays all before it)
STEP_WINDOW = 6    # steps expanded per worker call, cached for the next clicks
EXPAND_TIMEOUT_S = 180.0

Raw = tuple[graphs.Graph, list[str], list[str], dict[str, Any]]  # a graph to view: (graph, highlighted ids, notes, extra)

class GraphUnavailable(RuntimeError):
  """The graph exists but cannot be drawn (too many matches to replay, worker crashed or timed out, dot failed)."""

class GraphBusy(Busy):
  """Too many expansions are waiting for a graph worker: try again shortly (503 with Retry-After)."""
  retry_after_s = 5

def next_pass(passes: list[Pass], p: int) -> Pass | None:
  """The pass that runs after pass p has finished: the next one of its group at the same or a shallower depth."""
  me = passes[p]
  return next((q for q in passes[p+1:] if q["group"] == me["group"] and q["depth"] <= me["depth"]), None)

def steppable(p: Pass) -> int: return min(p["matches"], MAX_STEPS)

def drawn_realize(trace: TraceRecord) -> list[str]:
  """What a program's tensor graph page draws of its realizes, said where it has more than one graph: the realize that ran the most
  kernels (tensor_graph.sink, explorer.tracing.pipeline.program)."""
  realizes = [(r["index"], tg) for r in realizes_of(trace) if (tg := r["tensor_graph"]) is not None]
  if len(realizes) < 2 or (g := trace["tensor_graph"]) is None: return []
  drawn = next(((i, tg) for i, tg in realizes if tg["sink"] == g["sink"]), None)
  if drawn is None: return []
  return [f"This program's {len(realizes)} realizes made {g['uops']:,} UOps in all; drawn here is realize {drawn[0]}'s graph "
          f"({drawn[1]['uops']:,} UOps), the one that ran the most kernels."]

class GraphService:
  """Expands graphs in worker processes (one by default: it keeps the loaded rewrite blob warm) and lays them out with dot."""
  def __init__(self, store: Store, node_limit: int = graphs.MAX_NODES, dot_timeout_s: float = graphs.DOT_TIMEOUT_S, workers: int = 1,
               expand_timeout_s: float = EXPAND_TIMEOUT_S, memory_mb: int = 0, max_output_mb: float = 256.0, max_waiting: int = 32, nice: int = 0):
    self.store, self.node_limit, self.dot_timeout_s, self.workers, self.expand_timeout_s = store, node_limit, dot_timeout_s, workers, expand_timeout_s
    self.pool = WorkerPool(workers, Limits(expand_timeout_s, memory_mb, max_output_mb, nice), expand.init_worker, max_waiting)
    self._inflight: dict[tuple[str, ...], asyncio.Future[Any]] = {}
    self._dot_slots: asyncio.Semaphore | None = None
    self.expansions = 0  # worker calls made: tests check that cached graphs do not expand again
    self._recorded: dict[str, str] = {}  # trace id -> the tinygrad that recorded it ("": none named)
    self._older_slots: asyncio.Semaphore | None = None  # expansions in an older tinygrad's workers at once (as many as the pool's)

  # ***** worker processes (explorer.tracing.workers.pool: limits, and a dead or hung worker replaced) *****

  def close(self) -> None: self.pool.close()

  def _older(self, trace_id: str) -> str | None:
    """The older tinygrad that recorded the trace where its environment is made (its blob loads there, not in this tinygrad's workers);
    None: this server's own (or one without an environment: its blob is tried here, and a graph the store never cached says why not)."""
    if (version := self._recorded.get(trace_id)) is None:
      if len(self._recorded) > 4096: self._recorded.clear()
      self._recorded[trace_id] = version = self.store.recorded_with(trace_id) or ""
    return version if versions.older(version) and versions.environment(version).state == "ready" else None

  async def _expand_in(self, version: str, fn: Callable[..., Any], *args: Any) -> Any:
    """fn in a worker of an older tinygrad (a fresh one per call, forked from that version's template); what it raised, as the pool's
    calls raise it (a blob it cannot load falls back to the cached layouts, a graph it lacks is a 404)."""
    if self._older_slots is None: self._older_slots = asyncio.Semaphore(self.workers)
    async with self._older_slots:
      try: got, _ = await asyncio.to_thread(call_in_worker, "explorer.present.expand_worker:expanded", {"name": fn.__name__, "args": [
                                          str(self.store.path), *args]}, None, self.expand_timeout_s, env={"VIZ": "0"}, limits=self.pool.limits,
                                          tinygrad=version)
      except WorkerFailed as e:
        kind, _, said = str(e).partition(": ")
        if kind == "BlobUnreadable": raise expand.BlobUnreadable(said.splitlines()[0]) from None
        if kind == "LookupError": raise LookupError(said.splitlines()[0]) from None
        raise
    return got

  async def _expand(self, fn: Callable[..., Any], *args: Any) -> Any:
    self.expansions += 1
    try:
      if (version := self._older(args[0])) is not None: return await self._expand_in(version, fn, *args)
      return await self.pool.call(fn, str(self.store.path), *args)
    except WorkersBusy as e: raise GraphBusy(str(e)) from None
    except WorkerFailed as e: raise GraphUnavailable(f"expanding the graph failed: {e}") from None
    except LookupError as e: raise GraphNotFound(str(e)) from None

  async def _once(self, key: tuple[str, ...], make: Callable[[], Any]) -> Any:
    """Identical concurrent requests share one computation."""
    if (fut := self._inflight.get(key)) is not None: return await asyncio.shield(fut)
    fut = asyncio.get_running_loop().create_task(make())
    self._inflight[key] = fut
    try: return await asyncio.shield(fut)
    finally:
      if fut.done(): self._inflight.pop(key, None)
      else: fut.add_done_callback(lambda _: self._inflight.pop(key, None))

  # ***** views: simplified graph + what to highlight + notes, cached as JSON *****

  def _cache_key(self, ref: str, full: bool, index: str = "auto", opened: frozenset[int] = frozenset(), whole: bool = False,
                 by: str = "line") -> str:
    return ref + ("+whole" if whole else "+full" if full else "") + ("" if index == "auto" else f"+index={index}") + \
      (f"+expand={','.join(map(str, sorted(opened)))}" if opened else "") + (f"+by={by}" if whole and by != "line" else "")

  # the public calls start work (a worker's expansion, a layout): each takes the request's WorkPermit (explorer.web.http.work)

  async def view(self, trace_id: str, trace: TraceRecord, ref_text: str, full: bool = False, index: str = "auto",
                 opened: frozenset[int] = frozenset(), *, permit: WorkPermit, whole: bool = False, by: str = "line") -> dict[str, Any]:
    """whole: every node, none cut and index arithmetic collapsed only where index="hide" (what a page draws on a canvas), grouped
    (a tensor graph's: by one of graph_groups.GROUPINGS)."""
    return await self._view(trace_id, trace, ref_text, full, index, opened, whole, by)

  async def svg(self, trace_id: str, trace: TraceRecord, ref_text: str, full: bool = False, trace_url: str = "", index: str = "auto",
                stable_from: str | None = None, opened: frozenset[int] = frozenset(), *, permit: WorkPermit) -> str:
    return await self._svg(trace_id, trace, ref_text, full, trace_url, index, stable_from, opened)

  async def matches(self, trace_id: str, trace: TraceRecord, group: int, step: int, offset: int, limit: int, target: str | None, *,
                    permit: WorkPermit) -> dict[str, Any]:
    return await self._matches(trace_id, trace, group, step, offset, limit, target)

  async def python(self, trace_id: str, trace: TraceRecord, group: int, step: int, target: str | None, *, permit: WorkPermit) -> dict[str, Any]:
    return await self._python(trace_id, trace, group, step, target)

  async def origin(self, trace_id: str, trace: TraceRecord, group: int, num: int, target: str | None, *, permit: WorkPermit) -> dict[str, Any]:
    """The pass and rule that made UOp num, read from the rewrite log of the group (cached)."""
    if not any(p.get("group") == group for p in blob_passes(trace, target)): raise GraphNotFound(f"no rewrite group {group} in this trace")
    return cast(dict[str, Any], await self._stored(trace_id, f"origin/{target or ''}/{group}/{num}",
                                                   lambda: self._expand(expand.pass_origin, trace_id, group, num, target)))

  async def origins(self, trace_id: str, trace: TraceRecord, group: int, nums: tuple[int, ...], target: str | None, *,
                    permit: WorkPermit) -> list[dict[str, Any]]:
    """origin() of several UOps at once (a source line's), cached."""
    if not any(p.get("group") == group for p in blob_passes(trace, target)): raise GraphNotFound(f"no rewrite group {group} in this trace")
    return cast(list[dict[str, Any]], await self._stored(trace_id, f"origins/{target or ''}/{group}/{','.join(map(str, nums))}",
                                                         lambda: self._expand(expand.pass_origins, trace_id, group, list(nums), target)))

  async def _view(self, trace_id: str, trace: TraceRecord, ref_text: str, full: bool = False, index: str = "auto",
                  opened: frozenset[int] = frozenset(), whole: bool = False, by: str = "line") -> dict[str, Any]:
    """index: collapse index arithmetic "auto" (over the node limit), "hide" (always) or "show" (never). opened: trace numbers of
    cut-off nodes to open (their inputs shown)."""
    ref = parse_ref(ref_text)
    self._check(trace, ref)
    if ref.kind != "tensor": by = "line"  # only a tensor graph has two groupings: one view (and one cache entry) for the rest
    key = self._cache_key(ref_text, full, index, opened, whole, by)
    cached = await asyncio.to_thread(self.store.get_cached_json, trace_id, key, "view")
    if cached is not None and "partial" in cached: return cast(dict[str, Any], cached)  # (one cached before `partial` is made again)
    try: return cast(dict[str, Any], await self._once((trace_id, key, "view"), lambda: self._make_view(
      trace_id, trace, ref, ref_text, full, index=index, opened=opened, whole=whole, by=by)))
    except expand.BlobUnreadable as e: return await asyncio.to_thread(self._stored_view, trace_id, ref_text, str(e))

  def _stored_view(self, trace_id: str, ref_text: str, why: str) -> dict[str, Any]:
    """The rewrites do not load here: the same graph as cached earlier (with or without the node limit), said so; else a clear error."""
    for key in (self._cache_key(ref_text, False), self._cache_key(ref_text, True)):
      if (cached := self.store.get_cached_json(trace_id, key, "view")) is not None:
        return {**cached, "notes": [f"{why}: this is the layout the store cached when the graph was last expanded."] + cached.get("notes", [])}
    raise GraphUnavailable(f"{why}, and the store holds no earlier layout of this graph")

  def _check(self, trace: TraceRecord, ref: Ref) -> None:
    if ref.kind == "tensor" and not ((g := trace["tensor_graph"]) and g["sink"]): raise GraphNotFound("this trace has no tensor graph")
    if ref.kind == "ast": kernel_of(trace, ref.kernel)
    if ref.kind in ("codegen", "rangeify"):
      passes = passes_of(trace, ref)
      if not 0 <= ref.pass_index < len(passes): raise GraphNotFound(f"there is no pass {ref.pass_index} (there are {len(passes)})")  # type: ignore[operator]
      if (j := ref.match) is not None and not 1 <= j <= passes[ref.pass_index]["matches"]:  # type: ignore[index]
        raise GraphNotFound(f"pass {ref.pass_index} has {passes[ref.pass_index]['matches']} matches, not {j}")  # type: ignore[index]

  async def _make_view(self, trace_id: str, trace: TraceRecord, ref: Ref, ref_text: str, full: bool, got: Raw | None = None,
                       index: str = "auto", opened: frozenset[int] = frozenset(), whole: bool = False, by: str = "line") -> dict[str, Any]:
    raw, highlight, notes, extra = got if got is not None else await self._raw(trace_id, trace, ref, whole)
    limit = len(raw["nodes"]) if whole else graphs.HARD_MAX_NODES if full else self.node_limit
    def make() -> dict[str, Any]:  # a program's kernel graph has a node per kernel: simplified off the event loop (100 ms for 10,001)
      shown, simplify_notes = graphs.simplify(raw, limit, index, opened)
      if whole: shown = {**shown, "nodes": [dict(n) for n in shown["nodes"]]}  # each node's `group` is this grouping's alone
      groups = graph_groups.grouped(ref.kind, shown, trace, by) if whole else None
      keep = {n["id"] for n in shown["nodes"]}
      view = {"ref": ref_text, "title": graph_title(trace, ref), "notes": notes + simplify_notes, "total_nodes": len(raw["nodes"]),
              "shown_nodes": len(shown["nodes"]), "highlight": [h for h in highlight if h in keep],
              "legend": graphs.kernel_graph_legend(shown) if ref.kind == "kernels" else graphs.legend(shown),
              "rule": extra.get("rule"), "diff": extra.get("diff"), "nodes": shown["nodes"], "edges": shown["edges"], "full": full,
              "violations": [v for v in extra.get("violations") or [] if v in keep],
              "simplified": bool(simplify_notes), "index": index, "groups": groups,
              "groupings": graph_groups.groupings(ref.kind, trace) if whole else None, "by": by if whole and ref.kind == "tensor" else None,
              "partial": len(shown["nodes"]) < len(raw["nodes"]) or "grouped" in raw}
      self.store.put_cached(trace_id, self._cache_key(ref_text, full, index, opened, whole, by), "view", view)
      return view
    return await asyncio.to_thread(make)

  async def _raw(self, trace_id: str, trace: TraceRecord, ref: Ref, whole: bool = False) -> Raw:
    """(graph, highlighted ids, notes, extra) straight from the trace or a worker; whole: a big program's kernel graph not collapsed."""
    if ref.kind == "kernels":
      graph = await asyncio.to_thread(graphs.kernel_graph, trace, trace_url(trace_id), whole)
      return graph, [], [graph["grouped"]] if "grouped" in graph else [], {}
    says = spec_messages(trace, ref)
    async def marked(sink: int | None, target: str | None = None) -> Raw:
      got = await self._expand(expand.sink_graph, trace_id, sink, None, target, list(says))
      bad = set(got.get("marked") or [])
      for n in got["graph"]["nodes"]:
        if n["id"] in bad: n["spec"] = says.get(n.get("num"), "")  # the message leads the node's tooltip
      note = [f"{len(bad)} node(s) outlined dashed violet: tinygrad's spec rejects them (the stage's spec check; hover one for its message)."
              ] if bad else []
      return got["graph"], [], note, {"violations": got.get("marked") or []}
    if ref.kind == "tensor":
      assert (g := trace["tensor_graph"]) is not None  # _check found it
      graph, highlight, notes, extra = await marked(g["sink"])
      return graph, highlight, drawn_realize(trace) + notes, extra
    if ref.kind == "ast": return await marked(kernel_of(trace, ref.kernel)["ast_sink"])
    passes = passes_of(trace, ref)
    p = passes[ref.pass_index]  # type: ignore[index]
    if ref.at == "before": return await marked(p["sink"], blob_of(trace, ref))
    if ref.at == "after": return await self._after(trace_id, passes, ref.pass_index, blob_of(trace, ref))  # type: ignore[arg-type]
    return await self._match_step(trace_id, trace, ref, p)

  async def _after(self, trace_id: str, passes: list[Pass], i: int, target: str | None = None) -> Raw:
    p, q = passes[i], next_pass(passes, i)
    if p["matches"] == 0:
      graph = (await self._expand(expand.sink_graph, trace_id, p["sink"], None, target))["graph"]
      return graph, [], ["This pass matched nothing: the graph is unchanged."], {}
    if q is not None:
      got = await self._expand(expand.sink_graph, trace_id, q["sink"], p["sink"], target)
      note = (f"The graph after this pass is the one the next pass, “{q['name']}”, starts from; "
              "nodes new since the start of this pass are outlined red.")
      return got["graph"], got["new"], [note], {}
    if p["matches"] > MAX_STEPS:
      raise GraphUnavailable(f"this is the last pass of its group and it has {p['matches']} matches, over the {MAX_STEPS} the explorer replays; "
                             "step through its first matches instead")
    last = (await self._expand(expand.match_steps, trace_id, p["group"], p["step"], p["matches"], p["matches"], target))[-1]
    return last["graph"], last["new"], ["All matches replayed; nodes new since the start of this pass are outlined red."], {}

  async def _match_step(self, trace_id: str, trace: TraceRecord, ref: Ref, p: Pass) -> Raw:
    j = ref.match
    assert j is not None
    if j > MAX_STEPS: return await self._local_match(trace_id, trace, ref, p, j)
    stop = min(j + STEP_WINDOW - 1, steppable(p))
    steps = await self._expand(expand.match_steps, trace_id, p["group"], p["step"], j, stop, blob_of(trace, ref))
    base = ref_prefix(ref)
    mine = None
    for st in steps:  # cache the window's other steps as views too: the next clicks are free
      got = (st["graph"], st["changed"], [f"Match {st['index']} of {p['matches']}: rule {st['rule']}; the nodes it changed are outlined red."],
             {"rule": st["rule"], "diff": st["diff"]})
      if st["index"] == j: mine = got
      else: await self._make_view(trace_id, trace, Ref(ref.kind, ref.kernel, ref.pass_index, f"m{st['index']}", ref.target), f"{base}/m{st['index']}",
                                  False, got)
    if mine is None: raise GraphUnavailable(f"match {j} could not be replayed")
    return mine

  async def _local_match(self, trace_id: str, trace: TraceRecord, ref: Ref, p: Pass, j: int) -> Raw:
    """Past the first MAX_STEPS matches the whole graph is not replayed (each step replays every match before it): the view is the
    rewritten UOp itself, what the rule returned three sources deep, with its root outlined and the diff from what it matched."""
    group, step = p.get("group"), p.get("step")
    assert group is not None and step is not None  # a pass that matched has its place in the rewrite blob
    got = await self._matches(trace_id, trace, group, step, j - 1, 1, blob_of(trace, ref))
    (m,) = got["matches"]
    after = m["after"]
    consumed = {e["src"] for e in after["edges"]}
    roots = [n["id"] for n in after["nodes"] if n["id"] not in consumed]
    note = (f"Match {j} of {p['matches']}: rule {m['rule']}. Past the first {MAX_STEPS} matches the explorer does not replay the whole graph "
            f"(each step would replay every match before it): this is what the rule returned, three sources deep, its root outlined; "
            f"the diff is from the UOp it matched.")
    return after, roots, [note], {"rule": m["rule"], "diff": m["diff"]}

  # ***** every match of a pass, and its graph as Python *****

  async def _matches(self, trace_id: str, trace: TraceRecord, group: int, step: int, offset: int, limit: int, target: str | None) -> dict[str, Any]:
    p = find_pass(trace, group, step, target)
    if offset > p["matches"]: raise GraphNotFound(f"pass {group}/{step} has {p['matches']} matches: offset {offset} is past them")
    return cast(dict[str, Any], await self._stored(trace_id, f"matches/{target or ''}/{group}/{step}/{offset}/{limit}",
                                                   lambda: self._expand(expand.pass_matches, trace_id, group, step, offset, limit, target)))

  async def _python(self, trace_id: str, trace: TraceRecord, group: int, step: int, target: str | None) -> dict[str, Any]:
    p = find_pass(trace, group, step, target)
    return cast(dict[str, Any], await self._stored(trace_id, f"python/{target or ''}/{group}/{step}",
                                                   lambda: self._expand(expand.pass_python, trace_id, p["sink"], target)))

  async def _stored(self, trace_id: str, key: str, make: Callable[[], Any]) -> Any:
    """The store's cached answer for key, or make's (computed once for concurrent callers, then stored)."""
    if (cached := await asyncio.to_thread(self.store.get_cached_json, trace_id, key, "view")) is not None: return cached
    got = await self._once((trace_id, key), make)
    await asyncio.to_thread(self.store.put_cached, trace_id, key, "view", got)
    return got

  # ***** SVG *****

  async def _svg(self, trace_id: str, trace: TraceRecord, ref_text: str, full: bool = False, trace_url: str = "", index: str = "auto",
                 stable_from: str | None = None, opened: frozenset[int] = frozenset()) -> str:
    """The graph's SVG (cached). stable_from: the graph shown before it; the UOps both hold keep the place they had there (laid out
    anew each time, not cached: it depends on that earlier layout)."""
    key = self._cache_key(ref_text, full, index, opened)
    if stable_from is not None and ref_text != "kernels":
      anchor = await asyncio.to_thread(self.store.get_cached_json, trace_id, self._cache_key(stable_from, full, index, opened), "pos")
      if anchor:
        view = await self._view(trace_id, trace, ref_text, full, index, opened)
        return await self._layout(trace_id, key, view, trace_url, {int(k): tuple(v) for k, v in anchor.items()})
    if (cached := await asyncio.to_thread(self.store.get_cached, trace_id, key, "svg")) is not None: return cached
    view = await self._view(trace_id, trace, ref_text, full, index, opened)
    return cast(str, await self._once((trace_id, key, "svg"), lambda: self._layout(trace_id, key, view, trace_url)))

  async def _layout(self, trace_id: str, key: str, view: dict[str, Any], trace_url: str, anchor: dict[int, tuple[float, float]] | None = None) -> str:
    if self._dot_slots is None: self._dot_slots = asyncio.Semaphore(2)
    graph = {"nodes": view["nodes"], "edges": view["edges"]}
    dot = graphs.kernel_graph_dot(graph, trace_url) if view["ref"] == "kernels" else \
      graphs.uop_dot(graph, set(view["highlight"]), view["title"], set(view.get("violations") or []))
    async with self._dot_slots:
      try: svg, pos = await asyncio.to_thread(lambda: graphs.stable_layout(graph, dot, anchor, self.dot_timeout_s) if anchor
                                                  else graphs.layout(dot, self.dot_timeout_s))
      except graphs.LayoutError as e:
        if anchor is None: raise GraphUnavailable(str(e)) from None
        return await self._layout(trace_id, key, view, trace_url)  # the stable layout failed: the graph laid out on its own
    num = {n["id"]: n["num"] for n in view["nodes"] if n.get("num") is not None}
    # where each recorded UOp was drawn: the next graph stepped to from this one can keep them there
    await asyncio.to_thread(self.store.put_cached, trace_id, key, "pos", {num[i]: xy for i, xy in pos.items() if i in num})
    if anchor is None: await asyncio.to_thread(self.store.put_cached, trace_id, key, "svg", svg)
    return svg

def ref_prefix(ref: Ref) -> str:
  if ref.kind == "rangeify": return f"rangeify/{ref.pass_index}"
  return f"codegen{'@' + ref.target if ref.target else ''}/{ref.kernel}/{ref.pass_index}"
