"""A trace as a standalone Python script that reproduces it with tinygrad alone (tritonparse's reproducers, for tinygrad): the same
inputs (seeded as the trace seeded them), the same convolution, and the environment variables that decide what tinygrad does (DEV,
WINO, NOOPT, BEAM, DEBUG=2 so that tinygrad prints each kernel it runs). A finding can be filed in tinygrad's issue tracker as is.

The explorer's own Winograd and its custom codegen rewrites are not in tinygrad: a script for such a trace imports them from the
explorer package, and says so at its top. Pure text: no tinygrad here.

A trace may come from elsewhere (a shared file, a queue worker): nothing of it lands in the script as code. Its spec and variant pass
their own validation (numbers, and names from fixed lists), every other value is written as a Python literal (repr), and its text
(label, device, id) reaches the docstring and comments only through `docstring` and `comment`, which cannot be broken out of. A
captured program's reproducer is that program's own source, as the trace recorded it: `program_script` says so at its top."""
from __future__ import annotations
import math
import re
from explorer.schema import ProgramOrigin, TraceRecord
from explorer.spec import ConvSpec, SpecError, Variant, normalize_device

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

def comment(text: object, limit: int = 300) -> str:
  """text for a # comment: one line of printable characters (no newline, carriage return or line separator can end the comment)."""
  return _UNPRINTABLE.sub(" ", str(text))[:limit]

def docstring(text: str) -> str:
  """A triple-quoted literal of text: backslashes and double quotes escaped, so no sequence of its characters ends the string early;
  control characters but newlines dropped."""
  clean = _UNPRINTABLE.sub(lambda m: m.group(0) if m.group(0) == "\n" else " ", text)
  return '"""' + clean.replace("\\", "\\\\").replace('"', '\\"') + '"""'

def checked(trace: TraceRecord) -> tuple[ConvSpec | None, Variant, str]:
  """The trace's spec (None for a captured program), variant and device, each through its own validation (SpecError, one line). Its
  environment needs the variant and device only: a record of those alone (no spec) reads as a program's."""
  try:
    spec = ConvSpec.from_dict(dict(d)).validate(memory_budget=1 << 62) if (d := trace.get("spec")) is not None else None
    variant = Variant.from_dict(dict(trace["variant"])).validate(max_repeats=1 << 30, max_beam=1 << 10)
    device = normalize_device(trace["env"]["device"])
  except (KeyError, TypeError, AttributeError) as e: raise SpecError(f"the trace lacks what a reproducer needs ({type(e).__name__}: {e})") from None
  return spec, variant, device

def environment(trace: TraceRecord) -> dict[str, str]:
  """The variables tinygrad reads that this trace depends on (DEV names the device's kind: tinygrad reads DEV=CUDA:1 as CUDA's renderer
  "1", so an index goes on the tensors instead)."""
  _, variant, device = checked(trace)
  env = {"DEV": device.split(":")[0], "DEBUG": "2"}
  if variant.algo == "winograd" and variant.wino_impl == "builtin": env["WINO"] = "1"
  if variant.opt == "none": env["NOOPT"] = "1"
  elif variant.opt.startswith("beam:"): env["BEAM"] = str(variant.beam)
  return env

def _conv(spec: ConvSpec, variant: Variant) -> list[str]:
  if variant.algo == "winograd" and variant.wino_impl == "explorer":
    return ["from explorer.tracing.algorithms.winograd import winograd_explorer  # the explorer's Winograd (not in tinygrad)",
            f"out = winograd_explorer(x, w, SPEC, tile={variant.tile!r}, staging={variant.staging!r}, consts={variant.consts!r})"]
  return [f"out = x.conv2d(w, stride={int(spec.stride)!r}, padding={int(spec.pad)!r}, groups={int(spec.groups)!r})"
          + ("  # WINO=1: tinygrad's builtin Winograd" if variant.algo == "winograd" else "")]

def repro_script(trace: TraceRecord, trace_id: str) -> str:
  """The script. Running it prints tinygrad's own DEBUG=2 line for every kernel, the output's shape and a checksum."""
  spec, variant, device = checked(trace)
  if spec is None: return program_script(trace, trace_id)
  env = environment(trace)
  explorer = variant.wino_impl == "explorer" and variant.algo == "winograd"
  needs = ("It needs the explorer package (pip install kernel-explorer) for the explorer's own Winograd; tinygrad alone runs the rest."
           if explorer else "It needs tinygrad and numpy only.")
  lost = [f"# Not reproduced here: the custom codegen rewrites {comment(', '.join(variant.rewrites))} (the explorer runs them as extra passes)."] \
         if variant.rewrites or variant.rewrite_file else []
  spec_line = ["from explorer.spec import ConvSpec", f"SPEC = ConvSpec.from_dict({spec.to_dict()!r})"] if explorer else []
  on = f", device={device!r}" if ":" in device else ""  # an index: DEV names the kind only
  about = (f"Reproduces Kernel Explorer trace {trace_id}: {trace['label']}\nrecorded with tinygrad {trace['env']['tinygrad']} on "
           f"{device}. {needs}\n\nRun it as it is (it sets the variables below unless they are set already), or e.g. "
           + " ".join(f"{k}={v}" for k, v in env.items()) + " python this.py")
  lines = [
    "#!/usr/bin/env python3",
    docstring(about),
    *lost,
    "import os",
    *[f"os.environ.setdefault({k!r}, {v!r})" for k, v in env.items()],
    "import numpy as np",
    "from tinygrad import Tensor  # after the environment: tinygrad reads it on import",
    *spec_line,
    "",
    "rng = np.random.default_rng(0)  # the trace's inputs",
    f"x = Tensor(rng.standard_normal({spec.input_shape!r}).astype({spec.dtype!r}){on})",
    f"w = Tensor((rng.standard_normal({spec.weight_shape!r}) / np.sqrt({math.prod(spec.weight_shape[1:])!r})).astype({spec.dtype!r}){on})",
    "Tensor.realize(x, w)",
    *_conv(spec, variant),
    "y = out.numpy()  # DEBUG=2: tinygrad prints each kernel as it runs",
    'print("output", y.shape, "sum", float(np.float64(y).sum()))',
  ]
  return "\n".join(lines) + "\n"

