"""Graphs expanded lazily from a stored rewrite blob with tinygrad's own viewer (tinygrad.viz.serve, imported when first used)."""
from __future__ import annotations
import contextlib
import difflib
import re
from collections.abc import Iterator, Sequence
from typing import Any
from tinygrad.helpers import ansistrip
from tinygrad.uop.ops import Ops, TrackedGraphRewrite, UOp
from explorer.tracing.tg.recording import Pass
from explorer.tracing.tg.rewritelog import REWRITE_LOG_MAGIC, LogFields, decode_rewrite_log, log_fields, rule_file, rule_source

def recorded_sinks(blob: bytes, nums: Sequence[int]) -> list[UOp]:
  """The UOps a rewrite blob recorded as these numbers (kernels' ASTs), rebuilt from its UOp fields alone: none of its rewrites decoded
  and no viewer index built (a medium trace's blob: 0.1 s and about 10 MiB less than RewriteBlob). A blob from before the data format
  loads whole."""
  if not blob.startswith(REWRITE_LOG_MAGIC):
    log = RewriteBlob(blob)
    return [log.sink(n) for n in nums]
  fields = log_fields(blob)
  return [fields.uop(n) for n in nums]

class RewriteBlob:
  """A loaded rewrite trace. Rebuilding a graph replays tinygrad's recorded matches, so callers should cache results."""
  def __init__(self, blob: bytes):
    from explorer.tracing.tg.viewer import VizData
    log = decode_rewrite_log(blob)
    self.data = VizData(log)
    self.sources: dict[str, str] = getattr(log.uop_fields, "sources", None) or {}
    if isinstance(log.uop_fields, LogFields): self.data.all_uops.update(log.uop_fields.built)

  def sink(self, trace_num: int) -> UOp:
    from explorer.tracing.tg.viewer import _reconstruct
    return _reconstruct(self.data, trace_num)

  def graph_of(self, trace_num: int) -> dict[str, Any]: return uop_graph(self, self.sink(trace_num))

  def rewrite(self, group: int, step: int) -> TrackedGraphRewrite: return self.data.trace.rewrites[group][step]

  def nums(self) -> dict[int, int]:
    """id(UOp) -> trace number, for every UOp rebuilt so far (whole graphs rebuilt from the blob are kept by tinygrad's VizData)."""
    return {id(u): n for n, u in self.data.all_uops.items()}

  def by_id(self) -> dict[int, UOp]:
    """id(UOp) -> UOp, for every UOp rebuilt so far."""
    return {id(u): u for u in self.data.all_uops.values()}

  def pass_output(self, p: Pass) -> UOp:
    """The graph a pass ended with (its start with every match applied)."""
    from explorer.tracing.tg.viewer import replayed_output
    return replayed_output(self.data, p.group, p.step, p.name)

  def node_ids(self, trace_nums: list[int]) -> list[str]:
    """The graph node ids (uop_graph's) of recorded UOps: rebuilt UOps are interned, so while a graph of this blob holds its UOps,
    rebuilding one of them gives the same object."""
    out = []
    for n in trace_nums:
      with contextlib.suppress(KeyError, IndexError): out.append(str(id(self.sink(n))))  # (a UOp the blob does not hold: left out)
    return out

  def pass_steps(self, group: int, step: int, limit: int) -> Iterator[dict[str, Any]]:
    """The graph before a pass, then after each of its first `limit` matches (changed nodes and the matching rule named)."""
    from explorer.tracing.tg.viewer import get_full_rewrite
    for i, st in enumerate(get_full_rewrite(self.data, self.data.trace.rewrites[group][step])):
      if i > limit: break
      graph = _with_nums(_graph_from_viz(st["graph"]), self.nums(), self.by_id())
      yield {"graph": graph, "changed": [str(c) for c in (st["change"] or [])], "diff": st["diff"],
             "rule": None if st["upat"] is None else f"{st['upat'][0][0].split('/')[-1]}:{st['upat'][0][1]}"}

  def rules_fired(self, group: int, step: int) -> list[dict[str, Any]]:
    """The rules a pass's matches went through, each once with its count, most first: its code as it stands in its file (the UPat's
    first line, spaces collapsed: what names a rule across tinygrad versions, whose line numbers move) and where it is (file:line)."""
    counts: dict[tuple[str, int], int] = {}
    for _, _, loc, _ in self.data.trace.rewrites[group][step].matches: counts[(loc[0], loc[1])] = counts.get((loc[0], loc[1]), 0) + 1
    return sorted(({"code": " ".join(rule_source(loc, self.sources).split("\n")[0].split()) or f"{rule_file(loc[0])}:{loc[1]}",
                    "at": f"{rule_file(loc[0])}:{loc[1]}", "count": n} for loc, n in counts.items()), key=lambda r: (-r["count"], r["at"]))

  def pass_record(self, group: int, step: int) -> dict[str, Any]:
    """Where in tinygrad a pass was called (the graph_rewrite call's file:line and its code) and how many matches it recorded."""
    r = self.data.trace.rewrites[group][step]
    return {"name": r.name, "call": f"{rule_file(r.loc[0])}:{r.loc[1]}", "call_code": rule_source(r.loc, self.sources).split("\n")[0].strip(),
            "total": len(r.matches), "bottom_up": r.bottom_up, "depth": r.depth}

  def matches(self, group: int, step: int, offset: int, limit: int, depth: int = 3) -> list[dict[str, Any]]:
    """Matches offset+1..offset+limit of a pass (every one tinygrad recorded), each with its rule (file:line and the UPat's source as
    it stands in its file), the time the match took, and the rewritten UOp before and after: graphs `depth` sources deep and the
    text diff of their Python forms (tinygrad's pyrender, as its viewer diffs them). No replay of the pass: each match is rebuilt alone."""
    from explorer.tracing.tg.viewer import _reconstruct, pystr, uop_to_json
    out = []
    for i, (before, after, loc, seconds) in enumerate(self.data.trace.rewrites[group][step].matches[offset:offset + limit], start=offset + 1):
      u0, u1 = _reconstruct(self.data, before, depth), _reconstruct(self.data, after, depth)
      diff = list(difflib.unified_diff(pystr(u0).splitlines(), pystr(u1).splitlines(), lineterm=""))[2:]  # no ---/+++ header
      out.append({"index": i, "op": u0.op.name, "rule": f"{rule_file(loc[0])}:{loc[1]}", "rule_source": rule_source(loc, self.sources),
                  "time_s": seconds, "error": u1.arg if u1.op is Ops.REWRITE_ERROR else None, "diff": diff,
                  "before": _graph_from_viz(uop_to_json(self.data, u0)), "after": _graph_from_viz(uop_to_json(self.data, u1))})
    return out

  def origins(self, group: int, nums: Sequence[int]) -> list[dict[str, Any]]:
    """origin() of each of nums, sharing the replay's graphs."""
    seen: dict[int, set[int]] = {}
    return [self.origin(group, n, seen) for n in nums]

  def origin(self, group: int, num: int, seen: dict[int, set[int]] | None = None) -> dict[str, Any]:
    """Which pass of a rewrite group made the UOp with trace number num, read from the log itself by replaying where it first appears:
    pass by pass in the order they ran, the graph the pass started from, then each match's result. The first match whose result holds
    it (and whose pass did not start with it) made it: that pass and that rule. A UOp first seen in the graph a pass starts from was
    made between passes (graph_rewrite rebuilding a user whose sources changed, or a rewrite nobody tracked): no rule made it. A match
    whose rule ran nested rewrites (their passes are listed after it) is credited with what it returned. Nested passes are named with
    the pass they ran inside."""
    rewrites, u, seen = self.data.trace.rewrites[group], self.sink(num), {} if seen is None else seen  # seen: each graph's UOps
    def holds(root: int) -> bool:
      if root not in seen: seen[root] = {id(x) for x in self.sink(root).toposort()}
      return id(u) in seen[root]
    def name(step: int) -> str:
      r = rewrites[step]
      parent = next((q.name for q in reversed(rewrites[:step]) if q.depth < r.depth), None)
      return f"{r.name} (inside {parent})" if parent and r.depth > 0 else r.name
    def found(kind: str, step: int | None, match: int | None = None, loc: Any = None) -> dict[str, Any]:
      return {"num": num, "kind": kind, "step": step, "name": None if step is None else name(step), "match": match,
              "depth": None if step is None else rewrites[step].depth, "rule": None if loc is None else f"{rule_file(loc[0])}:{loc[1]}",
              "rule_source": None if loc is None else rule_source(loc, self.sources)}
    for step, r in enumerate(rewrites):
      if r.sink is not None and holds(r.sink): return found("input" if step == 0 else "start", step)
      for j, (_, after, loc, _) in enumerate(r.matches, start=1):
        if holds(after): return found("match", step, j, loc)
    return found("unknown", None)

  def python(self, trace_num: int, max_lines: int = 4000) -> tuple[str, bool]:
    """A recorded graph as Python (tinygrad's pyrender, what its viewer shows), cut at max_lines; and whether it was cut."""
    from explorer.tracing.tg.viewer import pystr
    lines = pystr(self.sink(trace_num)).splitlines()
    return "\n".join(lines[:max_lines]), len(lines) > max_lines

