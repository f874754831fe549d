"""tinygrad reads its tracking and compile settings when it is imported: they are set here, before (explorer.tracing.tg imports this
module first). With VIZ unset every named graph_rewrite is recorded (TRACK_MATCH_STATS=2); codegen compiles in the process that
records it (PARALLEL=0) unless the user set PARALLEL, whose value BEAM's search uses (tg.opts.beam_parallel)."""
import os
if "VIZ" not in os.environ: os.environ.setdefault("TRACK_MATCH_STATS", "2")
USER_PARALLEL = os.environ.get("PARALLEL")
os.environ.setdefault("PARALLEL", "0")
