"""What a trace is made of, by name: its stages in order and as pages title them, the partial data a running trace reports, and the
enrichments a stored trace gets when first asked for."""
from __future__ import annotations
from collections.abc import Callable, Mapping
from typing import Any
from explorer.targets import SASS_TARGETS

# the stages of a trace, in order: explorer.tracing.pipeline.trace records them, the web's jobs and the CLI report their progress
TRACE_SCHEMA = 2  # a trace's layout: 2, kernels[i].targets[T], a whole record per target; 1, sources per target only (both are read)
STAGES = ("tensor_graph", "schedule", "kernel_graph", "codegen", "render", "run", "timing")
STAGE_TITLES = {"queue": "Job queue",
                "tensor_graph": "Tensor graph", "schedule": "Schedule (rangeify)", "kernel_graph": "Kernel graph", "codegen": "Codegen",
                "render": "Render targets", "run": "Run + check", "timing": "Timing", "store": "Store",
                "bufferize": "Bufferize decisions"}  # a trace's stages, and what else can fail on its way: as pages name them
Progress = Callable[[str, str, str], None]  # a report of work as it goes: (stage, "start" | "done" | "error", detail)
PARTIAL = "partial"  # the progress "stage" of a running trace's data so far (trace.Recorder.partial): (PARTIAL, what, JSON), not a stage
# enrichments (explorer.tracing.enrichments.enrich): what is computed for a stored trace when first asked for, per kernel, target and kind
ENRICH_FACTS = "facts"        # a record's compile facts
ENRICH_ANALYSIS = "analysis"  # a record's line map, live values, loop splits and program spec (explorer.schema.Analysis)
ENRICH_TARGET = "target"      # a kernel's record on a target the trace did not render
ENRICH_KINDS = (ENRICH_TARGET, ENRICH_ANALYSIS, ENRICH_FACTS)
ANALYSIS_MARK = "pressure"    # a record with this field has its analysis

def lacks_facts(rec: Mapping[str, Any], target: str) -> bool:
  """Whether a record's compile facts are still to compute: none yet, or a CUDA or PTX compile stored before its facts had SASS."""
  facts = rec.get("compile")
  return facts is None or (target in SASS_TARGETS and facts.get("ok") is True and "sass" not in facts)