RUNS_PROGRAM = ("# This script runs the program's own source, as the trace recorded it (a captured program's reproducer is that program):",
                "# read it before you run it, as you would any script you were sent.")

def program_script(trace: TraceRecord, trace_id: str) -> str:
  """A captured program's reproducer, with the environment set: a --script run's source as it ran (its --fn called as the worker
  called it), or the file (or notebook cell) that held an `explorer.capture` block, with the explorer's names replaced by a stand-in
  so that the block runs on tinygrad alone. It runs that source: it says so at its top."""
  program, env = trace["program"], environment(trace)
  env.pop("WINO", None)
  about = (f"Reproduces Kernel Explorer trace {trace_id}: {trace['label']}, recorded with tinygrad {trace['env']['tinygrad']}")
  head = [docstring(about), *RUNS_PROGRAM, "import os", *[f"os.environ.setdefault({k!r}, {v!r})" for k, v in env.items()]]
  source = program["source"] if program else None
  origin: ProgramOrigin = (program["origin"] if program else None) or {"kind": "script", "fn": None}
  if not isinstance(source, str): source = None
  if source and origin["kind"] == "script" and origin.get("fn"):
    body = ["# the program's source, run as `kernel-explorer trace --script --fn` ran it: as a module, then its function",
            f"SOURCE = {source!r}", "namespace = {'__name__': 'explorer_script'}",
            "exec(compile(SOURCE, 'script.py', 'exec'), namespace)", f"namespace[{str(origin['fn'])!r}]()"]
    return "\n".join(head + body) + "\n"
  if source and origin["kind"] == "script":
    return "\n".join(head + ["# the program's source, as `kernel-explorer trace --script` ran it:", source]) + "\n"
  if source and (plain := without_explorer(source, origin.get("line"))) is not None:
    return "\n".join(head + ["# the code that held the capture block, the explorer's names standing in for nothing (and, where the block",
                              "# is at the top level, nothing after it: the block realized every kernel of the trace):",
                              *CAPTURE_STAND_IN, plain]) + "\n"
  return "\n".join(head + ["# The program was captured from Python (explorer.api.capture) and its source could not be read back. Run",
                           "# your code after the lines above (DEBUG=2 prints each kernel tinygrad runs)."]) + "\n"

CAPTURE_STAND_IN = [
  "import contextlib, types",
  "class _Captured:  # what explorer.api.capture gave: here the block runs on tinygrad alone, and what it returned does nothing",
  "  traces: list = []",
  "  def __getattr__(self, name): return lambda *args, **kwargs: None",
  "@contextlib.contextmanager",
  "def _capture(*args, **kwargs): yield _Captured()",
  "_explorer = types.SimpleNamespace(capture=_capture, api=types.SimpleNamespace(capture=_capture))",
]

def without_explorer(source: str, line: int | None = None) -> str | None:
  """source with each import of the explorer replaced by the stand-in's names (CAPTURE_STAND_IN) and, where the capture block starting
  at `line` is a top-level statement, nothing after that block; None where it does not parse or imports more from the explorer than
  `capture` (that program needs the explorer itself)."""
  import ast
  try: tree = ast.parse(source)
  except SyntaxError: return None
  lines = source.splitlines()
  block = next((n for n in tree.body if isinstance(n, ast.With) and line is not None and n.lineno <= line <= n.body[0].lineno), None)
  if block is not None: del lines[block.end_lineno or len(lines):]
  imports = (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno <= len(lines))
  for node in sorted(imports, key=lambda n: -n.lineno):
    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "explorer":
      if any(a.name != "capture" for a in node.names): return None
      bound = [f"{a.asname or a.name} = _capture" for a in node.names]
    elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "explorer" for a in node.names):
      if len(node.names) > 1 or node.names[0].name not in ("explorer", "explorer.api"): return None
      a = node.names[0]
      bound = [f"{a.asname} = _explorer{'.api' if a.name == 'explorer.api' else ''}" if a.asname else "explorer = _explorer"]
    else: continue
    indent = lines[node.lineno - 1][:node.col_offset]
    lines[node.lineno - 1:node.end_lineno] = [indent + "; ".join(bound)]
  return "\n".join(lines)
