"""The Python API: trace a convolution from a script or a notebook, then look at it inline, in a file or in the browser.

    from explorer import capture, trace   # the same names as explorer.api's, loaded on first use (explorer/__init__.py)
    t = trace("small", algo="winograd", targets=("cuda",))  # a preset name, a ConvSpec or its dict; Variant's fields
    t                                    # in Jupyter: the facts, the kernel table, the kernel graph, every kernel's sources
    t.save("t.json")                     # the trace JSON, as `kernel-explorer trace --json` writes it
    t.store()                            # into the explorer's SQLite store: its permalink id
    t.open()                             # stored, then shown in the browser (a local server is started if none answers)
    t.diff(trace("small", algo="direct"))   # kernels matched by role and data flow, sources and metrics compared

`trace` runs in a worker process, as the CLI does. `capture` records any tinygrad program in this process: tinygrad decides at import
whether it records rewrites, so importing this module before tinygrad turns its recording on (TRACK_MATCH_STATS=2, for the whole
process: tinygrad then keeps every rewrite it makes, which costs memory and about twice the codegen time; and it compiles in this
process, PARALLEL=0, as tinygrad itself does whenever it tracks).
"""
from __future__ import annotations
import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.request
import webbrowser

if "tinygrad" not in sys.modules and "VIZ" not in os.environ:
  os.environ.setdefault("TRACK_MATCH_STATS", "2")
  os.environ.setdefault("PARALLEL", "0")  # as tinygrad does whenever it tracks (VIZ): a compile pool's rewrites would not be recorded
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from explorer.spec import PRESETS, ConvSpec, SpecError, Variant

if TYPE_CHECKING:
  from explorer import schema  # pydantic: loaded only where a trace is checked


def _spec_of(conv: str | ConvSpec | dict[str, Any]) -> ConvSpec:
  if isinstance(conv, ConvSpec): return conv.validate()
  if isinstance(conv, dict): return ConvSpec.from_dict(conv).validate()
  if conv not in PRESETS: raise SpecError(f"unknown preset {conv!r}; known: {', '.join(PRESETS)} (or pass a ConvSpec)")
  return PRESETS[conv]

def trace(conv: str | ConvSpec | dict[str, Any], timeout_s: float = 600.0, analysis: bool = False, **variant: Any) -> Trace:
  """Trace one convolution (a preset name, a ConvSpec or its dict) computed as `variant` says (explorer.spec.Variant's fields:
  algo, wino_impl, tile, staging, consts, opt, targets, time, repeats, device, rewrites...). analysis: every record's line maps,
  live values, loop splits and program spec now (otherwise when a page or `Trace.diff` needs them)."""
  from explorer.tracing.pipeline.run import run_trace
  spec = _spec_of(conv)
  v = Variant(**{**variant, "targets": tuple(variant.get("targets", Variant().targets)), "rewrites": tuple(variant.get("rewrites", ()))})
  result = run_trace(spec, v.resolve(spec), timeout_s=timeout_s, analysis=analysis)
  return Trace(result.trace, result.rewrites, result.target_rewrites, v)

