"""Groups for graphs too big to read node by node: a tensor graph grouped by the model line (or, where no line was recorded, the
Tensor function) that made each UOp, from the provenance the trace records (tensor_graph.sites, uop_sites); a kernel's graphs (its
AST, codegen's passes) by loop nest, the RANGEs tinygrad says each UOp is inside (nodes' `ranges`); a program's kernel graph by
realize and model line, as its collapsed form (graphs.program_graph) groups it. A page draws a group closed, as one box with its op
counts, and opens it in place (static/big_graph.js).

Plain data in and out: no tinygrad imports."""
from __future__ import annotations
import collections
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from explorer.present.graphs import call_sites
from explorer.schema import Provenance, TensorGraph, TraceRecord, realizes_of

Graph = dict[str, Any]
K = TypeVar("K", int, tuple[Any, ...])  # what a group stands for: a slot, a loop nest, a (realize, line)
MIN_GROUP = 2  # a group of one UOp is drawn as the UOp

GROUPINGS = ("line", "kernel")  # a tensor graph's: by the module objects and model lines that made it, by the kernels that compute it

def grouped(kind: str, graph: Graph, trace: TraceRecord, by: str = "line") -> list[dict[str, Any]] | None:
  """A whole graph's groups by what it draws (a graph reference's kind), each node given its `group`: None for a graph not grouped.
  by: a tensor graph's grouping (GROUPINGS)."""
  if kind == "tensor": return kernel_groups(graph, trace) if by == "kernel" else tensor_groups(graph, trace["tensor_graph"])
  if kind in ("ast", "codegen"): return loop_groups(graph)
  return call_groups(graph, trace) if kind == "kernels" else None

def groupings(kind: str, trace: TraceRecord) -> list[str] | None:
  """The groupings a graph can be drawn in (GROUPINGS' that its trace recorded): None where it has one way only."""
  if kind != "tensor" or not (g := trace["tensor_graph"]) or not g.get("sites"): return None
  return list(GROUPINGS) if g.get("uop_calls") else None

def site_key(site: Provenance) -> tuple[Any, ...]:
  """What one group stands for: a model line (forward and backward apart), else a Tensor function."""
  return (site["file"], site["line"], site["backward"]) if site["file"] else (None, site["fn"], site["backward"])  # (None, op, None): by op

def named(fns: list[str]) -> str: return ", ".join(fns[:3]) + ("…" if len(fns) > 3 else "")  # a group's first Tensor functions

def site_label(site: Provenance, fns: list[str]) -> str:
  where = f"{os.path.basename(site['file'])}:{site['line']}" if site["file"] else "(no line)"
  return f"{where} {'backward: ' if site['backward'] else ''}{named(fns)}"

def numbered(graph: Graph, key_of: dict[str, K], by_key: bool) -> list[tuple[K, collections.Counter[str]]]:
  """Each node whose key_of names a group of at least MIN_GROUP nodes gets `group`, that group's index; the groups with their ops
  counted, largest first (between equals: by key where by_key, else in the order of their first node)."""
  ops: dict[K, collections.Counter[str]] = collections.defaultdict(collections.Counter)
  for n in graph["nodes"]:
    if (key := key_of.get(n["id"])) is not None: ops[key][n["op"]] += 1
  big = [k for k in ops if ops[k].total() >= MIN_GROUP]
  used = sorted(big, key=lambda k: (-ops[k].total(), k)) if by_key else sorted(big, key=lambda k: -ops[k].total())
  slot = {key: i for i, key in enumerate(used)}
  for n in graph["nodes"]:
    if key_of.get(n["id"]) in slot: n["group"] = slot[key_of[n["id"]]]
  return [(k, ops[k]) for k in used]

@dataclass(frozen=True)
class Instance:
  """A module object in a group's path: the n-th instance of its class the capture met (schema.Instance)."""
  cls: str
  index: int

@dataclass(frozen=True)
class Call:
  """A kernel (or a copy) of the schedule, as the first step of a tensor graph's path grouped by kernel."""
  index: int

