"""Real tiny traces in a real store, made once per test run (support.made_once) and shared by the library, export and diff tests:
the explorer's Winograd F(4,3) on a 1x2->2 8x8 convolution, staged and fused (CUDA and Metal sources, 3 timed repeats)."""
from __future__ import annotations
import atexit
import dataclasses
import pathlib
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from explorer.spec import ConvSpec, Variant

SPEC = ConvSpec(1, 2, 2, 8, 8, 3)
STAGED = Variant(algo="winograd", wino_impl="explorer", targets=("cuda", "metal"), warmup=1, repeats=3)
FUSED = dataclasses.replace(STAGED, staging="fused")
_made: dict[str, object] = {}

def request_body(variant: Variant) -> dict:
  """The web API's request for SPEC with this variant."""
  v = {k: val for k, val in variant.to_dict().items() if k not in ("notes", "device")}
  return {"spec": SPEC.to_dict(), "variant": {**v, "targets": list(variant.targets)}}

def stored_pair() -> tuple[pathlib.Path, str, str]:
  """(database, staged id, fused id): a store of this process's own, with the run's two traces (traced in two workers at once by the
  first process to ask)."""
  if not _made:
    from support import made_once
    from explorer.store import Store, trace_key
    from explorer.tracing.pipeline.run import run_trace
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="ke-stored-"))
    atexit.register(shutil.rmtree, tmp, True)
    db, store = tmp / "traces.sqlite3", None
    store = Store(db)
    with ThreadPoolExecutor(2) as pool:
      runs = list(pool.map(lambda v: made_once(trace_key(SPEC, v), lambda: run_trace(SPEC, v)), (STAGED, FUSED)))
    for v, r in zip((STAGED, FUSED), runs, strict=False): store.put_trace(trace_key(SPEC, v), r.trace, r.rewrites, r.target_rewrites)
    _made.update(db=db, staged=trace_key(SPEC, STAGED), fused=trace_key(SPEC, FUSED))
  return _made["db"], _made["staged"], _made["fused"]  # type: ignore[return-value]

def copy_trace(db: pathlib.Path, src: str, dst: str, rewrites: bytes | None = None, **env: str) -> dict:
  """Store a copy of trace src under id dst (its env changed as given, its rewrite blob replaced if given)."""
  from explorer.store import Store
  s = Store(db)
  trace = s.get_trace(src)
  trace = {**trace, "env": {**trace["env"], **env}}
  s.put_trace(dst, trace, rewrites if rewrites is not None else s.get_rewrites(src))
  return trace
