"""Graph layout with graphviz `dot` on the server: UOp graphs (as explorer.tracing.tg.RewriteBlob gives them) and the kernel graph.

Plain data in, SVG text out. No tinygrad imports: the web server lays graphs out, worker processes expand them.
"""
from __future__ import annotations
import collections
import html
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any
from explorer.schema import KernelRecord, TraceRecord, own_provenance, realizes_of
from explorer.text import fmt_bytes, fmt_seconds, provenance_sites, si

Graph = dict[str, Any]  # {"nodes": [{"id", "label", "op", ...}], "edges": [{"src", "dst", "idx", "via"?}], ...}: a UOp or kernel graph

MAX_NODES = 400           # larger graphs are simplified, and the page says how
HARD_MAX_NODES = 1000     # even with ?full=1: beyond this dot takes more than DOT_TIMEOUT_S on a 2-core machine
FAST_LAYOUT_NODES = 400   # above this, dot trades some crossing minimization for speed (24 s -> 4 s at 600 nodes)
DOT_TIMEOUT_S = 20.0
LABEL_LINES, LABEL_WIDTH = 7, 56

ALU_OPS = {"ADD", "SUB", "MUL", "IDIV", "FDIV", "MOD", "FLOORDIV", "FLOORMOD", "MAX", "NEG", "SHL", "SHR", "AND", "OR", "XOR", "CMPLT", "CMPNE",
           "CMPEQ", "WHERE", "CAST", "BITCAST", "MULACC", "TRUNC", "THREEFRY"}
INDEX_DTYPES = {"dtypes.weakint", "dtypes.index", "dtypes.int", "dtypes.long", "dtypes.uint", "dtypes.ulong", "dtypes.bool", "dtypes.short"}
CONST_OPS = {"CONST", "VCONST", "DEFINE_VAR"}

# what each op kind looks like; tracing.tg's colors are tinygrad VIZ's, these name the groups for the legend
LEGEND_GROUPS = [("STAGE (bufferize)", ("STAGE",)), ("LOAD", ("LOAD",)), ("STORE", ("STORE",)), ("RANGE / END", ("RANGE", "END")),
                 ("REDUCE", ("REDUCE",)), ("INDEX", ("INDEX",)), ("PARAM / BUFFER", ("PARAM", "BUFFER")), ("AFTER", ("AFTER",)),
                 ("movement", ("RESHAPE", "PERMUTE", "EXPAND", "PAD", "SHRINK", "FLIP", "STACK")), ("ALU", tuple(sorted(ALU_OPS))),
                 ("CONTIGUOUS", ("CONTIGUOUS", "CONTIGUOUS_BACKWARD")), ("SINK", ("SINK",))]
# ops that must be easy to tell apart whatever tracing.tg's palette: drawn with a distinct shape too
OP_SHAPES = {"STAGE": "box3d", "LOAD": "invhouse", "STORE": "house", "RANGE": "cds", "END": "octagon", "REDUCE": "doubleoctagon", "SINK": "oval"}

class LayoutError(RuntimeError):
  """graphviz could not lay the graph out (missing, too slow, failed): the message says which."""

# ***** simplification: what to leave out of big graphs, said out loud *****

def trace_num(node: dict[str, Any]) -> int | None:
  """A node's UOp trace number (stable across graphs and processes), or None where it has none: not a recorded UOp, or a kernel graph's."""
  return node.get("num")

def fill_of(node: dict[str, Any]) -> str:
  """A node's fill: the color tracing.tg (or the kernel graph) gave it, white where it has none."""
  return node.get("color") or "#ffffff"

def op_shape(op: str) -> str: return OP_SHAPES.get(op, "box")  # most ops are boxes

def dtype_of(label: str) -> str | None: return next((ln for ln in label.split("\n")[1:] if ln.startswith("dtypes.")), None)

def is_index_math(node: dict[str, Any]) -> bool:
  return node["op"] in CONST_OPS or (node["op"] in ALU_OPS and dtype_of(node["label"]) in INDEX_DTYPES)

