"""Export a trace: as JSON (the trace exactly as stored, with its annotations) or as ONE self-contained HTML file that opens offline:
summary (and what the file holds), kernel table, bufferize tables, the tensor graph, kernel graph and every kernel's AST as inline SVG,
each kernel's source and compile facts per target (the trace's own targets and those computed since: the store merges them into the
trace it reads, as for the pages), the roofline, timings and annotations. CSS and JS are inlined; nothing refers to a server, a CDN
or another file.

No tinygrad here. The web server hands over graphs laid out by its GraphService (and cache); the command line takes cached layouts
from the store and expands the rest from the rewrite blob in a worker (explorer.present.export_worker), laid out with the local graphviz.
"""
from __future__ import annotations
import datetime
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NotRequired, cast
from typing_extensions import TypedDict
from explorer.present import graphs
from explorer.present.tour import told_kernels
from explorer.schema import KernelRecord, TraceRecord, target_record
from explorer.store.keys import trace_path
from explorer.targets import TARGETS
from explorer.version import __version__

class GraphBlock(TypedDict):
  """One graph of an export: laid out (svg) or the reason it is not (error), what was left out of it (notes) and its node counts."""
  ref: str
  title: str
  svg: str | None
  notes: list[str]
  error: str | None
  shown_nodes: int
  total_nodes: int
  legend: NotRequired[list[dict[str, Any]]]  # a drawn graph's
  rejected: NotRequired[int]                 # a cached view's: the UOps tinygrad's spec rejected
  whole: NotRequired[dict[str, Any]]         # a graph over the node limit: every node, drawn on a canvas in the file (whole_drawing)

WHOLE_FIELDS = ("nodes", "edges", "groups", "highlight", "violations", "downstream")

def whole_drawing(view: Mapping[str, Any]) -> dict[str, Any]:
  """What a file needs to draw a graph whole as the pages do (static/big_graph.js): its nodes, edges, groups and marks."""
  return {k: view.get(k) or [] for k in WHOLE_FIELDS}

def drawable(view: Any) -> bool:
  """A cached whole view fit to draw (it comes from the store: a damaged row is laid out anew instead)."""
  return isinstance(view, dict) and isinstance(view.get("nodes"), list) and isinstance(view.get("edges"), list) and \
    isinstance(view.get("groups"), list) and all(isinstance(n, dict) and "id" in n for n in view["nodes"])

def whole_block(ref: str, title: str, view: Mapping[str, Any], legend: list[dict[str, Any]]) -> GraphBlock:
  """An export graph over the node limit, whole: laid out when the file opens and drawn on a canvas, grouped (no SVG, nothing cut)."""
  n = len(view["nodes"])
  return {"ref": ref, "title": title, "svg": None, "error": None, "shown_nodes": n, "total_nodes": n, "legend": legend,
          "rejected": len(view.get("violations") or []), "whole": whole_drawing(view),
          "notes": [f"All {n:,} nodes, laid out when this file opens and drawn on a canvas, in groups: a click on a group opens it in place."]}

def graph_refs(trace: TraceRecord) -> list[str]:
  """The graphs an export draws: the tensor graph (when recorded), the kernel graph, each kernel's AST (a big program's: the kernels its
  tour tells, the heaviest)."""
  refs = ["tensor"] if (g := trace["tensor_graph"]) and g["sink"] else []
  return refs + ["kernels"] + [f"ast/{n}" for n in told_kernels(trace)]

def annotations_of(store: Any, trace_id: str) -> list[dict[str, Any]]:
  """The annotations hook: the notes the store keeps for this trace (Store.annotations), [] where it keeps none."""
  fn = getattr(store, "annotations", None)
  if store is None or fn is None: return []
  try: return list(fn(trace_id))
  except Exception: return []  # an export never fails over its notes

def export_json(trace: TraceRecord | dict[str, Any], annotations: list[dict[str, Any]] | None = None) -> str:
  """The trace as stored (what `trace --json` writes and `diff`/`export` read back), plus its annotations when it has any."""
  return b"".join(export_json_pieces(trace, [trace.get("kernels") or []], annotations)).decode()

