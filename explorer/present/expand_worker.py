"""Graph expansion, run in the graph worker processes (a spawn-context ProcessPoolExecutor), never in the server process:
rebuilding a graph from a trace's rewrite blob imports tinygrad (through explorer.tracing.tg) and is CPU-heavy.
Each worker keeps the last few loaded blobs, so stepping through one trace's passes loads its blob once."""
from __future__ import annotations
import collections
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
  from explorer.tracing.tg import RewriteBlob

BLOBS_KEPT = 2
_blobs: collections.OrderedDict[tuple[str, str, str | None], RewriteBlob] = collections.OrderedDict()

class BlobUnreadable(RuntimeError):
  """The stored rewrite blob does not load with this process's tinygrad (recorded by another version, or damaged)."""

def init_worker() -> None:
  """Before tinygrad is imported: no rewrite tracking here (VIZ=0), graph rebuilding only replays what a trace recorded."""
  os.environ["VIZ"] = "0"

def _blob(db_path: str, trace_id: str, target: str | None = None) -> RewriteBlob:
  """The trace's rewrite blob: the host's, or (target) the one that target's codegen process recorded."""
  key = (db_path, trace_id, target)
  if key in _blobs:
    _blobs.move_to_end(key)
    return _blobs[key]
  from explorer.store import Store
  from explorer.tracing.tg import TINYGRAD_VERSION, RewriteBlob
  data = Store(db_path).get_rewrites(trace_id, target)
  if data is None: raise LookupError(f"trace {trace_id} has no stored rewrites" + (f" for {target}" if target else ""))
  try: _blobs[key] = RewriteBlob(data)
  except Exception as e:
    raise BlobUnreadable(f"tinygrad {TINYGRAD_VERSION} cannot load the stored rewrites of trace {trace_id} "
                         f"({type(e).__name__}: {str(e)[:200]})") from None
  while len(_blobs) > BLOBS_KEPT: _blobs.popitem(last=False)
  return _blobs[key]

def sink_graph(db_path: str, trace_id: str, sink: int, compare_sink: int | None = None, target: str | None = None,
               marks: list[int] | None = None) -> dict[str, Any]:
  """The graph of one recorded sink; with compare_sink, the ids of nodes it has that compare_sink's graph lacks; with marks (trace
  numbers), the ids of those UOps ("marked"). Node ids are object ids: comparable only inside this process, while the blob holds the
  rebuilt UOps alive."""
  blob = _blob(db_path, trace_id, target)
  graph = blob.graph_of(sink)
  marked = [i for i in blob.node_ids(marks or []) if i in {n["id"] for n in graph["nodes"]}]
  new = None
  if compare_sink is not None:
    before = {n["id"] for n in blob.graph_of(compare_sink)["nodes"]}
    new = [n["id"] for n in graph["nodes"] if n["id"] not in before]
  return {"graph": graph, "new": new, "marked": marked}

def match_steps(db_path: str, trace_id: str, group: int, step: int, start: int, stop: int, target: str | None = None) -> list[dict[str, Any]]:
  """Steps start..stop (0: before the pass, j: after its j-th match) of one pass; each with the ids it changed and the rule.
  Replaying matches is quadratic in graph size, so callers fetch a window and cache it."""
  blob = _blob(db_path, trace_id, target)
  ret, first_ids = [], None
  for j, st in enumerate(blob.pass_steps(group, step, stop)):
    if j == 0: first_ids = {n["id"] for n in st["graph"]["nodes"]}
    if j < start: continue
    if j > stop: break
    new = [n["id"] for n in st["graph"]["nodes"] if n["id"] not in first_ids] if first_ids is not None else []
    ret.append({"index": j, "graph": st["graph"], "changed": st["changed"], "new": new, "rule": st["rule"],
                "diff": [ln.rstrip("\n") for ln in st["diff"]] if st["diff"] else None})
  return ret

def pass_matches(db_path: str, trace_id: str, group: int, step: int, offset: int, limit: int, target: str | None = None) -> dict[str, Any]:
  """One page of a pass's matches (explorer.tracing.tg.RewriteBlob.matches) and where the pass was called."""
  blob = _blob(db_path, trace_id, target)
  return {**blob.pass_record(group, step), "offset": offset, "matches": blob.matches(group, step, offset, limit)}

def pass_origin(db_path: str, trace_id: str, group: int, num: int, target: str | None = None) -> dict[str, Any]:
  """Which pass (and rule) of a rewrite group made a UOp (explorer.tracing.tg.RewriteBlob.origin)."""
  return _blob(db_path, trace_id, target).origin(group, num)

def pass_origins(db_path: str, trace_id: str, group: int, nums: list[int], target: str | None = None) -> list[dict[str, Any]]:
  """pass_origin of several UOps (a source line's), in one replay."""
  return _blob(db_path, trace_id, target).origins(group, nums)

def pass_python(db_path: str, trace_id: str, sink: int, target: str | None = None) -> dict[str, Any]:
  """The graph a pass started from, as Python (tinygrad's pyrender)."""
  text, cut = _blob(db_path, trace_id, target).python(sink)
  return {"python": text, "cut": cut}

EXPANDERS = {fn.__name__: fn for fn in (sink_graph, match_steps, pass_matches, pass_origin, pass_origins, pass_python)}

def expanded(progress: Any, name: str, args: list[Any]) -> Any:
  """One of the functions above in a worker of its own (call_in_worker, VIZ=0 in its environment): a trace recorded with an older
  tinygrad has its blob loaded in that tinygrad's environment (explorer.tracing.versions), not in the server's graph workers."""
  if name not in EXPANDERS: raise LookupError(f"no graph expansion {name!r}")
  return EXPANDERS[name](*args)