def scope_of(site: Provenance) -> tuple[Instance, ...]:
  """The module objects a site's line ran inside, outermost first (well-formed steps only: the trace comes from the store)."""
  steps = site.get("scope") or []
  return tuple(Instance(st["cls"], st["index"]) for st in steps if isinstance(st, dict) and isinstance(st.get("cls"), str)
               and isinstance(st.get("index"), int))

def nested(graph: Graph, path_of: dict[str, tuple[Any, ...]], kept_over: Callable[[Any], bool] = lambda step: False) \
    -> list[tuple[tuple[Any, ...], collections.Counter[str], int | None]]:
  """Groups from each node's path (outermost first: the module objects, then the line): one per path prefix holding at least MIN_GROUP
  nodes, except a prefix whose nodes all lie in one smaller prefix of it (a level that tells nothing apart; where kept_over(its last
  step), the smaller one is dropped instead). Each node gets `group`, the index of the deepest group it is in. Returns (path, the ops
  of every node inside, parent's index or None) per group, each parent before its children; siblings: calls in schedule order, module
  objects in the order met, then the rest largest first (between equals, as their first node)."""
  ops: dict[tuple[Any, ...], collections.Counter[str]] = collections.defaultdict(collections.Counter)
  for n in graph["nodes"]:
    if path := path_of.get(n["id"]):
      for i in range(1, len(path) + 1): ops[path[:i]][n["op"]] += 1
  kept = {p for p, c in ops.items() if c.total() >= MIN_GROUP}
  for p in list(kept):
    for i in range(1, len(p)):
      if ops[p[:i]].total() == ops[p].total(): kept.discard(p if kept_over(p[i - 1]) else p[:i])  # all of it is p: one level says it
  def deepest(path: tuple[Any, ...], below: int) -> tuple[Any, ...] | None:
    return next((path[:i] for i in range(below, 0, -1) if path[:i] in kept), None)
  parent = {p: deepest(p, len(p) - 1) for p in kept}
  children: dict[tuple[Any, ...] | None, list[tuple[Any, ...]]] = collections.defaultdict(list)
  classes = list(dict.fromkeys(p[-1].cls for p in ops if isinstance(p[-1], Instance)))
  def sibling_order(p: tuple[Any, ...]) -> tuple[int, int, int]:  # module objects by class, each class's as the capture met them
    if isinstance(p[-1], Call): return (0, len(classes), p[-1].index)  # after the module objects beside it
    return (0, classes.index(p[-1].cls), p[-1].index) if isinstance(p[-1], Instance) else (1, -ops[p].total(), 0)  # then lines, largest first
  for p in sorted((p for p in ops if p in kept), key=sibling_order): children[parent[p]].append(p)  # (ops: in the order met)
  order: list[tuple[Any, ...]] = []
  def visit(p: tuple[Any, ...] | None) -> None:
    for c in children[p]:
      order.append(c)
      visit(c)
  visit(None)
  slot = {p: i for i, p in enumerate(order)}
  for n in graph["nodes"]:
    if (path := path_of.get(n["id"])) and (d := deepest(path, len(path))) is not None: n["group"] = slot[d]
  return [(p, ops[p], slot[up] if (up := parent[p]) is not None else None) for p in order]

def numbered_pairs(pairs: Any, bound: int) -> dict[int, int]:
  """A stored trace's [trace number, index] pairs as a dict: only well-formed pairs whose index is below bound are read."""
  return {p[0]: p[1] for p in pairs or [] if isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) for x in p) and 0 <= p[1] < bound}