def contract(graph: Graph, drop: set[str]) -> Graph:
  """Remove nodes; each kept node gets edges from its nearest kept ancestors through removed ones (marked via=True)."""
  srcs = collections.defaultdict(list)
  for e in graph["edges"]: srcs[e["dst"]].append(e)
  memo: dict[str, set[str]] = {}
  def kept_ancestors(n: str) -> set[str]:
    if n in memo: return memo[n]
    memo[n] = set()
    out: set[str] = set()
    for e in srcs[n]: out |= kept_ancestors(e["src"]) if e["src"] in drop else {e["src"]}
    memo[n] = out
    return out
  edges, seen = [], set()
  for n in graph["nodes"]:
    if n["id"] in drop: continue
    for e in srcs[n["id"]]:
      if e["src"] in drop: continue
      edges.append(e); seen.add((e["src"], n["id"]))
    for e in srcs[n["id"]]:
      if e["src"] not in drop: continue
      for a in sorted(kept_ancestors(e["src"])):
        if (a, n["id"]) not in seen: seen.add((a, n["id"])); edges.append({"src": a, "dst": n["id"], "idx": e["idx"], "via": True})
  return {**graph, "nodes": [n for n in graph["nodes"] if n["id"] not in drop], "edges": edges}

def nearest_outputs(graph: Graph, limit: int) -> set[str]:
  """The `limit` nodes closest to the graph's outputs (nodes nothing consumes), breadth first against the edges."""
  srcs = collections.defaultdict(list)
  consumed = set()
  for e in graph["edges"]: srcs[e["dst"]].append(e["src"]); consumed.add(e["src"])
  frontier = [n["id"] for n in graph["nodes"] if n["id"] not in consumed]
  keep: set[str] = set()
  while frontier and len(keep) < limit:
    nxt = []
    for n in frontier:
      if n in keep or len(keep) >= limit: continue
      keep.add(n); nxt.extend(srcs[n])
    frontier = nxt
  return keep

STABLE_SPLINE_NODES = 120  # stable layouts of bigger graphs draw straight edges (neato's spline routing would take seconds)
EXPAND_DEPTH = 2  # levels of inputs an opened cut-off node shows
INDEX_MODES = ("auto", "hide", "show")  # index arithmetic: collapsed over the node limit, always, or never

def ancestors(graph: Graph, roots: set[str], depth: int) -> set[str]:
  """The inputs of roots, and theirs, `depth` levels up."""
  srcs = collections.defaultdict(list)
  for e in graph["edges"]: srcs[e["dst"]].append(e["src"])
  out: set[str] = set()
  frontier = set(roots)
  for _ in range(depth):
    frontier = {s for f in frontier for s in srcs[f]} - out
    out |= frontier
  return out

def simplify(graph: Graph, max_nodes: int = MAX_NODES, index: str = "auto", expand: frozenset[int] = frozenset()) -> tuple[Graph, list[str]]:
  """A graph dot can lay out and a person can read, and notes saying what was left out. (CONSTs are never nodes: tinygrad's viewer
  folds them into their users' labels.)"""
  total = len(graph["nodes"])
  if total <= max_nodes and index != "hide": return graph, []
  notes = []
  drop = {n["id"] for n in graph["nodes"] if is_index_math(n)} if index != "show" else set()
  if drop:
    graph = contract(graph, drop)
    why = "as asked" if index == "hide" else f"the graph has {total:,} nodes, over {max_nodes}"
    notes.append(f"{len(drop):,} index-arithmetic nodes (integer/bool ALU and constants) are collapsed ({why}); dashed edges pass through them.")
  if len(graph["nodes"]) > max_nodes:
    n_before = len(graph["nodes"])
    keep = nearest_outputs(graph, max_nodes)
    opened = {n["id"] for n in graph["nodes"] if trace_num(n) in expand}
    if opened:  # the nodes asked to be opened, and their inputs two levels up
      keep |= opened | ancestors(graph, opened, EXPAND_DEPTH)
      notes.append(f"Opened {len(opened)} cut-off node(s): their inputs {EXPAND_DEPTH} levels up are shown too.")
    cut = {e["dst"] for e in graph["edges"] if e["dst"] in keep and e["src"] not in keep}
    graph = {**graph, "nodes": [{**n, "truncated": n["id"] in cut} for n in graph["nodes"] if n["id"] in keep],
             "edges": [e for e in graph["edges"] if e["src"] in keep and e["dst"] in keep]}
    notes.append(f"Showing the {len(keep):,} nodes nearest the output of {n_before:,}; inputs of nodes with a dotted border are cut off.")
  return graph, notes