def uop_graph(blob: RewriteBlob, sink: UOp) -> dict[str, Any]:
  from explorer.tracing.tg.viewer import uop_to_json
  return _with_nums(_graph_from_viz(uop_to_json(blob.data, sink)), blob.nums(), blob.by_id())

def _with_nums(g: dict[str, Any], nums: dict[int, int], uops: dict[int, UOp] | None = None) -> dict[str, Any]:
  """Each node that is a recorded UOp gets its trace number (`num`): stable across graphs and processes, unlike the node ids; and,
  where uops (id -> UOp) has it inside loops, the trace numbers of the RANGEs it is inside (`ranges`, tinygrad's UOp.ranges, outer
  first): its loop nest, by which a viewer groups a big kernel graph."""
  for n in g["nodes"]:
    if (num := nums.get(int(n["id"]))) is not None: n["num"] = num
    if uops is not None and (u := uops.get(int(n["id"]))) is not None and (inside := getattr(u, "ranges", None)):
      n["ranges"] = [r for r in (nums.get(id(x)) for x in inside) if r is not None]
  return g

def _graph_from_viz(g: dict[int, dict[str, Any]]) -> dict[str, Any]:
  nodes = [{"id": str(k), "label": plain(v["label"]), "op": v["label"].split("\n", 1)[0], "color": v["color"],
            "addrspace": v.get("addrspace")} for k, v in g.items() if not v.get("exclude")]  # (0.13 leaves the excluded out)
  keep = {n["id"] for n in nodes}
  edges = [{"src": str(s), "dst": str(k), "idx": i} for k, v in g.items() if str(k) in keep for i, s in v["src"] if str(s) in keep]
  return {"nodes": nodes, "edges": edges}

_REPR_ANSI = re.compile(r"\\x1b\[[0-9;]*m")

def plain(text: str) -> str:
  """Text without terminal colours: tinygrad colours kernel names, and a KernelInfo's repr carries them escaped ('r\\x1b[90m_...')."""
  return _REPR_ANSI.sub("", ansistrip(text))
