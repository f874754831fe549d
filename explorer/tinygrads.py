"""The tinygrads a trace may run on, by version, and what a trace on an older one shows or lacks."""
from __future__ import annotations

# the tinygrads a trace may run on: the server's own (pinned in pyproject.toml) and the older ones the seed documents were written
# against, each in an environment of its own (explorer.tracing.versions); older than 0.12 is out of scope
TINYGRAD = "0.14.0"
TINYGRADS = (TINYGRAD, "0.13.0", "0.12.0")
TRACEABLE = TINYGRADS  # the ones the explorer's seam speaks (explorer/tracing/tg/compat.py; 0.12's schedule and runtime: tg/v012.py)
# what a trace on an older tinygrad does not show, in words (its pages say so)
NOT_IN_TINYGRAD = {"0.13.0": ("a spec check of the kernel graph: spec_kernel_graph is tinygrad 0.14's",
                              "BEAM: not built for tinygrad 0.13.0 yet (its search runs 0.14's worker pool)",
                              "hand schedules (opts by hand on a kernel): not built for tinygrad 0.13.0 yet"),
                   "0.12.0": ("a spec check of the kernel graph: spec_kernel_graph is tinygrad 0.14's",
                              "BEAM: not built for tinygrad 0.12.0 yet (its search runs 0.14's worker pool)",
                              "hand schedules (opts by hand on a kernel): not built for tinygrad 0.12.0 yet",
                              "TinyJit's captures in a captured program: 0.12's TinyJit captures ExecItems, not a LINEAR")}
# what a trace on an older tinygrad shows that 0.14 has not, in words
PRE_MATCHER_PASS = ("Renderer.pre_matcher, the codegen notes' hook: each kernel's \"pre_matcher\" pass (the explorer sets the hook so "
                    "that the pass shows where it runs; it matches nothing but a rewrite file placed there)")
ONLY_IN_TINYGRAD = {"0.13.0": (PRE_MATCHER_PASS,),
                    "0.12.0": (PRE_MATCHER_PASS, "cut_store_range (codegen/simplify.py), the codegen notes' loop peeling on constant "
                               "comparisons: each kernel's \"cut store ranges\" pass, which cuts a loop on the CPU where its stores compare "
                               "its range with constants")}

def tinygrad_problem(version: str) -> str | None:
  """Why a trace may not ask for tinygrad `version` (None: it may)."""
  if version in TINYGRADS: return None
  return f"tinygrad {version!r:.20} is not supported; the explorer runs tinygrad {', '.join(TINYGRADS)}"