# ***** dot *****

def _q(s: str) -> str: return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

def _short_label(label: str) -> str:
  lines = [ln if len(ln) <= LABEL_WIDTH else ln[:LABEL_WIDTH - 1] + "…" for ln in label.split("\n")]
  if len(lines) > LABEL_LINES: lines = lines[:LABEL_LINES - 1] + [f"… {len(lines) - LABEL_LINES + 1} more lines"]
  return "\n".join(lines)

def text_color(fill: str) -> str:
  m = re.fullmatch(r"#?([0-9a-fA-F]{6})", fill or "")
  if m is None: return "#111111"
  r, g, b = (int(m.group(1)[i:i+2], 16) for i in (0, 2, 4))
  return "#ffffff" if 0.299*r + 0.587*g + 0.114*b < 140 else "#111111"

def _attrs(**kw: object) -> str: return ", ".join(f"{k}={_q(str(v))}" for k, v in kw.items() if v is not None)

DOWNSTREAM_OUTLINE = "#d9931c"  # the diff legend's amber (diff.css .swatch.downstream)
SPEC_OUTLINE = "#7c3aed"  # tinygrad's spec rejected the UOp: an outline no op family, and not the red of a changed node, uses

# what a UOp node's or edge's optional keys mean where absent (each is set only where it applies): truncated, by simplify (its inputs were
# left out); spec, the spec check's message on a rejected node (graph views); addrspace, a buffer's address space (tracing.tg), else a grey
# outline; via, by simplify on an edge that stands for a left-out path
NODE_ABSENT: dict[str, Any] = {"truncated": False, "spec": None, "addrspace": None}
EDGE_ABSENT: dict[str, Any] = {"via": False}

def uop_dot(graph: Graph, highlight: set[str] | None = None, title: str = "", violations: set[str] | None = None,
            downstream: set[str] | None = None) -> str:
  """violations: nodes tinygrad's spec rejected, outlined thick, dashed and violet over their op's fill (REDUCE is filled red: a red
  fill would say two things); a node's `spec` (its message) leads its tooltip. downstream: a diff's nodes that differ only because an
  input differs, outlined thin, dashed amber (red on all of them would hide where the change starts)."""
  highlight, violations, downstream = highlight or set(), violations or set(), downstream or set()
  fast = {"mclimit": "0.2", "nslimit": "2", "nslimit1": "2"} if len(graph["nodes"]) > FAST_LAYOUT_NODES else {}
  graph_attrs = _attrs(rankdir="TB", bgcolor="transparent", nodesep="0.18", ranksep="0.32", fontname="monospace", tooltip=title, **fast)
  out = ["digraph G {", f"  graph [{graph_attrs}];",
         "  node [shape=box, style=\"filled,rounded\", fontname=\"DejaVu Sans Mono,monospace\", fontsize=9, margin=\"0.08,0.04\", height=0.3];",
         "  edge [color=\"#8a8f98\", arrowsize=0.5, penwidth=0.8];"]
  for n in ({**NODE_ABSENT, **node} for node in graph["nodes"]):
    changed, down = n["id"] in highlight, n["id"] in downstream and n["id"] not in highlight
    style = "filled,rounded" + (",dotted" if n["truncated"] else "") + (",bold" if changed else ",dashed" if down else "")
    classes = f"uop op-{n['op']}" + (" changed" if changed else " downstream" if down else "")
    classes += " spec-violation" if (bad := n["id"] in violations) else ""
    fill = fill_of(n)
    if bad: style += ",dashed"
    tip = n["label"] if not bad else f"tinygrad's spec rejects this UOp: {n['spec'] or 'see the spec check'}\n\n{n['label']}"
    attrs = _attrs(label=_short_label(n["label"]), tooltip=tip, fillcolor=fill, fontcolor=text_color(fill), id="n" + n["id"],
                   shape=op_shape(n["op"]), style=style,
                   color="#e5484d" if changed else SPEC_OUTLINE if bad else DOWNSTREAM_OUTLINE if down else (n["addrspace"] or "#5c6370"),
                   penwidth=3 if changed or bad else 1.6 if down else 1.2, **{"class": classes})
    out.append(f"  {_q(n['id'])} [{attrs}];")
  for e in ({**EDGE_ABSENT, **edge} for edge in graph["edges"]):
    attrs = _attrs(tooltip=f"src[{e['idx']}]", style="dashed" if e["via"] else None, id=f"e{e['src']}-{e['dst']}")
    out.append(f"  {_q(e['src'])} -> {_q(e['dst'])} [{attrs}];")
  out.append("}")
  return "\n".join(out)