def export_json_pieces(trace: Mapping[str, Any], kernels: Iterable[list[Any]], annotations: list[dict[str, Any]] | None = None,
                       per: int = 50) -> Iterator[bytes]:
  """export_json's document a piece at a time, laid out as json.dumps(indent=1, ensure_ascii=False) lays it out (pydantic-core writes
  it: a float reads back the same, written 1.8e-05 or 0.000018): the trace's fields in their order, its kernels (at their place) as
  `kernels` yields them, in pieces of `per` kernels. A big program's export streams its kernels
  a chunk at a time from the store (explorer.store's whole_kernels), never whole in memory: 10,000 kernels were 2 GB."""
  doc = {**trace, "annotations": annotations} if annotations else trace
  if not doc:
    yield b"{}"
    return
  for n, key in enumerate(doc):
    yield (b"{\n " if n == 0 else b",\n ") + _json(key) + b": "
    if key != "kernels":
      yield _json(doc[key], 1)
      continue
    count, piece = 0, []
    for chunk in kernels:
      for k in chunk:
        piece.append((b"[\n  " if count == 0 else b",\n  ") + _json(k, 2))
        count += 1
        if len(piece) >= per: yield b"".join(piece); piece = []
    yield b"".join(piece) + (b"\n ]" if count else b"[]")
  yield b"\n}"

def _json(value: Any, depth: int = 0) -> bytes:
  """value as JSON laid out with indent=1, nested `depth` levels in."""
  from pydantic_core import to_json
  return to_json(value, indent=1, inf_nan_mode="constants", fallback=str).replace(b"\n", b"\n" + b" " * depth)

# ***** making the HTML self-contained *****

_ID_RE = re.compile(r'\bid="([^"]+)"')
_KERNEL_LINK_RE = re.compile(r'((?:xlink:)?href)="[^"#]*/k/(\d+)"')
_OTHER_LINK_RE = re.compile(r'\s(?:xlink:)?href="(?!#)[^"]*"')

def localize_svg(svg: str, prefix: str) -> str:
  """A server SVG made fit to inline several in one file: ids prefixed (unique), kernel links to the kernel's section, no other links."""
  svg = _ID_RE.sub(lambda m: f'id="{prefix}-{m.group(1)}"', svg)
  svg = _KERNEL_LINK_RE.sub(lambda m: f'{m.group(1)}="#kernel-{m.group(2)}"', svg)
  return _OTHER_LINK_RE.sub("", svg)

def _static(name: str) -> str:
  from explorer.present.render import STATIC_DIR
  return (STATIC_DIR / name).read_text()

WHOLE_MODULES = ("graph_layout.js", "big_graph.js", "whole_graph.js")  # in import order: each imports only those before it
_IMPORT_RE = re.compile(r'^import \{[^}]*\} from "\./[\w.]+";\n', re.M)

def inline_module(names: Iterable[str]) -> str:
  """The pages' ES modules as one inline module script: their imports of each other dropped, their exports made plain names (a file
  has no other module to load them from)."""
  text = "\n".join(_IMPORT_RE.sub("", _static(n)).replace("\nexport ", "\n") for n in names)
  assert "</script" not in text.lower(), "an inline script may not close its tag"
  return text

def inline_assets() -> dict[str, str]:
  from explorer.present.render import pygments_css
  return {"css": _static("explorer.css") + "\n" + pygments_css(), "panzoom": _static("vendor/svg-pan-zoom-3.6.2.min.js"),
          "whole": inline_module(WHOLE_MODULES)}

MAX_SECTIONS = 200  # distinct kernels an HTML export gives a section (source per target, UOps, AST): its JSON export has every kernel

def sections_of(trace: TraceRecord) -> tuple[list[int], dict[int, int], int]:
  """The kernels an HTML export gives a section of their own: every one, up to MAX_SECTIONS kernels; a bigger program's first of each
  distinct kernel (its AST and opts, the same code, made by the same lines: its repeated steps), in schedule order, at most
  MAX_SECTIONS. Returns (their indexes, each kernel's section: its own or its first's, where it has one, how many distinct kernels have
  none)."""
  def same(k: KernelRecord) -> tuple[Any, ...]:
    return (k.get("ast_key") or f"#{k['index']}", tuple(k["opts"]), tuple((e["fn"], e["file"], e["line"]) for e in k.get("provenance", [])))
  if len(ks := trace["kernels"]) <= MAX_SECTIONS: return [k["index"] for k in ks], {k["index"]: k["index"] for k in ks}, 0
  first: dict[tuple[Any, ...], int] = {}
  for k in ks: first.setdefault(same(k), k["index"])
  shown = sorted(first.values())[:MAX_SECTIONS]
  has = set(shown)
  section = {k["index"]: s for k in ks if (s := first[same(k)]) in has}
  return shown, section, len(first) - len(shown)