@dataclass
class Trace:
  """A finished trace: `data` is the trace JSON (explorer/web/models.py and docs/reference/schema.md describe it), `rewrites` the rewrite blob its
  UOp graphs expand from."""
  data: schema.TraceRecord
  rewrites: bytes
  target_rewrites: dict[str, bytes] = field(default_factory=dict)
  variant: Variant | None = None  # as asked: the store keys a trace by it

  @property
  def id(self) -> str:
    """The store's key: of the spec and the variant as asked, for a convolution; of the kernels run, for a captured program."""
    from explorer.store import key_of, trace_key
    if (spec := self.data["spec"]) is None or self.variant is None: return key_of(self.data)
    return trace_key(ConvSpec.from_dict(dict(spec)), self.variant)

  @property
  def kernels(self) -> list[schema.KernelRecord]: return self.data["kernels"]

  @property
  def ok(self) -> bool: return self.data["status"] == "ok"

  def kernel(self, n: int) -> Kernel:
    if not 0 <= n < len(self.kernels): raise IndexError(f"the trace has kernels 0 to {len(self.kernels) - 1}, not {n}")
    return Kernel(self, n)

  def save(self, path: str | os.PathLike[str]) -> pathlib.Path:
    p = pathlib.Path(path)
    p.write_text(json.dumps(self.data, indent=1, default=str))
    return p

  def store(self, db: str | os.PathLike[str] | None = None) -> str:
    """Into the explorer's store (the server's default, or db): returns the id, whose page is /t/{id}. Where one stored under the id
    before (the same computation, recorded again) is replaced, it says so."""
    if self._put(db):
      print(f"explorer: replaced the trace stored as {self.id}, the same computation recorded again (its measurements are this run's)",
            file=sys.stderr)
    return self.id

  def _put(self, db: str | os.PathLike[str] | None) -> bool:
    from explorer.store import Store
    return Store(db).put_trace(self.id, self.data, self.rewrites, self.target_rewrites)

  def open(self, db: str | os.PathLike[str] | None = None, port: int = 8000, browser: bool = True) -> str:
    """Store, then show the trace's page: a server already answering on 127.0.0.1:port over the same store is reused (it has the
    trace), else one is started over that store, on port or, where a server of another store holds it, on a free one; it says where
    it listens and keeps running after this process until stop_server(its port). Returns the page's URL."""
    self._put(db)  # (stored again, where it was: the trace being opened is the one stored)
    trace_id = self.id
    base = ensure_server(port, db, trace_id)
    url = f"{base}/t/{trace_id}"
    if browser: webbrowser.open(url)
    return url

  def diff(self, other: Trace, target: str = "cuda") -> Diff:
    """This trace (A) against other (B): kernels matched by role and data flow, fused stages, buffers, sources and metrics."""
    from explorer.analysis.diff import diff_traces, summary
    a, b = self.analysed([target]), other.analysed([target])  # peak live values are compared
    d = diff_traces(a, b, self.rewrites, other.rewrites, target)
    return Diff(d, summary(d))

  def analysed(self, targets: list[str] | None = None) -> schema.TraceRecord:
    """The trace's data with every record's analysis (line map, live values, loop splits, program spec) on these targets (default all),
    computed from its rewrite blobs where a record lacks one (kept for the next call)."""
    from explorer.tracing.enrichments.enrich import add_analysis
    self.data = add_analysis(self.data, {"": self.rewrites, **self.target_rewrites}, targets)
    return self.data

  def html(self) -> str:
    """The notebook view as HTML (the export's facts and kernel table, the kernel graph, the sources); no script, nothing fetched."""
    from markupsafe import Markup
    from explorer.present import graphs
    from explorer.present.export import localize_svg
    from explorer.present.render import environment, pygments_css
    try: kernel_graph = Markup(localize_svg(graphs.layout_svg(graphs.kernel_graph_dot(graphs.kernel_graph(self.data), "")), "kg"))
    except Exception: kernel_graph = None  # graphviz missing or the layout failed: the rest still shows  # noqa: BLE001
    return environment().get_template("notebook.html").render(trace=self.data, trace_id=self.id, kernel_graph=kernel_graph,
                                                              pygments_css=Markup(pygments_css()))

  def _repr_html_(self) -> str: return self.html()

  def __repr__(self) -> str:
    return f"<explorer.api.Trace {self.data['label']}: {len(self.kernels)} kernels, {self.data['status']}>"

  def __str__(self) -> str:
    """What `print(t)` shows: the kernel table (name, role, uops, FLOPs, bytes, compile and run time), totals, STAGE counts, the check."""
    from explorer.text import trace_summary
    return trace_summary(self.data)

