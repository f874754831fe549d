"""The ids traces are stored under: a content hash of what determines a trace, known before it runs (no tinygrad import here)."""
from __future__ import annotations
import hashlib
import importlib.metadata
import json
import os
from collections.abc import Mapping
from typing import Any
from explorer.spec import NOT_SET, ConvSpec, Variant, knobs

_installed: list[tuple[str, str]] = []  # (the metadata directory tinygrad's version was read from, that version)

def tinygrad_version() -> str:
  """The installed tinygrad's version, which trace ids follow. Package metadata is read again only once the directory it was read
  from is gone (an upgrade replaces it): finding it walks sys.path, which cost a third of the server's time under load (every home
  page keys the built-in tours)."""
  if _installed and os.path.isdir(_installed[0][0]): return _installed[0][1]
  try: dist = importlib.metadata.distribution("tinygrad")
  except importlib.metadata.PackageNotFoundError: return "unknown"
  if (where := getattr(dist, "_path", None)) is not None: _installed[:] = [(str(where), dist.version)]
  return dist.version

# tinygrad's DEV override as this process started with it: tinygrad itself sets DEV in the environment once it has picked a default
# device in this process (for the processes it spawns), which a capture() in a notebook does, and a trace's id must not change then
DEV_AT_START = os.environ.get("DEV")

def trace_path(trace_id: str) -> str:
  """Where a server shows the trace stored under this id (its page; explorer.web.urls.trace_url): its API document names it."""
  return f"/t/{trace_id}"

def device_key(variant: Variant) -> str:
  """The device a trace will run on, as far as it is known without importing tinygrad: the variant's, else tinygrad's DEV
  override (as the process started), else "default" (the best device of this host; CPU here, a GPU on a GPU host, so not the same
  key as an explicit CPU)."""
  return variant.device or DEV_AT_START or "default"

def trace_key(spec: ConvSpec, variant: Variant) -> str:
  """Content hash of what determines a trace: spec, variant (notes aside), tinygrad version and device. Known before running."""
  # fields added since the first release count only off the value they had then (Knob.unkeyed): earlier ids stay the same
  later = {name: list(k.unkeyed) if isinstance(k.unkeyed, tuple) else k.unkeyed for name, (_, k) in knobs().items() if k.unkeyed is not NOT_SET}
  variant_fields = {k: v for k, v in variant.to_dict().items() if k not in ("notes", "device", "tinygrad") and later.get(k, object()) != v}
  payload = {"spec": spec.to_dict(), "variant": variant_fields, "tinygrad": variant.tinygrad or tinygrad_version(), "device": device_key(variant)}
  return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

def program_key(trace: Mapping[str, Any]) -> str:
  """A captured program's id: the content hash of everything its trace shows but what was measured (times, when and where it ran) and
  the numbers tinygrad gave its UOps: its name, source and outputs, the kernels it ran (their AST keys) and the lines that made each,
  its realizes, repeats and TinyJit runs with their variables, its status and failures, the variant, tinygrad and device. Two captures
  of one computation from other lines (under @function and without, a line moved) are two traces; the same capture again is the same."""
  program = trace.get("program") or {}
  payload = {"program": {k: program.get(k) for k in ("name", "source", "outputs")},
             "kernels": [(k.get("ast_key"), k.get("realize"), k.get("provenance")) for k in trace["kernels"]],
             "realizes": [{"kernels": r.get("kernels"), "captured": r.get("captured"), "variables": r.get("variables"),
                           "repeats": [x.get("variables") for x in r.get("repeats") or []]} for r in trace.get("realizes") or []],
             "jits": [{"realizes": j.get("realizes"), "runs": [x.get("variables") for x in j.get("runs") or []]} for j in trace.get("jits") or []],
             "status": trace.get("status"), "failures": [(f.get("stage"), f.get("error")) for f in trace.get("failures") or []],
             "variant": {k: v for k, v in trace["variant"].items() if k != "notes"}, "tinygrad": trace["env"]["tinygrad"],
             "device": trace["env"]["device"]}
  return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]

def key_of(trace: Mapping[str, Any]) -> str:
  """The id a recorded trace is stored under: trace_key for a convolution, program_key for a captured program."""
  if trace.get("spec") is None: return program_key(trace)
  return trace_key(ConvSpec.from_dict(trace["spec"]), Variant.from_dict(trace["variant"]))
