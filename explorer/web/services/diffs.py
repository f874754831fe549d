"""The diff pages' work, off the event loop. The structural diff (explorer.analysis.diff.diff_traces, kernels matched by role and data flow)
runs in a thread; the UOp graph diff rebuilds both sides' kernel ASTs in a worker (explorer.analysis.diff_worker) and draws each differing
kernel with the nodes only its side has highlighted; the two measurements (interleaved re-timing, outputs compared) are background
jobs with progress, one at a time. Every result is cached in the store (Store.put_diff), keyed by the two trace ids."""
from __future__ import annotations
import asyncio
import functools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from explorer.analysis.diff import (
  RULE_KERNELS,
  Whole,
  as_it_is,
  compare_outputs,
  diff_traces,
  graph_diff,
  kernel_graphs,
  packed,
  pass_steps,
  remeasure_interleaved,
  rule_changes,
  source_rows,
  time_headline,
  unpacked,
)
from explorer.present import graph_groups, graphs
from explorer.present.render import lexer_for
from explorer.schema import KernelRecord, TraceRecord
from explorer.stages import Progress
from explorer.store import Store, tinygrad_version
from explorer.tracing.pipeline.run import ran_here
from explorer.version import __version__
from explorer.web.services import remote
from explorer.web.services.lifecycle import ACTIVE, ERROR, Task, Tasks, run_in_daemon_thread
from explorer.web.services.permit import WorkPermit

if TYPE_CHECKING:
  from explorer.queue.client import QueueClient  # the [queue] extra: imported only with a job queue

MEASURES = ("timing", "numerics")
WithFacts = Callable[[str, TraceRecord, str, WorkPermit], Awaitable[TraceRecord]]
CACHE_V = f"v{__version__}"  # computed diffs are cached per explorer version (an engine fix must not serve stale diffs); measurements are not
GRAPHS = f"graphs3:{CACHE_V}"  # 3: each group's rules compared; 2: only where a change starts is outlined red

def structural_kind(ta: str, tb: str) -> str:
  """What a structural diff on targets ta, tb is cached as (3: stored packed, explorer.analysis.diff.packed; 2, before: whole)."""
  return f"diff3:{CACHE_V}:{ta}:{tb}"

LINE_FORMATTER = HtmlFormatter(nowrap=True)

# ***** the structural diff, with sources of two targets side by side where asked *****

def _joined(ks: Sequence[KernelRecord], target: str) -> tuple[str, list[dict[str, Any]]]:
  """A group's sources joined by a blank line, and where each kernel starts (1-based line)."""
  parts, texts, line = [], [], 1
  for k in ks:
    text = k["sources"].get(target, "").rstrip("\n")
    parts.append({"kernel": k["index"], "name": k["name"], "first_line": line, "lines": len(text.splitlines())})
    texts.append(text)
    line += len(text.splitlines()) + 1
  return "\n\n".join(texts), parts

def cross_source(ka: Sequence[KernelRecord], kb: Sequence[KernelRecord], ta: str, tb: str) -> dict[str, Any]:
  """A's source for target ta against B's for tb (the same trace on both sides compares two renderers)."""
  note = None
  if not all(ta in k["sources"] for k in ka) or not all(tb in k["sources"] for k in kb):
    note, ta, tb = "a side has no source for its target: showing host sources", "host", "host"
  (a, pa), (b, pb) = _joined(ka, ta), _joined(kb, tb)
  rows = source_rows(a, b)
  return {"target": ta, "target_b": tb, "note": note, "rows": rows, "counts": dict(Counter(r["kind"] for r in rows)), "a_parts": pa, "b_parts": pb}

def build_diff(a: TraceRecord, b: TraceRecord, ta: str, tb: str, whole_a: Whole = as_it_is, whole_b: Whole = as_it_is) -> dict[str, Any]:
  """diff_traces without rewrite blobs (the graph diff comes separately), with B's source for target tb; whole_a, whole_b: diff_traces'."""
  d = diff_traces(a, b, None, None, ta, whole_a=whole_a, whole_b=whole_b)
  d["notes"] = [n for n in d["notes"] if not n.startswith("no rewrite blobs")]
  d["target_b"] = tb
  for g in d["groups"]:
    src = g["source"]
    if tb != ta:
      ka, kb = [whole_a(a["kernels"][k["index"]]) for k in g["a"]], [whole_b(b["kernels"][k["index"]]) for k in g["b"]]
      g["source"] = src = cross_source(ka, kb, ta, tb)
    src.setdefault("target_b", src["target"])
  return d

