"""tinygrad reads its tracking and compile settings when it is imported: they are set here, before (explorer.tracing.tg imports this
module first). With VIZ unset every named graph_rewrite is recorded (TRACK_MATCH_STATS=2); codegen compiles in the process that
records it (PARALLEL=0) unless the user set PARALLEL, whose value BEAM's search uses (tg.opts.beam_parallel)."""
import os
from explorer.tracing import versions  # (imports no tinygrad)

if "VIZ" not in os.environ: os.environ.setdefault("TRACK_MATCH_STATS", "2")
USER_PARALLEL = os.environ.get("PARALLEL")
os.environ.setdefault("PARALLEL", "0")

if _asked := os.environ.get(versions.TINYGRAD_VAR):  # a worker of an older tinygrad: that one, or none (never the server's in its place)
  import importlib.util
  import pathlib
  _found, _env = importlib.util.find_spec("tinygrad"), versions.environment(_asked)
  if _env.state != "ready" or _env.path is None or _found is None or _found.origin is None or \
     not pathlib.Path(_found.origin).is_relative_to(versions.site_packages(_env.path)):
    raise ImportError(f"this worker was to run tinygrad {_asked} and would import {_found.origin if _found else 'none'}: its environment is "
                      f"{_env.state} ({versions.STATES[_env.state]}): kernel-explorer versions --make {_asked}")