def legend(graph: Graph) -> list[dict[str, Any]]:
  """Op kinds present in the graph with the color tracing.tg gave them (most frequent first within a group)."""
  colors: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
  for n in graph["nodes"]: colors[n["op"]][fill_of(n)] += 1
  ret = []
  grouped: set[str] = set()
  for name, ops in LEGEND_GROUPS:
    present = [op for op in ops if op in colors]
    grouped.update(ops)
    if present:
      color = colors[present[0]].most_common(1)[0][0]
      ret.append({"name": name, "color": color, "shape": op_shape(present[0]), "count": sum(sum(colors[o].values()) for o in present)})
  for op in sorted(set(colors) - grouped):
    ret.append({"name": op, "color": colors[op].most_common(1)[0][0], "shape": op_shape(op), "count": sum(colors[op].values())})
  return ret

# ***** the kernel graph: kernels and the buffers between them, straight from the trace *****

ROLE_COLORS = {"input": "#B0BDFF", "weight": "#c6b3ff", "output": "#9fe0a8", "intermediate": "#f3c27a", "constant": "#e0e0e0"}
KERNEL_COLOR, COPY_COLOR = "#7DD3DF", "#d7a6d7"

def kernel_time(k: KernelRecord) -> float | None:
  """A kernel's measured time (its median), None where the trace was not timed."""
  return t["median"] if (t := k["time_s"]) else None

GROUP_ABOVE = 150  # a program with more calls than this shows its kernel graph collapsed by realize and model line

def kernel_graph(trace: TraceRecord, trace_url: str | None = None, whole: bool = False) -> Graph:
  """Kernels (and copies) and buffers as one graph: writer call -> buffer -> reader call. A program of more than GROUP_ABOVE calls:
  one node per realize and model line (program_graph), unless whole (every call and buffer: a canvas draws it, grouped the same way:
  explorer.present.graph_groups.call_groups)."""
  if not whole and realizes_of(trace) and len(trace["schedule"]) > GROUP_ABOVE: return program_graph(trace, trace_url or "")
  nodes: list[dict[str, Any]] = []
  edges: list[dict[str, Any]] = []
  for b in trace["buffers"]:
    label = f"{b['name']}  [{b['role']}]\n{b['dtype']}[{b['numel']:,}]\n{fmt_bytes(b['nbytes'])} · GLOBAL · {b['device']}"
    nodes.append({"id": f"b{b['index']}", "label": label, "op": "BUFFER", "kind": "buffer", "role": b["role"],
                  "color": ROLE_COLORS.get(b["role"], "#ffffff"), "addrspace": "GLOBAL"})
  kernels = trace["kernels"]
  for s in trace["schedule"]:
    k = kernels[s["kernel"]] if s["kernel"] is not None else None
    label = f"{s['name'] or s['kind']}\n{s['kind']} #{s['index']} · {s['role']}"
    if k is not None: label += f"\n{k['linear_uops']} uops · {fmt_seconds(kernel_time(k))}"
    nodes.append({"id": f"c{s['index']}", "label": label, "op": s["kind"].upper(), "kind": s["kind"], "role": s["role"],
                  "kernel": s["kernel"], "color": KERNEL_COLOR if s["kind"] == "kernel" else COPY_COLOR})
    edges += [{"src": f"b{i}", "dst": f"c{s['index']}", "idx": j} for j, i in enumerate(s["reads"])]
    edges += [{"src": f"c{s['index']}", "dst": f"b{i}", "idx": j} for j, i in enumerate(s["writes"])]
  return {"nodes": nodes, "edges": edges}