def holdings(trace: TraceRecord) -> dict[str, Any]:
  """What an export holds per target some kernel has a record of (host first): how many kernels have its source, failed it, have its
  compile facts; and the targets no kernel has (not computed: a kernel's page computes one on first view). The trace may be read light."""
  from explorer.present.render import rendered_targets
  ks = trace["kernels"]
  def source(k: KernelRecord, t: str) -> bool:  # the host's is under "host"
    name = "host" if t == k["host_target"] else t
    return name in k["light"]["sources"] if "light" in k else bool(k["sources"].get(name))
  rows = [{"target": t, "host": any(t == k["host_target"] for k in ks), "sources": sum(1 for k in ks if source(k, t)),
           "failed": sum(1 for k in ks if t in k["source_errors"]),
           "facts": sum(1 for k in ks if (rec := target_record(k, t)) and rec["compile"])} for t in rendered_targets(trace)]
  return {"kernels": len(ks), "targets": rows, "missing": [t for t in TARGETS if t not in {r["target"] for r in rows}]}

NO_ROOFLINE = {"rl": None, "svg": None, "why": "not computed for this file", "rate": None}

def render_html(trace: TraceRecord, trace_id: str, graph_blocks: dict[str, GraphBlock], annotations: list[dict[str, Any]] | None = None,
                origin: str = "", roofline: dict[str, Any] | None = None, sections: list[KernelRecord] | None = None) -> str:
  """The standalone page. graph_blocks: by graph reference (graph_refs), each laid out or with the reason it is not; roofline: what
  explorer.analysis.roofline.export_block made of the trace (the caller's: presentation does not import analysis); sections: the
  kernels of sections_of, whole (None: the trace's own, read whole; a server reads the trace light and these kernels whole)."""
  from markupsafe import Markup
  from explorer.present.render import environment
  env = environment()
  roof = roofline or NO_ROOFLINE
  blocks = {ref: {**b, "svg": Markup(localize_svg(b["svg"], "g" + re.sub(r"\W", "-", ref))) if b["svg"] else None}
            for ref, b in graph_blocks.items()}
  assets = {k: Markup(v) for k, v in inline_assets().items()}
  exported = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
  shown, section, left_out = sections_of(trace)
  whole = sections if sections is not None else [trace["kernels"][i] for i in shown]
  return env.get_template("export.html").render(trace=trace, trace_id=trace_id, graphs=blocks, annotations=annotations or [],
                                                sections=whole, section=section, left_out=left_out, max_sections=MAX_SECTIONS,
                                                assets=assets, exported=exported, origin=origin, version=__version__,
                                                holds=holdings(trace), rl=roof["rl"], no_roofline=roof["why"],
                                                svg=Markup(roof["svg"]) if roof["svg"] else None, rate=roof["rate"])

# ***** the command line: graphs from the store's cache, else expanded in a worker and laid out here *****

def load(arg: str, db: str | None = None) -> tuple[TraceRecord, str, bytes | None, Any]:
  """(trace, id, rewrite blob or None, store or None) for a JSON trace file or a stored trace id."""
  from explorer.store import find_stored, load_trace_file
  if os.path.isfile(arg): return load_trace_file(arg), os.path.splitext(os.path.basename(arg))[0], None, None
  store, trace, blob = find_stored(arg, db, f"{arg!r} is not a trace file")
  return trace, arg, blob, store