def spread(graph: Graph, group: dict[str, tuple[Any, ...]]) -> dict[str, tuple[Any, ...]]:
  """Groups for the nodes group leaves out (a constant, a buffer, a reshape tinygrad made on its own, a UOp a rewrite folded away):
  a node joins its users' group when they are all grouped and share one, else its inputs' where they share one (a STORE of a group's
  result, the AFTER that orders it); the rest are grouped by op, as ((None, op, None),). Returns group with them added."""
  group = dict(group)
  users: dict[str, list[str]] = collections.defaultdict(list)
  inputs: dict[str, list[str]] = collections.defaultdict(list)
  for e in graph["edges"]:
    users[e["src"]].append(e["dst"])
    inputs[e["dst"]].append(e["src"])
  def joined(n: dict[str, Any], near: dict[str, list[str]]) -> None:  # the one group all its grouped neighbours share, if there is one
    if n["id"] not in group and len(mine := {group[m] for m in near[n["id"]] if m in group}) == 1: group[n["id"]] = mine.pop()
  for n in reversed(graph["nodes"]):  # a UOp graph's nodes come inputs first: users are placed before their inputs
    if not any(m not in group for m in users[n["id"]]): joined(n, users)
  for n in graph["nodes"]: joined(n, inputs)  # what only stores or orders a group's result (STORE, AFTER) is the group's too
  left = collections.Counter(n["op"] for n in graph["nodes"] if n["id"] not in group)
  for n in graph["nodes"]:  # the rest, by op: a program's buffers, the stores between lines
    if n["id"] not in group and left[n["op"]] > 1: group[n["id"]] = ((None, n["op"], None),)
  return group

def tensor_groups(graph: Graph, tensor_graph: TensorGraph | None) -> list[dict[str, Any]]:
  """Set each node's `group` (an index into the returned list) where its UOp's provenance names one: the model line that made it, inside
  the module objects that line ran in (Block 3, in Stack 0: groups within groups, where the capture recorded them). A node without
  provenance (a constant, a buffer, a reshape tinygrad made on its own) joins its users' group when they are all grouped and share
  one, else its inputs' where they share one (a STORE of a group's result, the AFTER that orders it); the rest are grouped by op
  (labelled "(no line)"). Returns the groups: {label, file, line, fn, backward, scope, parent, nodes, ops}, each parent before its
  children, siblings largest first. A graph of a trace recorded without sites gets none."""
  if not tensor_graph or not (sites := tensor_graph.get("sites")): return []
  by_num = numbered_pairs(tensor_graph.get("uop_sites"), len(sites))
  path_of_site: list[tuple[Any, ...]] = [(*scope_of(s), site_key(s)) for s in sites]
  group = spread(graph, {n["id"]: path_of_site[i] for n in graph["nodes"] if (i := by_num.get(n.get("num", -1))) is not None})
  fns: dict[Any, list[str]] = collections.defaultdict(list)  # by a path's last step: a line
  first: dict[Any, Provenance] = {}
  for s, path in zip(sites, path_of_site, strict=True):
    first.setdefault(path[-1], s)
    if s["fn"] not in fns[path[-1]]: fns[path[-1]].append(s["fn"])
  out = []
  for path, ops, parent in nested(graph, group):
    last = path[-1]
    row: dict[str, Any]
    if isinstance(last, Instance):
      row = {"label": f"{last.cls} {last.index}", "file": None, "line": None, "fn": None, "backward": False}
    else:
      site = first.get(last) or {"fn": last[1], "file": None, "line": None, "backward": False}
      names = fns.get(last) or [last[1]]
      row = {"label": site_label(site, names), "file": site["file"], "line": site["line"], "fn": names[0], "backward": site["backward"]}
    scope = [{"cls": st.cls, "index": st.index} for st in path if isinstance(st, Instance)]
    out.append({**row, "scope": scope, "parent": parent, "nodes": ops.total(), "ops": dict(ops.most_common())})
  return out

UNSITED = (None, "kernels of no model line", None)  # the group of the kernels whose UOps no line made