def call_sites(trace: TraceRecord) -> list[tuple[tuple[int, str], list[str]]]:
  """Each schedule call's (realize, the model line its kernel's provenance names first) and the Tensor functions named there: what a
  program's kernel graph groups by."""
  kernels, out = trace["kernels"], []
  sites_of: dict[int, list[tuple[str, list[str]]]] = {}  # by provenance list: a program's repeated kernels share theirs (the store's parts)
  for s in trace["schedule"]:
    k = kernels[s["kernel"]] if s["kernel"] is not None else None
    if (sites := sites_of.get(shared := id(k.get("provenance")) if k else 0)) is None:
      sites = sites_of[shared] = provenance_sites([dict(e) for e in own_provenance(k)] if k else [])
    site, fns = sites[0] if sites else ("(no line)" if s["kind"] == "kernel" else s["kind"] + "s", [])
    out.append(((s.get("realize", 0), site), fns))
  return out

def program_graph(trace: TraceRecord, trace_url: str) -> Graph:
  """A big program's kernel graph collapsed: a node per (realize, the model line its kernels' provenance names first), an edge where
  a group reads a buffer another wrote; each node links to the overview's kernel table narrowed to its kernels (the expansion)."""
  from urllib.parse import quote
  kernels = trace["kernels"]
  key_of: dict[int, tuple[int, str]] = {}
  groups: dict[tuple[int, str], dict[str, Any]] = {}
  for s, (key, fns) in zip(trace["schedule"], call_sites(trace), strict=True):
    k = kernels[s["kernel"]] if s["kernel"] is not None else None
    key_of[s["index"]] = key
    g = groups.setdefault(key, {"calls": 0, "fns": [], "flops": 0, "kinds": set()})
    g["calls"] += 1
    g["fns"] += [f for f in fns if f not in g["fns"]]
    g["flops"] += k["flops"] if k else 0
    g["kinds"].add(s["kind"])
  ids = {key: f"g{i}" for i, key in enumerate(groups)}
  nodes = []
  for (realize, site), g in groups.items():
    named = ", ".join(g["fns"][:4]) + ("…" if len(g["fns"]) > 4 else "")
    query = f"?realize={realize}" + (f"&q={quote(site)}" if ":" in site else "")
    nodes.append({"id": ids[(realize, site)], "label": f"realize {realize} · {site}\n{named}\n{g['calls']} calls · {si(g['flops'])} FLOPs",
                  "op": "GROUP", "kind": "group", "role": None, "color": KERNEL_COLOR if "kernel" in g["kinds"] else COPY_COLOR,
                  "url": f"{trace_url}{query}#kernels"})
  writers = {b: key_of[c] for c in key_of for b in (trace["schedule"][c]["writes"])}
  pairs = {(writers[b], key_of[s["index"]]) for s in trace["schedule"] for b in s["reads"] if b in writers}
  edges = [{"src": ids[a], "dst": ids[b], "idx": 0} for a, b in sorted(pairs, key=str) if a != b]
  return {"nodes": nodes, "edges": edges, "grouped": f"{len(trace['schedule']):,} calls collapsed into {len(nodes)} groups by realize and model "
                                                     "line: a group's node lists its kernels"}

def kernel_graph_legend(graph: Graph) -> list[dict[str, Any]]:
  counts = collections.Counter(n["role"] if n["kind"] == "buffer" else n["kind"] for n in graph["nodes"])
  rows = [{"name": f"{kind} call", "color": KERNEL_COLOR if kind == "kernel" else COPY_COLOR, "shape": "box", "count": counts[kind]}
          for kind in ("kernel", "copy") if counts[kind]]
  if counts["group"]: rows.append({"name": "calls of one realize and model line", "color": KERNEL_COLOR, "shape": "box", "count": counts["group"]})
  return rows + [{"name": f"{role} buffer", "color": color, "shape": "cylinder", "count": counts[role]}
                 for role, color in ROLE_COLORS.items() if counts[role]]

