"""A trace as a standalone Python script that reproduces it with tinygrad alone (tritonparse's reproducers, for tinygrad): the same
inputs (seeded as the trace seeded them), the same convolution, and the environment variables that decide what tinygrad does (DEV,
WINO, NOOPT, BEAM, DEBUG=2 so that tinygrad prints each kernel it runs). A finding can be filed in tinygrad's issue tracker as is.

The explorer's own Winograd and its custom codegen rewrites are not in tinygrad: a script for such a trace imports them from the
explorer package, and says so at its top. Pure text: no tinygrad here."""
from __future__ import annotations
import math
from explorer.spec import ConvSpec, Variant

def environment(trace: dict) -> dict[str, str]:
  """The variables tinygrad reads that this trace depends on."""
  variant = Variant.from_dict(trace["variant"])
  env = {"DEV": trace["env"]["device"], "DEBUG": "2"}
  if variant.algo == "winograd" and variant.wino_impl == "builtin": env["WINO"] = "1"
  if variant.opt == "none": env["NOOPT"] = "1"
  elif variant.opt.startswith("beam:"): env["BEAM"] = variant.opt.split(":")[1]
  return env

def _conv(spec: ConvSpec, variant: Variant) -> list[str]:
  if variant.algo == "winograd" and variant.wino_impl == "explorer":
    return ["from explorer.tracing.algorithms.winograd import winograd_explorer  # the explorer's Winograd (not in tinygrad)",
            f"out = winograd_explorer(x, w, SPEC, tile={variant.tile!r}, staging={variant.staging!r}, consts={variant.consts!r})"]
  return [f"out = x.conv2d(w, stride={spec.stride}, padding={spec.pad}, groups={spec.groups})"
          + ("  # WINO=1: tinygrad's builtin Winograd" if variant.algo == "winograd" else "")]

def repro_script(trace: dict, trace_id: str) -> str:
  """The script. Running it prints tinygrad's own DEBUG=2 line for every kernel, the output's shape and a checksum."""
  if trace.get("spec") is None: return program_script(trace, trace_id)
  spec, variant = ConvSpec.from_dict(trace["spec"]), Variant.from_dict(trace["variant"])
  env = environment(trace)
  explorer = variant.wino_impl == "explorer" and variant.algo == "winograd"
  needs = ("It needs the explorer package (pip install kernel-explorer) for the explorer's own Winograd; tinygrad alone runs the rest."
           if explorer else "It needs tinygrad and numpy only.")
  lost = [f"# Not reproduced here: the custom codegen rewrites {', '.join(variant.rewrites)} (the explorer runs them as extra passes)."] \
         if variant.rewrites or variant.rewrite_file else []
  spec_line = ["from explorer.spec import ConvSpec", f"SPEC = ConvSpec.from_dict({spec.to_dict()!r})"] if explorer else []
  lines = [
    "#!/usr/bin/env python3",
    f'"""Reproduces Kernel Explorer trace {trace_id}: {trace.get("label", "")}',
    f"recorded with tinygrad {trace['env'].get('tinygrad', '?')} on {trace['env'].get('device', '?')}. {needs}",
    "",
    "Run it as it is (it sets the variables below unless they are set already), or e.g. " + " ".join(f"{k}={v}" for k, v in env.items())
    + ' python this.py"""',
    *lost,
    "import os",
    *[f"os.environ.setdefault({k!r}, {v!r})" for k, v in env.items()],
    "import numpy as np",
    "from tinygrad import Tensor  # after the environment: tinygrad reads it on import",
    *spec_line,
    "",
    "rng = np.random.default_rng(0)  # the trace's inputs",
    f"x = Tensor(rng.standard_normal({spec.input_shape!r}).astype({spec.dtype!r}))",
    f"w = Tensor((rng.standard_normal({spec.weight_shape!r}) / np.sqrt({math.prod(spec.weight_shape[1:])})).astype({spec.dtype!r}))",
    "Tensor.realize(x, w)",
    *_conv(spec, variant),
    "y = out.numpy()  # DEBUG=2: tinygrad prints each kernel as it runs",
    'print("output", y.shape, "sum", float(np.float64(y).sum()))',
  ]
  return "\n".join(lines) + "\n"

def program_script(trace: dict, trace_id: str) -> str:
  """A captured program's reproducer: its own source where the capture kept it (a --script run), with the environment set."""
  program, env = trace.get("program") or {}, environment(trace)
  env.pop("WINO", None)
  head = [f"# Reproduces Kernel Explorer trace {trace_id}: {trace.get('label', '')}, recorded with tinygrad {trace['env'].get('tinygrad', '?')}",
          "import os", *[f"os.environ.setdefault({k!r}, {v!r})" for k, v in env.items()]]
  if program.get("source"): return "\n".join(head + ["# the program's source, as `kernel-explorer trace --script` ran it:", program["source"]]) + "\n"
  return "\n".join(head + ["# The program was captured from Python (explorer.api.capture): its source was not kept. Run your code after",
                           "# the lines above (DEBUG=2 prints each kernel tinygrad runs)."]) + "\n"