def kernel_groups(graph: Graph, trace: TraceRecord) -> list[dict[str, Any]]:
  """Set each node's `group` by the kernel its UOp ended up in (the schedule's call that computes it, as the trace recorded it from
  tinygrad's rewrites: tensor_graph.uop_calls), each kernel inside the module objects and line that made most of its UOps (Block 3's
  kernels in Block 3, one fused half and half across blocks in their Stack, an optimizer step's in its line), and inside a kernel by
  the other lines it fused; the nodes no call names (a buffer, a constant, a UOp a rewrite folded into another) join their
  neighbours' as tensor_groups' do.
  Returns the groups: {label, call, kernel (its index, or None for a copy or a module object), file, line, fn, backward, scope,
  parent, nodes, ops}, each parent before its children, kernels in schedule order. A trace recorded without uop_calls gets none."""
  tensor_graph, schedule = trace["tensor_graph"], trace["schedule"]
  if not tensor_graph or not (call_of := numbered_pairs(tensor_graph.get("uop_calls"), len(schedule))): return []
  sites = tensor_graph.get("sites") or []
  site_of = numbered_pairs(tensor_graph.get("uop_sites"), len(sites))
  group = spread(graph, {n["id"]: (Call(call_of[num]),) for n in graph["nodes"] if (num := n.get("num", -1)) in call_of})
  scopes: dict[Any, list[tuple[Any, ...]]] = collections.defaultdict(list)  # each kernel's lines, inside their module objects
  for n in graph["nodes"]:
    if (path := group.get(n["id"])) and isinstance(path[0], Call) and (i := site_of.get(n.get("num", -1))) is not None:
      group[n["id"]] = (path[0], line := site_key(sites[i]))
      scopes[path[0]].append((*scope_of(sites[i]), line))
  held = {call: most_prefix(ss) for call, ss in scopes.items()}
  held |= {Call(c): (UNSITED,) for c in set(call_of.values()) if Call(c) not in held}  # a kernel no line made (an optimizer's stores)
  for node, path in group.items():
    if not isinstance(path[0], Call): continue
    home = held.get(path[0], ())
    group[node] = (*home, *(path[:1] if home and home[-1] == path[-1] else path))  # a kernel at home in a line: no box of it inside
  kernels = {k["call"]: k for k in trace["kernels"]}
  first: dict[Any, Provenance] = {}
  for site in sites: first.setdefault(site_key(site), site)
  def row(step: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"call": None, "kernel": None, "file": None, "line": None, "fn": None, "backward": False}
    if isinstance(step, Instance): return {**out, "label": f"{step.cls} {step.index}"}
    if step == UNSITED: return {**out, "label": UNSITED[1]}
    if isinstance(step, Call):
      k = kernels.get(step.index)
      label = f"kernel {k['index']} {k['name']}" if k else f"call {step.index} {schedule[step.index].get('kind', 'call')}"
      return {**out, "label": label, "call": step.index, "kernel": k["index"] if k else None}
    site = first.get(step) or {"fn": step[1], "file": None, "line": None, "backward": False}
    return {**out, "label": site_label(site, [site["fn"]]), "file": site["file"], "line": site["line"], "fn": site["fn"],
            "backward": site["backward"]}
  return [{**row(path[-1]), "scope": [{"cls": st.cls, "index": st.index} for st in path if isinstance(st, Instance)], "parent": parent,
           "nodes": ops.total(), "ops": dict(ops.most_common())} for path, ops, parent in nested(graph, group, lambda st: isinstance(st, Call))]

def most_prefix(paths: list[tuple[Any, ...]]) -> tuple[Any, ...]:
  """The longest prefix more than half the paths start with (a kernel's home: where most of the UOps it computes were made)."""
  out: tuple[Any, ...] = ()
  while True:
    counts = collections.Counter(p[:len(out) + 1] for p in paths if len(p) > len(out) and p[:len(out)] == out)
    if not counts or (best := counts.most_common(1)[0])[1] * 2 <= len(paths): return out
    out = best[0]

_RANGE_ARG = re.compile(r"^\((\d+),")
_RANGE_SIZE = re.compile(r"^CONST0 (\d+)$", re.M)