def kernel_graph_dot(graph: Graph, trace_url: str) -> str:
  out = ["digraph K {", "  graph [rankdir=LR, bgcolor=\"transparent\", nodesep=0.25, ranksep=0.45];",
         "  node [fontname=\"DejaVu Sans Mono,monospace\", fontsize=10, style=\"filled\", margin=\"0.12,0.06\"];",
         "  edge [color=\"#8a8f98\", arrowsize=0.6];"]
  for n in graph["nodes"]:
    if n["kind"] == "buffer":
      attrs = _attrs(label=n["label"], shape="cylinder", fillcolor=n["color"], id=n["id"], tooltip=n["label"],
                     **{"class": f"buffer role-{n['role']}"})
    elif n["kind"] == "group":
      attrs = _attrs(label=n["label"], shape="box3d", fillcolor=n["color"], id=n["id"], tooltip=n["label"], URL=n["url"], target="_top",
                     **{"class": "call kind-group"})
    else:
      href = f"{trace_url}/k/{n['kernel']}" if n.get("kernel") is not None else None
      attrs = _attrs(label=n["label"], shape="box", style="filled,rounded", fillcolor=n["color"], id=n["id"], tooltip=n["label"], URL=href,
                     target="_top", **{"class": f"call kind-{n['kind']}"})
    out.append(f"  {_q(n['id'])} [{attrs}];")
  out += [f"  {_q(e['src'])} -> {_q(e['dst'])};" for e in graph["edges"]]
  out.append("}")
  return "\n".join(out)

# ***** running dot *****

_PROLOG_RE = re.compile(r"^.*?(?=<svg)", re.S)
_SIZE_RE = re.compile(r'<svg width="[^"]*" height="[^"]*"')

