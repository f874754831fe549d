"""What many tests share: an app over a store file with settings from the arguments alone (never the environment), the app's routes
walked whole (FastAPI includes routers lazily, so app.routes alone lists them as _IncludedRouter wrappers, not as routes), each GET's
path filled with real arguments; and the traces a test run makes once for all its processes."""
from __future__ import annotations
import asyncio
import contextlib
import copy
import fcntl
import json
import os
import pathlib
import re
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
  from explorer.settings import Settings

def app_over(db: str | os.PathLike, runner: Any = None, devices: Any = None, study_runner: Any = None, graph_workers: int = 1,
             settings: Settings | None = None, **fields: Any) -> Any:
  """The app over the SQLite file db; fields: Settings fields (max_workers=1...), the rest their defaults whatever the environment says,
  but no background enrichment (background_workers=0) and no target rendered beside each trace (render_beside=0) unless a test asks
  for it: a worker after every stored trace, or a render process beside it, would load the suite's two cores for nothing; and no parse
  frozen out of the garbage collector (freeze_parsed_mb=0) unless a test asks for it: a test process runs many apps, and what one
  froze of another's (its SQLite connections) would wait for its thaw. Or settings: the app's whole Settings, as a test built it (one
  its runner reads too). runner and study_runner replace the trace and study runs (tests count or fake them)."""
  from explorer.settings import Settings
  from explorer.web.app import create_app
  assert settings is None or not fields, "app_over takes a Settings or its fields, not both"
  settings = settings or Settings.load(env={}, **{"background_workers": 0, "render_beside": 0, "freeze_parsed_mb": 0, **fields})
  return create_app(str(db), settings=settings, runner=runner, devices=devices, study_runner=study_runner, graph_workers=graph_workers)

def copy_store(src: str | os.PathLike, dst: str | os.PathLike) -> None:
  """A copy of the store src (its write-ahead log folded in) at dst, made by SQLite's backup. Never copy a store as a file: closing
  any descriptor of a file drops every POSIX lock the process holds on it, so a process with the store open that copies it with
  shutil loses its locks; another process closing its last connection then checkpoints and deletes the log under this one's
  (SQLITE_IOERR_SHORT_READ, or writes into the deleted log lost: the CI failures of stop 80)."""
  import sqlite3
  with contextlib.closing(sqlite3.connect(src)) as source, contextlib.closing(sqlite3.connect(dst)) as copied: source.backup(copied)

def minimal_trace(spec: Any = None, variant: Any = None, label: str | None = None) -> dict[str, Any]:
  """A stored trace of nothing: every stage done in no time, no kernels. What a fake runner returns, so that jobs finish at once and no
  test process imports tinygrad; spec and variant: a ConvSpec and a Variant (the small preset and the default variant otherwise)."""
  from explorer.spec import PRESETS, Variant
  from explorer.stages import STAGES
  spec, variant = spec or PRESETS["small"], variant or Variant()
  return {"schema": 2, "spec": spec.to_dict(), "preset": None, "variant": variant.to_dict(), "label": label or f"{spec.label()} | {variant.label()}",
          "status": "ok", "env": {"device": "CPU", "tinygrad": "0.14.0", "host": "fake", "python": "3.11", "created": "now"}, "failures": [],
          "notes": [], "stage_seconds": dict.fromkeys(STAGES, 0.0), "tensor_graph": None, "scheduler": None, "schedule": [], "buffers": [],
          "kernels": [], "totals": {"kernels": 0, "buffers": 0, "copies": 0, "flops": 0, "bytes": 0, "compile_s": 0, "codegen_s": 0, "time_s": None},
          "error": None}

def fake_result(trace: dict[str, Any]) -> Any:
  """A run's result as run_trace returns it (explorer.tracing.pipeline.run.TraceResult), of this trace and no rewrite blob."""
  from explorer.tracing.pipeline.run import TraceResult
  return TraceResult(trace, b"")

def routes(app: Any) -> Iterator[Any]:
  """Every route of the app, included routers' too (fastapi.routing.iter_route_contexts): path, methods, endpoint."""
  from fastapi.routing import iter_route_contexts
  yield from iter_route_contexts(app.routes)