@functools.lru_cache(maxsize=64)
def highlighted_lines(target: str, text: str) -> tuple[Markup, ...]:
  """Each line of a source, highlighted on its own (pygments closes its spans at line ends), for side-by-side rows."""
  lexer = lexer_for(target, text)
  lexer.stripnl, lexer.ensurenl = False, True
  return tuple(Markup(x) for x in highlight(text, lexer, LINE_FORMATTER).split("\n"))

def side_by_side(src: dict[str, Any], a_kernels: Sequence[KernelRecord], b_kernels: Sequence[KernelRecord]) -> list[dict[str, Any]]:
  """The source rows with each side's line highlighted (an HTML string per cell)."""
  la = highlighted_lines(src["target"], _joined(a_kernels, src["target"])[0])
  lb = highlighted_lines(src["target_b"], _joined(b_kernels, src["target_b"])[0])
  def cell(lines: tuple[Markup, ...], no: int | None, raw: str | None) -> Markup | None:
    if no is None: return None
    return lines[no - 1] if no - 1 < len(lines) else escape(raw or "")
  return [{**r, "a_html": cell(la, r["a_no"], r["a"]), "b_html": cell(lb, r["b_no"], r["b"])} for r in src["rows"]]

def fold(rows: list[dict[str, Any]], context: int = 3, min_run: int = 10) -> list[dict[str, Any]]:
  """Segments of rows: runs of identical lines longer than min_run, away from a change by more than context, come folded."""
  near = [False] * len(rows)
  for i, r in enumerate(rows):
    if r["kind"] != "same":
      for j in range(max(0, i - context), min(len(rows), i + context + 1)): near[j] = True
  segs: list[dict[str, Any]] = []
  for r, keep in zip(rows, near, strict=True):
    folded = r["kind"] == "same" and not keep
    if not segs or segs[-1]["folded"] != folded: segs.append({"folded": folded, "rows": []})
    segs[-1]["rows"].append(r)
  out: list[dict[str, Any]] = []
  for sg in segs:  # short folds are not worth a click
    if sg["folded"] and len(sg["rows"]) < min_run: sg["folded"] = False
    if out and not out[-1]["folded"] and not sg["folded"]: out[-1]["rows"] += sg["rows"]
    else: out.append(sg)
  return out

# ***** measurements: background jobs *****

@dataclass
class MeasureTask(Task):
  kind: str = ""

  def view(self) -> dict[str, Any]:
    """The measurement as GET /api/diff/{a}/{b}/{kind} shows it."""
    return {"kind": self.kind, "status": self.status, "detail": self.detail, "result": self.result, "error": self.error,
            "elapsed_s": self.elapsed_s}