def loop_groups(graph: Graph) -> list[dict[str, Any]]:
  """Set each node's `group` to its loop nest's (the RANGEs it is inside, as tinygrad's UOp.ranges names them: the nodes' `ranges`);
  a node outside every loop (a buffer, a constant, the SINK) stays in none. Returns the groups: {label (each loop as tinygrad's END
  labels it: axis(size)), ranges, parent (None: loop nests are not nested here), nodes, ops}, largest first."""
  ranges = {n["num"]: n for n in graph["nodes"] if n["op"] == "RANGE" and "num" in n}
  def axis(num: int) -> tuple[int, str]:  # a loop's axis number and its name as END writes it, e.g. 4(6)
    lines = ranges[num]["label"].split("\n") if num in ranges else []
    arg = _RANGE_ARG.match(lines[1]) if len(lines) > 1 else None
    size = _RANGE_SIZE.search(ranges[num]["label"]) if num in ranges else None
    return (int(arg.group(1)), f"{arg.group(1)}({size.group(1) if size else '?'})") if arg else (1 << 30, f"#{num}")
  key_of = {n["id"]: tuple(sorted(rs, key=axis)) for n in graph["nodes"] if (rs := n.get("ranges"))}
  return [{"label": "loops " + " ".join(axis(r)[1] for r in key), "ranges": list(key), "parent": None, "nodes": ops.total(),
           "ops": dict(ops.most_common())} for key, ops in numbered(graph, key_of, True)]

def call_groups(graph: Graph, trace: TraceRecord) -> list[dict[str, Any]]:
  """A captured program's kernel graph (graphs.kernel_graph, whole) grouped by realize and the model line each call's kernel came
  from (graphs.call_sites); a buffer joins its writers' group, or, never written (an input), its readers' where they share one, and
  is otherwise grouped with the buffers of its role that lie between groups.
  Groups within groups: a TinyJit's realizes inside it, a realize's lines inside it (a level holding nothing but one group is not
  drawn). Returns the groups: {label, realize, jit (the TinyJit whose captured schedule the realize ran, or None), site, parent,
  nodes, ops}, each parent before its children. A convolution's trace (no realizes) gets none."""
  if not realizes_of(trace): return []
  keyed = {f"c{s['index']}": site for s, site in zip(trace["schedule"], call_sites(trace), strict=True)}
  key_of: dict[str, tuple[int, str]] = {node: key for node, (key, _) in keyed.items()}
  fns: dict[tuple[int, str], list[str]] = collections.defaultdict(list)
  for key, called in keyed.values(): fns[key] += [f for f in called if f not in fns[key]]
  writers: dict[str, list[str]] = collections.defaultdict(list)
  readers: dict[str, list[str]] = collections.defaultdict(list)
  for e in graph["edges"]:
    if e["src"] in key_of: writers[e["dst"]].append(e["src"])  # a call writes the buffer
    else: readers[e["src"]].append(e["dst"])  # a call reads it
  for n in graph["nodes"]:
    if n["id"] in key_of: continue
    near = writers[n["id"]] or readers[n["id"]]
    if len(mine := {key_of[c] for c in near if c in key_of}) == 1: key_of[n["id"]] = mine.pop()
    else: key_of[n["id"]] = (-1, f"{n.get('role') or n['kind']} buffers")  # between groups (a weight each realize writes): by role
  jit_of = {r: j["index"] for j in trace.get("jits") or [] if j["realizes"] for r in range(*j["realizes"])}  # a TinyJit's realizes
  def path(key: tuple[int, str]) -> tuple[Any, ...]:  # TinyJit, then realize, then line: groups within groups (graph_groups.nested)
    if key[0] < 0: return (key,)
    return ((("jit", jit_of[key[0]]),) if key[0] in jit_of else ()) + ((key[0], ""), key)
  def row(step: tuple[Any, ...]) -> dict[str, Any]:
    if step[0] == "jit": return {"label": f"TinyJit {step[1]}", "realize": None, "jit": step[1], "site": None}
    realize, site = step
    jit = f"TinyJit {jit_of[realize]} · " if realize in jit_of else ""
    label = f"{jit}realize {realize}" + (f" · {site} {named(fns[step])}".rstrip() if site else "") if realize >= 0 else \
      f"{site} written or read by more than one group"
    return {"label": label, "realize": realize, "jit": jit_of.get(realize), "site": site or None}
  return [{**row(p[-1]), "parent": parent, "nodes": ops.total(), "ops": dict(ops.most_common())}
          for p, ops, parent in nested(graph, {node: path(key) for node, key in key_of.items()})]