def get_paths(app: Any) -> list[str]:
  """The path of every GET route (docs and static files aside), as declared: /api/traces/{trace_id}/kernels/{n}..."""
  return sorted({r.path for r in routes(app) if r.path and "GET" in (r.methods or ()) and not r.path.startswith(("/static", "/docs", "/openapi"))})

def filled(path: str, trace_id: str, **more: str) -> str:
  """path with its parameters filled: the trace (and a diff's both sides) is trace_id, kernel 0, its tensor graph, pass 0/0, the WGSL
  target (one no trace asks for), UOp 1, a diff's timing, the tour "constants" and a class there is none of; `more` overrides any
  of them by name."""
  values = {"trace_id": trace_id, "a": trace_id, "b": trace_id, "n": "0", "ref": "tensor", "group": "0", "step": "0", "target": "wgsl",
            "num": "1", "study_id": "0", "note_id": "1", "kind": "timing" if path.startswith("/api/diff") else "constants",
            "class_id": "no-such-class", **more}
  return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: values[m.group(1)], path)

_shared: dict[str, Any] = {}
GPU_TARGETS = ("cuda", "ptx", "metal", "opencl", "wgsl")
WINO8_BUILTIN = {"algo": "winograd", "targets": GPU_TARGETS, "time": False}  # wino8's builtin Winograd on every GPU target: read by many

def shared_run(preset: str, analysis: bool = False, **variant: Any) -> Any:
  """One trace of (preset, variant), made once per test run (made_once) and shared by the tests that read the same kernels: a
  TraceResult they must not change. analysis: every record's analysis now. The traces here are the suite's most expensive part."""
  from explorer.spec import PRESETS, Variant
  from explorer.store.keys import trace_key
  from explorer.tracing.pipeline.run import run_trace
  name = trace_key(PRESETS[preset], v := Variant(**variant)) + ("-analysed" if analysis else "")
  if name not in _shared: _shared[name] = made_once(name, lambda: run_trace(PRESETS[preset], v, analysis=analysis))
  return _shared[name]

def scaled(trace: dict, at_least: int) -> dict:
  """A program of at least `at_least` kernels: the captured step's realizes repeated, as a longer training loop records them."""
  out = copy.deepcopy(trace)
  for key in ("kernels", "schedule", "buffers", "realizes"): out[key] = []
  k0 = s0 = b0 = 0
  while len(out["kernels"]) < at_least:
    for r in trace["realizes"]: out["realizes"].append({**r, "index": len(out["realizes"]), "kernels": [r["kernels"][0] + k0, r["kernels"][1] + k0],
                                                        "schedule": [r["schedule"][0] + s0, r["schedule"][1] + s0]})
    for k in trace["kernels"]:
      out["kernels"].append({**k, "index": k["index"] + k0, "call": k["call"] + s0, "reads": [b + b0 for b in k["reads"]],
                             "writes": [b + b0 for b in k["writes"]], "realize": k["realize"] + len(out["realizes"]) - len(trace["realizes"])})
    for s in trace["schedule"]:
      out["schedule"].append({**s, "index": s["index"] + s0, "kernel": None if s["kernel"] is None else s["kernel"] + k0,
                              "reads": [b + b0 for b in s["reads"]], "writes": [b + b0 for b in s["writes"]],
                              "realize": s["realize"] + len(out["realizes"]) - len(trace["realizes"])})
    for b in trace["buffers"]:
      out["buffers"].append({**b, "index": b["index"] + b0, "name": f"buf{b['index'] + b0}", "written_by": [c + s0 for c in b["written_by"]],
                             "read_by": [c + s0 for c in b["read_by"]]})
    k0, s0, b0 = len(out["kernels"]), len(out["schedule"]), len(out["buffers"])
  out["totals"] = {**out["totals"], "kernels": len(out["kernels"]), "buffers": len(out["buffers"])}
  return out

# ***** traces made once per test run, shared by its processes (the xdist workers) *****

RUN_DIR_VAR = "KE_TEST_RUN_DIR"  # set by tests/conftest.py before the xdist workers start: the directory they share