def _graphviz(tool: str, dot_src: str, timeout_s: float, *args: str) -> dict[str, str]:
  """Run a graphviz tool once and render its layout as SVG and as plain text (node positions). Returns {"svg", "plain"}."""
  exe = shutil.which(tool)
  if exe is None: raise LayoutError(f"graphviz `{tool}` is not installed on the server (Debian: apt-get install graphviz)")
  with tempfile.TemporaryDirectory(prefix="ke-layout-") as tmp:
    out = {fmt: os.path.join(tmp, f"out.{fmt}") for fmt in ("svg", "plain")}
    try: proc = subprocess.run([exe, *args, "-Tsvg", "-o", out["svg"], "-Tplain", "-o", out["plain"]], input=dot_src.encode(),
                               capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
      raise LayoutError(f"graphviz {tool} did not finish the layout within {timeout_s:.0f}s; the graph is too large to draw") from None
    if proc.returncode != 0:
      raise LayoutError(f"graphviz {tool} failed (exit {proc.returncode}): {proc.stderr.decode(errors='replace').strip().splitlines()[-1:] or ''}")
    return {fmt: open(path, encoding="utf-8", errors="replace").read() for fmt, path in out.items()}

def _clean_svg(svg: str) -> str:
  """Without XML prolog, comments and fixed size: ready to inline and to pan/zoom."""
  svg = _PROLOG_RE.sub("", svg, count=1)
  svg = re.sub(r"<!--.*?-->\n?", "", svg, flags=re.S)
  return _SIZE_RE.sub('<svg class="graph-svg" width="100%" height="100%"', svg, count=1)

def node_positions(plain: str) -> dict[str, tuple[float, float]]:
  """Node centers in points from graphviz's plain output (`node NAME X Y W H ...`, inches)."""
  return {k: (x, y) for k, (x, y, _, _) in node_boxes(plain).items()}

def node_boxes(plain: str) -> dict[str, tuple[float, float, float, float]]:
  """Node centers and sizes in points from graphviz's plain output."""
  out = {}
  for line in plain.splitlines():
    parts = line.split()
    if len(parts) >= 6 and parts[0] == "node":
      x, y, w, h = (float(v) * 72 for v in parts[2:6])
      out[parts[1].strip('"')] = (x, y, w, h)
  return out

def layout_svg(dot_src: str, timeout_s: float = DOT_TIMEOUT_S) -> str:
  """Run graphviz dot: the SVG, ready to inline."""
  return layout(dot_src, timeout_s)[0]

def layout(dot_src: str, timeout_s: float = DOT_TIMEOUT_S) -> tuple[str, dict[str, tuple[float, float]]]:
  """dot's layout: the SVG and each node's center in points."""
  got = _graphviz("dot", dot_src, timeout_s)
  return _clean_svg(got["svg"]), node_positions(got["plain"])

def _unoverlap(pos: dict[str, tuple[float, float]], sizes: dict[str, tuple[float, float]], fixed: set[str], gap: float = 6) -> None:
  """Move the nodes not in `fixed` right, one by one from the top, until none overlaps a node placed before it."""
  def size(i: str) -> tuple[float, float]: return sizes.get(i, (40, 20))  # a node dot did not report: a small box
  placed = [i for i in pos if i in fixed]
  for i in sorted((i for i in pos if i not in fixed), key=lambda i: (-pos[i][1], pos[i][0])):
    x, y = pos[i]
    w, h = size(i)
    for _ in range(400):
      hit = next((j for j in placed if abs(pos[j][0] - x) < (w + size(j)[0]) / 2 + gap
                  and abs(pos[j][1] - y) < (h + size(j)[1]) / 2 + gap), None)
      if hit is None: break
      x = pos[hit][0] + (w + size(hit)[0]) / 2 + gap + 0.5  # a little past the limit: rounding must not keep it touching
    pos[i] = (x, y)
    placed.append(i)

# ***** stable layout: stepping from one graph to the next, the UOps both hold keep their place (after SpiderMonkey's iongraph) *****

def _anchored(graph: Graph, fresh: dict[str, tuple[float, float]], anchor: dict[int, tuple[float, float]]) -> dict[str, tuple[float, float]]:
  """Where each node goes: a UOp the previous graph held (same trace number) where it was; a new one where dot put it relative to
  its nearest such neighbour (so it lands beside what it replaced); with no such neighbour, dot's place shifted as the survivors are."""
  at = {n["id"]: anchor[num] for n in graph["nodes"] if (num := trace_num(n)) in anchor and n["id"] in fresh}
  if not at: return fresh
  shift_x = sum(at[i][0] - fresh[i][0] for i in at) / len(at)
  shift_y = sum(at[i][1] - fresh[i][1] for i in at) / len(at)
  near: dict[str, list[str]] = collections.defaultdict(list)
  for e in graph["edges"]:
    near[e["src"]].append(e["dst"])
    near[e["dst"]].append(e["src"])
  def nearest_kept(i: str) -> str | None:
    seen, frontier = {i}, [i]
    for _ in range(4):  # breadth first, a few steps out
      frontier = [m for f in frontier for m in near[f] if m not in seen]
      seen.update(frontier)
      if (hit := next((m for m in frontier if m in at), None)) is not None: return hit
    return None
  out = {}
  for i, (x, y) in fresh.items():
    if i in at: out[i] = at[i]
    elif (hit := nearest_kept(i)) is not None: out[i] = (at[hit][0] + x - fresh[hit][0], at[hit][1] + y - fresh[hit][1])
    else: out[i] = (x + shift_x, y + shift_y)
  return out

def stable_layout(graph: Graph, dot_src: str, anchor: dict[int, tuple[float, float]], timeout_s: float = DOT_TIMEOUT_S) \
    -> tuple[str, dict[str, tuple[float, float]]]:
  """Lay graph out so the UOps it shares with the previous graph (anchor: trace number -> center, points) keep their place: dot
  places everything, each node is moved to its anchored place (_anchored), new nodes are pushed off the ones placed before them
  (_unoverlap), and neato draws them there and routes the edges. Returns the SVG and the final centers."""
  boxes = node_boxes(_graphviz("dot", dot_src, timeout_s)["plain"])
  fresh = {k: (x, y) for k, (x, y, _, _) in boxes.items()}
  pos = _anchored(graph, fresh, anchor)
  kept = {n["id"] for n in graph["nodes"] if trace_num(n) in anchor}
  _unoverlap(pos, {k: (w, h) for k, (_, _, w, h) in boxes.items()}, kept)
  pinned = re.sub(r'^  "([^"]+)" \[', lambda m: f'  "{m.group(1)}" [pos="{pos[m.group(1)][0]:.1f},{pos[m.group(1)][1]:.1f}!", '
                  if m.group(1) in pos else m.group(0), dot_src, flags=re.M)
  # neato routes splines around every node, which grows fast with the graph: straight edges past STABLE_SPLINE_NODES
  splines = "true" if len(graph["nodes"]) <= STABLE_SPLINE_NODES else "line"
  pinned = pinned.replace("digraph G {", f'digraph G {{\n  graph [splines="{splines}"];', 1)
  got = _graphviz("neato", pinned, timeout_s, "-n2")  # positions as given, edges routed around the nodes
  return _clean_svg(got["svg"]), node_positions(got["plain"])

def escape(s: str) -> str: return html.escape(s, quote=True)