class DiffService:
  def __init__(self, store: Store, node_limit: int = graphs.MAX_NODES, dot_timeout_s: float = graphs.DOT_TIMEOUT_S, timeout_s: float = 600.0,
               queue: QueueClient | None = None, with_facts: WithFacts | None = None, max_waiting: int = 32, per_client: int = 4,
               kernel: Callable[[str, TraceRecord, int], KernelRecord] | None = None):
    """With queue, measurements run on a job queue worker that offers the traces' device; graph diffs stay on this server. with_facts:
    a stored trace with its compile facts on a target computed where missing (EnrichmentService.with_facts): registers are compared.
    kernel(id, trace, n): kernel n whole, of a trace read light (TraceCache.kernel): a group's sources are read as it is diffed."""
    self.store, self.node_limit, self.dot_timeout_s, self.timeout_s, self.queue = store, node_limit, dot_timeout_s, timeout_s, queue
    self.with_facts, self.kernel = with_facts, kernel
    self.on_measured: Callable[[str, str], None] = lambda a_id, b_id: None  # a pair's measurement stored (the app drops its views)
    # one measurement at a time (two at once would time each other), the rest waiting, bounded per client
    self.measures: Tasks[MeasureTask] = Tasks(parallel=1, max_waiting=max_waiting, per_client=per_client, what="measurements")
    self.graph_runs = 0  # worker calls for graph diffs: tests check the cache
    self.structural_runs = 0  # structural diffs computed (not served from the store)
    self._inflight: dict[tuple[str, ...], asyncio.Future[Any]] = {}
    self._dot_slots: asyncio.Semaphore | None = None
    self._graph_slots: asyncio.Semaphore | None = None

  async def _once(self, key: tuple[str, ...], make: Callable[[], Any]) -> Any:
    if (fut := self._inflight.get(key)) is None:
      fut = self._inflight[key] = asyncio.get_running_loop().create_task(make())
      fut.add_done_callback(lambda _: self._inflight.pop(key, None))
    return await asyncio.shield(fut)

  # ***** structural *****

  def whole(self, trace_id: str, trace: TraceRecord) -> Whole:
    """A kernel of the trace with its sources: itself where the trace was read whole."""
    if self.kernel is None: return as_it_is
    load = self.kernel
    return lambda k: load(trace_id, trace, k["index"])

  async def structural(self, a_id: str, a: TraceRecord, b_id: str, b: TraceRecord, ta: str, tb: str, permit: WorkPermit) -> dict[str, Any]:
    kind = structural_kind(ta, tb)
    if (cached := await asyncio.to_thread(self.stored_structural, a_id, b_id, kind)) is not None: return cached
    async def make() -> dict[str, Any]:
      nonlocal a, b
      self.structural_runs += 1
      if self.with_facts is not None: a, b = await self.with_facts(a_id, a, ta, permit), await self.with_facts(b_id, b, ta, permit)
      d = await asyncio.to_thread(build_diff, a, b, ta, tb, self.whole(a_id, a), self.whole(b_id, b))
      await asyncio.to_thread(lambda: self.store.put_diff(a_id, b_id, kind, packed(d)))  # (packed: a walk over every group)
      return d
    return cast(dict[str, Any], await self._once((a_id, b_id, kind), make))

  def stored_structural(self, a_id: str, b_id: str, kind: str) -> dict[str, Any] | None:
    """The structural diff as the store keeps it (explorer.analysis.diff.packed), its shared values put back; None where there is none
    or it does not read back (then it is computed again)."""
    stored = self.store.get_diff(a_id, b_id, kind)
    return unpacked(stored) if isinstance(stored, dict) else None

  # ***** the UOp graph diff, drawn *****

  async def cached_graphs(self, a_id: str, b_id: str) -> dict[str, Any] | None:
    return await asyncio.to_thread(self.store.get_diff, a_id, b_id, GRAPHS)

  async def graph_diff(self, a_id: str, a: TraceRecord, b_id: str, b: TraceRecord, groups: list[dict[str, Any]],
                       permit: WorkPermit) -> dict[str, Any]:
    """{error, groups: [{index, graph (nodes only in A / B), drawings {a: [...], b: [...]}}]}: cached once it worked."""
    if (cached := await self.cached_graphs(a_id, b_id)) is not None: return cached
    return cast(dict[str, Any], await self._once((a_id, b_id, GRAPHS), lambda: self._make_graphs(a_id, a, b_id, b, groups)))

  async def _make_graphs(self, a_id: str, a: TraceRecord, b_id: str, b: TraceRecord, groups: list[dict[str, Any]]) -> dict[str, Any]:
    from explorer.tracing.workers.process import WorkerFailed
    a_blob, b_blob = await asyncio.to_thread(lambda: (self.store.get_rewrites(a_id), self.store.get_rewrites(b_id)))
    if not a_blob or not b_blob: return {"error": "a side has no stored rewrite blob: no UOp graph diff", "groups": []}
    # ast_sink: absent from a kernel of a trace that failed before its AST was recorded
    sinks = {s: [k["ast_sink"] for k in t["kernels"] if k.get("ast_sink") is not None] for s, t in (("a", a), ("b", b))}
    whole_a, whole_b = self.whole(a_id, a), self.whole(b_id, b)
    def passes_of() -> list[tuple[list[KernelRecord], list[KernelRecord]]]:  # the kernels whose passes' rules are compared, whole
      out, n = [], 0
      for g in groups:
        if (n := n + max(len(g["a"]), len(g["b"]))) > RULE_KERNELS: break
        out.append(([whole_a(a["kernels"][k["index"]]) for k in g["a"]], [whole_b(b["kernels"][k["index"]]) for k in g["b"]]))
      return out
    looked = await asyncio.to_thread(passes_of)
    steps = pass_steps(looked)
    self.graph_runs += 1
    if self._graph_slots is None: self._graph_slots = asyncio.Semaphore(1)  # one graph-diff worker at a time, however many pairs are asked
    try:
      async with self._graph_slots:
        got = await run_in_daemon_thread(lambda: kernel_graphs(a, b, a_blob, b_blob, sinks["a"], sinks["b"], self.timeout_s, *steps))
    except WorkerFailed as e: return {"error": f"this server could not rebuild the kernels' UOp graphs: {e}", "groups": []}
    gra, grb = got.graphs_a, got.graphs_b
    fired = [{(gi, si): r for (gi, si), r in zip(st, rules, strict=False)} for st, rules in zip(steps, (got.rules_a, got.rules_b), strict=False)]
    out = []
    for i, g in enumerate(groups):
      ka, kb = [a["kernels"][k["index"]] for k in g["a"]], [b["kernels"][k["index"]] for k in g["b"]]
      if any(k.get("ast_sink") not in gra for k in ka) or any(k.get("ast_sink") not in grb for k in kb):  # a trace that failed early
        out.append({"index": g["index"], "graph": None, "drawings": {"a": [], "b": []}, "rules": None})
        continue
      rules = rule_changes(*looked[i], fired[0], fired[1]) if i < len(looked) else None
      ga, gb = [gra[k["ast_sink"]] for k in ka], [grb[k["ast_sink"]] for k in kb]
      gd = graph_diff(ga, gb)
      drawings: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
      if gd["only_a"] or gd["only_b"]:
        for side, ks, gs in (("a", ka, ga), ("b", kb, gb)):
          only = gd[f"only_{side}"]
          starts, rest = {n["id"] for n in only if n["frontier"]}, {n["id"] for n in only if not n["frontier"]}
          for i, (k, raw) in enumerate(zip(ks, gs, strict=False)):
            drawings[side].append(await self._draw(k, raw, starts, rest, f"d{g['index']}{side}{i}", side))
      out.append({"index": g["index"], "graph": gd, "drawings": drawings, "rules": rules})
    res = {"error": None, "groups": out}
    await asyncio.to_thread(self.store.put_diff, a_id, b_id, GRAPHS, res)
    return res

  async def _draw(self, k: KernelRecord, raw: graphs.Graph, starts: set[str], rest: set[str], prefix: str, side: str) -> dict[str, Any]:
    """The kernel's graph with where the change starts (nodes only this side has, whose inputs both have) outlined red and the nodes
    that differ only because an input differs outlined amber: outlining all of them red marks most of a fused kernel."""
    from explorer.present.export import localize_svg
    if len(raw["nodes"]) > self.node_limit: return await asyncio.to_thread(self._whole, k, raw, starts, rest, side)
    shown, notes = graphs.simplify(raw, self.node_limit)
    keep, here = {n["id"] for n in shown["nodes"]}, {n["id"] for n in raw["nodes"]}
    mine = (starts | rest) & here
    hl, down = starts & here & keep, rest & here & keep
    if (left := len(mine) - len(hl) - len(down)) > 0:
      notes.append(f"{left} of the {len(mine)} nodes only in {side.upper()} are left out of the drawing; the list below has them all.")
    title = f"{side.upper()}: {k['name']} ({k['role']})"
    info = {"kernel": k["index"], "name": k["name"], "role": k["role"], "title": title, "notes": notes, "differing": len(mine),
            "highlighted": len(hl), "downstream": len(down), "nodes": len(raw["nodes"]), "svg": None, "error": None}
    if self._dot_slots is None: self._dot_slots = asyncio.Semaphore(2)
    async with self._dot_slots:
      try: svg = await asyncio.to_thread(graphs.layout_svg, graphs.uop_dot(shown, hl, title, downstream=down), self.dot_timeout_s)
      except graphs.LayoutError as e: return {**info, "error": str(e)}
    return {**info, "svg": localize_svg(svg, prefix)}

  @staticmethod
  def _whole(k: KernelRecord, raw: graphs.Graph, starts: set[str], rest: set[str], side: str) -> dict[str, Any]:
    """A kernel's graph over the node limit, whole, for the page to draw on a canvas (static/whole_graph.js): grouped by loop nest, with
    where the change starts and what differs downstream marked as the SVG marks them."""
    from explorer.present.export import whole_drawing
    here = {n["id"] for n in raw["nodes"]}
    graph = {**raw, "nodes": [dict(n) for n in raw["nodes"]]}  # (grouping writes `group` on each node: the diff's own graphs stay as they are)
    groups = graph_groups.loop_groups(graph)
    hl, down = sorted(starts & here), sorted(rest & here)
    return {"kernel": k["index"], "name": k["name"], "role": k["role"], "title": f"{side.upper()}: {k['name']} ({k['role']})",
            "notes": [f"All {len(raw['nodes']):,} nodes, drawn on a canvas in groups by loop nest: a click on a group opens it in place."],
            "differing": len(hl) + len(down), "highlighted": len(hl), "downstream": len(down), "nodes": len(raw["nodes"]), "svg": None,
            "error": None, "whole": whole_drawing({**graph, "groups": groups, "highlight": hl, "downstream": down})}

  # ***** measurements *****

  def measure_status(self, a_id: str, b_id: str, kind: str) -> dict[str, Any]:
    """The job's state while it runs (or failed), else the cached result, else status none."""
    job = self.measures.get((a_id, b_id, kind))
    if job is not None and job.status in (*ACTIVE, ERROR): return job.view()
    if (cached := self.store.get_diff(a_id, b_id, kind)) is not None:
      if kind == "timing" and cached.get("compared"):  # the words made again: diffs stored before said an interval the other way round
        cached = {**cached, "verdict": time_headline(cached), "span_verdict": time_headline(cached, "span")}
      return {"kind": kind, "status": "done", "detail": "", "result": cached, "error": None, "elapsed_s": None}
    if job is not None: return job.view()  # done, but not comparable: the reason is in its result
    return {"kind": kind, "status": "none", "detail": "", "result": None, "error": None, "elapsed_s": None}

  def start_measure(self, a_id: str, a: TraceRecord, b_id: str, b: TraceRecord, kind: str, repeats: int = 20, warmup: int = 3,
                    client: str | None = None) -> dict[str, Any]:
    def work(job: MeasureTask, progress: Progress) -> dict[str, Any]:
      if self.queue is not None:
        return remote.measure(self.queue, f"measure-{a_id}-{b_id}-{kind}", kind, a, b, repeats, warmup, self.timeout_s, progress)
      if kind == "timing": return remeasure_interleaved(a, b, repeats, warmup, self.timeout_s, progress)
      return compare_outputs(a, b, self.timeout_s, progress)
    async def kept(job: MeasureTask, result: dict[str, Any]) -> dict[str, Any]:
      result = {"ran_on": ran_here(), **result, "measured": time.time(), "tinygrad": tinygrad_version()}  # a worker's result names it
      if result.get("compared"):
        await asyncio.to_thread(self.store.put_diff, a_id, b_id, kind, result)
        self.on_measured(a_id, b_id)
      return result
    return self.measures.start((a_id, b_id, kind), MeasureTask(kind=kind, detail="waiting for the measurement slot", client=client), work,
                               started=self._starting, kept=kept).view()

  @staticmethod
  async def _starting(job: MeasureTask) -> None: job.detail = "starting a worker"

  def cancel_all(self) -> None: self.measures.cancel_all()