@dataclass
class Kernel:
  """One kernel of a trace: `data` is its record (kernels[n] of the trace JSON)."""
  trace: Trace
  index: int

  @property
  def data(self) -> schema.KernelRecord: return self.trace.kernels[self.index]

  def with_opts(self, opts: list[str] | tuple[str, ...], target: str | None = None, start: str = "current", time: bool = True) -> dict[str, Any]:
    """This kernel scheduled by hand: tinygrad's opts ("UPCAST:0:4", "LOCAL:1:8") applied after `start`'s (its current opts on the
    target, "none" or "heuristic") by tinygrad's own apply_opts, in a worker. Returns {target, start, opts, record (a target record
    like the trace's own), next (the opts BEAM could try next), axes and axes_after (the kernel's axes as apply_opt numbers them,
    before any opt and after these), timing (on the trace's own target: B/A against the original)}.
    SpecError with tinygrad's reason when an opt does not apply."""
    from explorer.schema import host_target
    from explorer.spec import hand_opts
    from explorer.tracing.enrichments.handopts import Unschedulable, schedule
    from explorer.tracing.workers.process import WorkerFailed
    target = target or host_target(self.data)
    try: return schedule(self.trace.data, self.trace.rewrites, self.index, target, hand_opts(list(opts), start), start, time)
    except Unschedulable as e: raise SpecError(str(e)) from None
    except WorkerFailed as e:
      if str(e).startswith("OptRefused: "): raise SpecError(f"tinygrad refused {str(e).removeprefix('OptRefused: ')}") from None
      raise

  def sass(self, target: str = "cuda") -> dict[str, Any]:
    """This kernel's SASS on `target` (cuda or ptx; its record rendered with the trace): each instruction with its source line, that
    line's UOps and the registers live there, the mix, the peak, the spills (explorer.analysis.sass.view). Its compile facts and line
    map are computed first where missing (in workers) and kept on the trace. LookupError when there is no SASS (no record on the
    target, a failed compile, or no nvdisasm here: the message says what to install)."""
    from explorer.analysis.sass import view
    from explorer.schema import target_record, target_records
    from explorer.targets import SASS_TARGETS
    from explorer.tracing.enrichments import enrich
    if target not in SASS_TARGETS: raise ValueError(f"SASS is for {' and '.join(SASS_TARGETS)} records, not {target!r}")
    if target_record(self.data, target) is None:
      raise LookupError(f"kernel {self.index} has no {target} record: trace with that target, or `kernel-explorer enrich --target {target}`")
    blobs = {"": self.trace.rewrites, **self.trace.target_rewrites}
    data = enrich.add_facts(self.trace.data, [target], [self.index])
    self.trace.data = enrich.add_analysis(data, blobs, [target], [self.index])
    rec = target_records(self.data)[target]
    if (got := view(rec)) is None: raise LookupError(_no_sass(rec["compile"]))
    return got

  def __repr__(self) -> str: return f"<explorer.api.Kernel {self.index} of {self.trace.data['label']}: {self.data['name']}>"

def _no_sass(facts: schema.CompileFacts | None) -> str:
  """Why a record has no SASS: its compile facts' note on it (absent where no compiler ran), else the compiler's message."""
  return (facts.get("sass_note") or facts["message"] if facts is not None else None) or "no SASS"

@dataclass
class Diff:
  data: dict[str, Any]
  text: str
  def __str__(self) -> str: return self.text
  def _repr_html_(self) -> str:
    import html
    return f"<pre>{html.escape(self.text)}</pre>"

def capture(name: str | None = None, targets: tuple[str, ...] = (), time: bool = False, opt: str = "heuristic", warmup: int = 2,
            repeats: int = 10, reference: Any = None, rel_tolerance: float = 1e-5, analysis: bool = False, every_step: bool = False) -> Captured:
  """Trace whatever tinygrad program runs inside the block, in this process:

      with capture(targets=("cuda", "metal")) as t:
          y = model(x); y.realize()
      t                    # the whole block: every realize's kernels, numbered across it (t.traces: each realize's own)

  Every realize (and .numpy(), which realizes) with something to compute goes through the explorer's pipeline and is recorded like a
  convolution's trace: tensor graph, schedule and STAGE decisions, kernels per target with their passes, sources, the run, timings
  when time=True. reference: arrays to check the realized tensors against (in order), judged by rel_tolerance. name: default, the
  caller's file:line. analysis: every record's line maps, live values, loop splits and program spec now (else when first viewed).
  A loop reads as a loop: a realize that runs the same kernels as an earlier one (a training loop's next step) is run as tinygrad runs
  it and kept as a repeat of that realize, with its wall time (realizes[i].repeats); every_step=True traces each one whole instead.

  tinygrad decides at import whether it records rewrites: import the explorer before tinygrad (or set TRACK_MATCH_STATS=2), else
  entering the block fails at once and says so."""
  import inspect
  import linecache
  caller = inspect.stack()[1]
  variant = Variant(targets=tuple(targets), time=time, opt=opt, warmup=warmup, repeats=repeats).validate()
  source = "".join(linecache.getlines(caller.filename)) or None  # the caller's file, or its notebook cell: for the reproducer
  return Captured(name or f"{pathlib.Path(caller.filename).name}:{caller.lineno}", variant, reference, rel_tolerance, source, caller.lineno,
                  analysis, caller.filename, every_step)

