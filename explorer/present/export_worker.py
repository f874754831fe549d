"""The half of explorer.present.export that needs tinygrad: called through call_in_worker (with VIZ=0)."""
from __future__ import annotations
from typing import Any
from explorer.tracing import tg  # (its package sets tinygrad's environment before it imports tinygrad)

def sink_graphs(progress: Any, blob: bytes, sinks: list[int]) -> dict[int, dict[str, Any]]:
  """The UOp graphs ({nodes, edges}) of recorded sinks, rebuilt from a trace's rewrite blob, by trace number."""
  b = tg.RewriteBlob(blob)
  return {n: b.graph_of(n) for n in sinks}
