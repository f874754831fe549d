"""A program's analysis: what a page asks of a kernel's record beyond what tinygrad made (an enrichment, explorer.tracing.enrichments.enrich)."""
from __future__ import annotations
import typing
from collections.abc import Sequence
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import Ops, UOp
from explorer.tracing.tg.line_maps import line_map, with_lines
from explorer.tracing.tg.loops import loop_splits
from explorer.tracing.tg.recording import LiveLog, Pass
from explorer.tracing.tg.register_pressure import pressure
from explorer.tracing.tg.rewrite_blob import RewriteBlob
from explorer.tracing.tg.specs import spec_check

if typing.TYPE_CHECKING:  # types only: pydantic (the schema's validation) stays out of the worker processes
  from explorer.schema import Analysis

def analysis(lin: list[UOp], sink: UOp, source: str, renderer: Renderer, log: LiveLog | RewriteBlob, passes: Sequence[Pass]) -> Analysis:
  """The line map (source line <-> linear UOps), the live values over the linear order with their lines, the loops "split ranges" cut,
  and tinygrad's program spec over the program's SINK: computed from the program in this process (program_analysis), or from the
  rewrite blob it was recorded in (blob_analysis): both are the same UOps."""
  lines, why = line_map(lin, source, renderer)
  return {"pressure": with_lines(pressure(lin), lines), "line_map": lines, "line_map_note": why, "loop_splits": loop_splits(log, passes),
          "spec": spec_check([sink], "program")}

def program_analysis(prg: UOp, renderer: Renderer, log: LiveLog, passes: Sequence[Pass]) -> Analysis:
  lin = list(next(s for s in prg.src if s.op is Ops.LINEAR).src)
  return analysis(lin, prg.src[0], next((s.arg for s in prg.src if s.op is Ops.SOURCE), ""), renderer, log, passes)

def blob_analysis(blob: RewriteBlob, linear_nums: Sequence[int], sink: int, source: str, renderer: Renderer, passes: Sequence[Pass]) -> Analysis:
  """The analysis of a stored record: its linear UOps and SINK rebuilt from the blob its codegen was recorded in."""
  return analysis([blob.sink(n) for n in linear_nums], blob.sink(sink), source, renderer, blob, passes)