class Captured(Trace):
  """A capture block's result: after the block, the program's Trace (every realize, its kernels numbered across the block, each with
  its provenance); `traces`, each realize's own trace as recorded (the host's records, sharing the program's rewrite blob)."""
  def __init__(self, name: str, variant: Variant, reference: Any, rel_tolerance: float, source: str | None = None, line: int | None = None,
               analysis: bool = False, file: str | None = None, every_step: bool = False):
    super().__init__(cast("schema.TraceRecord", {}), b"", {}, None)
    self._analysis, self._every_step = analysis, every_step
    self.name, self._variant, self._reference, self._tolerance = name, variant, reference, rel_tolerance
    self._source, self._origin = source, {"kind": "capture", "line": line}
    self.traces: list[Trace] = []
    self._capturing: Any = None
    self._file = file

  def __enter__(self) -> Captured:
    from explorer.tracing.pipeline.program import Capturing
    self._capturing = Capturing(self.name, self._variant, source=self._source, reference=self._reference, rel_tolerance=self._tolerance,
                                origin=self._origin, analysis=self._analysis, file=self._file, every_step=self._every_step).__enter__()
    return self

  def __exit__(self, *exc: Any) -> None:
    self._capturing.__exit__(*exc)
    if exc[0] is not None: return
    if self._capturing.result is None:
      raise RuntimeError("nothing was realized inside the capture block: tinygrad is lazy, so call .realize() (or .numpy()) on the "
                         "tensors to trace; loss.backward() only builds the gradients: realize them (Tensor.realize(*[p.grad for p in "
                         "params])) or step an optimizer (opt.step() realizes)")
    self.data, self.rewrites, self.target_rewrites = self._capturing.result
    self.traces = [Trace(t, self.rewrites) for t in self._capturing.realizes]

def _answers(base: str) -> bool:
  try:
    with urllib.request.urlopen(f"{base}/api/health", timeout=2) as r: return bool(r.status == 200)
  except OSError: return False

def _shows(base: str, trace_id: str) -> bool:
  """Whether the server at base has this trace: it serves the store the trace was saved to."""
  try:
    with urllib.request.urlopen(f"{base}/api/traces/{trace_id}/status", timeout=5) as r: return bool(r.status == 200)
  except OSError: return False

def _free_port() -> int:
  import socket
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return int(s.getsockname()[1])

def _pid_file(port: int) -> pathlib.Path:
  from explorer.web.serving import runtime_dir
  return runtime_dir() / f"kernel-explorer-serve-{port}.pid"

def ensure_server(port: int = 8000, db: str | os.PathLike[str] | None = None, trace_id: str | None = None, wait_s: float = 60.0) -> str:
  """The base URL of a Kernel Explorer on 127.0.0.1 that shows the store db: the one answering on port where it has trace_id (or,
  without one, answers at all), else one started over db (detached: it outlives this process) on port, or on a free port where a
  server of another store holds it. A server it starts says on stderr where it listens and how to stop it (stop_server)."""
  from explorer.store import default_db_path
  from explorer.web.serving import serving
  if (running := serving(db if db is not None else default_db_path())) is not None:  # a server of this store, on any port
    at = f"http://127.0.0.1:{running}"
    if _answers(at) and (trace_id is None or _shows(at, trace_id)): return at
  base = f"http://127.0.0.1:{port}"
  if _answers(base):
    if trace_id is None or _shows(base, trace_id): return base
    port = _free_port()  # a server of another store: this store gets one of its own
    base = f"http://127.0.0.1:{port}"
  cmd = [sys.executable, "-m", "explorer", "serve", "--port", str(port), *(["--db", str(db)] if db is not None else [])]
  proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
  deadline = time.monotonic() + wait_s
  while not _answers(base):
    if proc.poll() is not None or time.monotonic() > deadline:
      raise RuntimeError(f"started `{' '.join(cmd)}` but nothing answered on {base} within {wait_s:.0f}s")
    time.sleep(0.3)
  _pid_file(port).write_text(str(proc.pid))
  print(f"kernel-explorer: serving {db if db is not None else default_db_path()} on {base} (pid {proc.pid}); it keeps running: stop it with "
        f"explorer.api.stop_server({port}), or `kill {proc.pid}`", file=sys.stderr)
  return base

def stop_server(port: int = 8000) -> bool:
  """Stop the server ensure_server (t.open()) started on this port; False where it started none there (or it has stopped)."""
  import signal
  path = _pid_file(port)
  try: pid = int(path.read_text())
  except (OSError, ValueError): return False
  path.unlink(missing_ok=True)
  try: cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_text().split("\0")
  except OSError: cmd = []
  if "serve" not in cmd or str(port) not in cmd: return False  # the pid is no longer that server's
  os.kill(pid, signal.SIGTERM)
  return True