def local_graphs(trace: TraceRecord, trace_id: str, blob: bytes | None, store: Any = None, node_limit: int = graphs.MAX_NODES,
                 timeout_s: float = 600.0, say: Callable[[str], None] = lambda s: None) -> dict[str, GraphBlock]:
  """Every export graph: the server's cached layout where the store has one, else built here (UOp graphs from the blob, in a worker)."""
  from explorer.present.graph_refs import graph_title, parse_ref
  out: dict[str, GraphBlock] = {}
  missing: dict[str, int] = {}
  for ref in graph_refs(trace):
    title = graph_title(trace, parse_ref(ref))
    view = store.get_cached_json(trace_id, ref, "view") if store is not None else None
    svg = store.get_cached(trace_id, ref, "svg") if store is not None else None
    whole = store.get_cached_json(trace_id, f"{ref}+whole", "view") if store is not None else None
    if whole is not None and drawable(whole): out[ref] = whole_block(ref, str(whole.get("title") or title), whole, whole.get("legend") or [])
    elif view is not None and svg is not None and not view.get("partial"):
      out[ref] = {"ref": ref, "title": view["title"], "svg": svg, "notes": view.get("notes", []), "error": None,
                  "shown_nodes": view["shown_nodes"], "total_nodes": view["total_nodes"], "legend": view.get("legend") or [],
                  "rejected": len(view.get("violations") or [])}
    elif ref == "kernels": out[ref] = _laid_out(ref, title, graphs.kernel_graph(trace, whole=True), node_limit, trace_id, trace)
    elif blob is None: out[ref] = _failed(ref, title, "no rewrite blob (a JSON trace file keeps none): export a stored trace id for its UOp graphs")
    elif (sink := _sink(trace, ref)) is None:
      out[ref] = _failed(ref, title, "the trace recorded no graph here")
    else: missing[ref] = sink
  if missing:
    say(f"expanding {len(missing)} graph(s) from the rewrite blob")
    from explorer.tracing import versions
    from explorer.tracing.workers.process import WorkerFailed, call_in_worker
    why = ""
    try:
      got, _ = call_in_worker("explorer.present.export_worker:sink_graphs", {"blob": blob, "sinks": sorted(set(missing.values()))},
                              timeout_s=timeout_s, env={"VIZ": "0"}, tinygrad=versions.recorded(trace))
    except WorkerFailed as e: got, why = {}, f"the rewrite blob could not be expanded here: {e}"
    for ref, sink in missing.items():
      title = graph_title(trace, parse_ref(ref))
      out[ref] = _laid_out(ref, title, got[sink], node_limit, trace_id, trace) if sink in got else _failed(ref, title, why)
  return {ref: out[ref] for ref in graph_refs(trace)}

def _sink(trace: TraceRecord, ref: str) -> int | None:
  """The trace number of the UOp graph an export reference draws: the tensor graph's sink, or a kernel's AST's."""
  if ref == "tensor": return g["sink"] if (g := trace["tensor_graph"]) else None
  return trace["kernels"][int(ref.split("/")[1])]["ast_sink"]

def _failed(ref: str, title: str, why: str) -> GraphBlock:
  return {"ref": ref, "title": title, "svg": None, "notes": [], "error": why, "shown_nodes": 0, "total_nodes": 0}

def _laid_out(ref: str, title: str, raw: graphs.Graph, node_limit: int, trace_id: str, trace: TraceRecord) -> GraphBlock:
  """A graph laid out by graphviz as SVG, or, over the node limit, whole (as a page's ?whole=1 view: grouped, drawn in the file)."""
  legend_of = graphs.kernel_graph_legend if ref == "kernels" else graphs.legend
  if len(raw["nodes"]) > node_limit:
    from explorer.present.graph_groups import grouped
    from explorer.present.graph_refs import parse_ref
    groups = grouped(parse_ref(ref).kind, raw, trace)
    return whole_block(ref, title, {**raw, "groups": groups}, legend_of(raw))
  dot = graphs.kernel_graph_dot(raw, trace_path(trace_id)) if ref == "kernels" else graphs.uop_dot(raw, set(), title)
  try: svg = graphs.layout_svg(dot)
  except graphs.LayoutError as e: return {**_failed(ref, title, str(e)), "total_nodes": len(raw["nodes"])}
  return {"ref": ref, "title": title, "svg": svg, "notes": [], "error": None, "shown_nodes": len(raw["nodes"]), "total_nodes": len(raw["nodes"]),
          "legend": legend_of(raw)}

def export_file(arg: str, fmt: str = "html", db: str | None = None, timeout_s: float = 600.0, say: Callable[[str], None] = lambda s: None,
                roofline: Callable[[TraceRecord], dict[str, Any]] | None = None) -> str:
  """The export of a stored trace id or a JSON trace file, as text; roofline: analysis.roofline.export_block, from the caller."""
  trace, trace_id, blob, store = load(arg, db)
  file_notes = cast(dict[str, Any], trace).get("annotations")  # a trace file may carry the annotations its export wrote (no field of TraceRecord)
  notes = annotations_of(store, trace_id) if store is not None else list(file_notes or [])
  if fmt == "json": return export_json({k: v for k, v in trace.items() if k != "annotations"}, notes)
  return render_html(trace, trace_id, local_graphs(trace, trace_id, blob, store, timeout_s=timeout_s, say=say), notes,
                     origin=f"stored trace {trace_id}" if store is not None else f"trace file {arg}", roofline=roofline and roofline(trace))