def run_dir() -> pathlib.Path:
  return pathlib.Path(os.environ[RUN_DIR_VAR])

COMPILE_CACHE_VAR = "KERNEL_EXPLORER_COMPILE_CACHE"  # explorer.tracing.compilers.compile_cache.CACHE_VAR, named without importing the engine
TINYGRADS_VAR = "KERNEL_EXPLORER_TINYGRADS"  # explorer.tracing.versions.DIR_VAR: the older tinygrads' environments make test made

T = TypeVar("T")

def run_async(coro: Coroutine[Any, Any, T]) -> T:
  """asyncio.run(coro) on a thread of its own: a test process's main thread may hold the session's browser (tests/conftest.py), whose
  Playwright sync API leaves its event loop marked running there, and asyncio.run refuses to start under it."""
  with ThreadPoolExecutor(1) as pool: return pool.submit(asyncio.run, coro).result()

def settings_free_env() -> dict[str, str]:
  """os.environ without the explorer's settings (a server or CLI under test gets only those its test gives it), the run's compile
  cache and older tinygrads kept (tests/conftest.py: else it would use, and fill, the user's own); and without a DEV this process did not start with
  (tinygrad sets it once it picks its default device in a process that imported it, a fixture's included: a server started with it
  keys its traces by CPU, not by the default device, and traces again what the run made once for it)."""
  from explorer.store.keys import DEV_AT_START
  return {k: v for k, v in os.environ.items() if (not k.startswith("KERNEL_EXPLORER_") or k in (COMPILE_CACHE_VAR, TINYGRADS_VAR))
          and (k != "DEV" or DEV_AT_START)}

@contextlib.contextmanager
def _locked(path: pathlib.Path) -> Iterator[None]:
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(path, "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try: yield
    finally: fcntl.flock(f, fcntl.LOCK_UN)

def trace_once(body: dict[str, Any]) -> tuple[str, Any]:
  """The trace of a POST /api/traces body, made once per test run as the app's job makes it (run_trace of the request's spec and
  variant, in a worker): its id, the store's key for the request, and its TraceResult (made_once)."""
  from explorer.store.keys import trace_key
  from explorer.tracing.pipeline.run import run_trace
  from explorer.web.http.deps import stored_request
  spec, variant = stored_request(body)
  key = trace_key(spec, variant)
  return key, made_once(key, lambda: run_trace(spec, variant))

def made_once(name: str, make: Callable[[], Any]) -> Any:
  """make()'s TraceResult, made by the first process of the test run to ask for `name` while the others wait on its lock, and kept as
  the store keeps a trace (its JSON, its rewrite blobs) for the others to read back: every process gets the same JSON-shaped copy."""
  from explorer.tracing.pipeline.run import TraceResult
  kept = run_dir() / "traces" / name
  with _locked(kept.with_suffix(".lock")):
    if not kept.exists():
      result = make()
      (part := kept.with_suffix(".part")).mkdir(parents=True)
      targets = sorted(result.target_rewrites)
      (part / "trace.json").write_text(json.dumps({"trace": result.trace, "progress": result.progress, "targets": targets}))
      (part / "rewrites").write_bytes(result.rewrites)
      for i, target in enumerate(targets): (part / f"rewrites.{i}").write_bytes(result.target_rewrites[target])
      part.rename(kept)
  got = json.loads((kept / "trace.json").read_text())
  return TraceResult(got["trace"], (kept / "rewrites").read_bytes(), [tuple(p) for p in got["progress"]],
                     {t: (kept / f"rewrites.{i}").read_bytes() for i, t in enumerate(got["targets"])})

def seeded(db: str | os.PathLike, body: dict[str, Any]) -> str:
  """The store at db holds the trace of body (trace_once's, stored as a job stores it), so that POSTing body to a server over it
  answers 200 with the stored trace instead of running it again; its id."""
  from explorer.store import Store
  key, result = trace_once(body)
  store = Store(str(db))
  try:
    if not store.has_trace(key): store.put_trace(key, result.trace, result.rewrites, result.target_rewrites)
  finally: store.close()
  return key
