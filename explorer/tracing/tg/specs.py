"""Spec checks: tinygrad's own specs (tinygrad/uop/spec.py), every UOp checked, every violation kept."""
from __future__ import annotations
import itertools
import typing
from tinygrad.helpers import Context
from tinygrad.uop.ops import UOp
from explorer.tracing.tg.compat import at_least
from explorer.tracing.tg.recording import trace_num

if typing.TYPE_CHECKING:  # types only: pydantic (the schema's validation) stays out of the worker processes
  from explorer.schema import SpecCheck, SpecViolation

MAX_VIOLATIONS = 50
# each check's spec: "ast", a kernel's AST (0.13 on: the tensor spec; 0.12 had one of its own, kernel_spec; 0.12 named the others
# tensor_spec and program_spec)
SPECS = {"tensor": "spec_tensor", "ast": "spec_tensor", "kernel_graph": "spec_kernel_graph", "program": "spec_program"} if at_least(0, 13) else \
  {"tensor": "tensor_spec", "ast": "kernel_spec", "kernel_graph": "spec_kernel_graph", "program": "program_spec"}

def has_spec(spec: str) -> bool:
  """Whether this tinygrad has the spec (spec_kernel_graph is 0.14's)."""
  from tinygrad.uop import spec as specs
  return hasattr(specs, SPECS[spec])

def spec_check(roots: list[UOp], spec: str, enter_calls: bool = True) -> SpecCheck:
  """Run one of tinygrad's spec PatternMatchers over every UOp under roots, as type_verify does, but recording each UOp no rule accepts
  (with type_verify's message) instead of raising at the first. Returns {spec, ok, checked, violations (at most MAX_VIOLATIONS),
  violation_count}."""
  from tinygrad.uop import spec as specs
  matcher = getattr(specs, SPECS[spec])
  lst = list(dict.fromkeys(u for r in roots for u in (r.toposort(enter_calls=enter_calls) if at_least(0, 13) else r.toposort())))
  bad: list[SpecViolation] = []
  with Context(TRACK_MATCH_STATS=0):
    for i, u in enumerate(lst):
      if matcher.rewrite(u) is not True:
        bad.append({"index": i, "op": u.op.name, "dtype": str(u.dtype), "trace_num": trace_num(u), "message": f"UOp verification failed at "
                    f"{i} on {u.op} {u.dtype} {len(u.src)} {[(x.op, x.dtype, x.arg) for x in u.src]} {u.arg}"[:400]})
  return {"spec": SPECS[spec], "ok": not bad, "checked": len(lst), "violations": bad[:MAX_VIOLATIONS], "violation_count": len(bad)}

def tensor_spec_check(sink: UOp) -> SpecCheck:
  """spec_tensor over the tensor graph where tinygrad checks it (lower_sink_to_linear): the function Tensor.realize schedules
  (transform_to_call's CALL body, storage as PARAMs). The graph the tensors hold is only ever checked against spec_full: in it an AFTER
  on a COPY (Tensor.rand's counter, copied from PYTHON) is legal, and spec_tensor rejects it. The graph as held where the call cannot
  be built (the schedule then fails and says why)."""
  if not at_least(0, 13): return spec_check([sink], "tensor")  # 0.12 checks the tensor graph itself (complete_create_schedule_with_vars)
  from tinygrad.tensor import transform_to_call
  first = next(UOp.unique_num)  # its outputs' new buffers take slots: given back, the realize numbers them as plain tinygrad does
  try:
    with Context(TRACK_MATCH_STATS=0): call, _ = transform_to_call(sink)
  except Exception: return spec_check([sink], "tensor")
  finally: UOp.unique_num = itertools.count(first)
  return spec_check([call.src[0]], "tensor")

def schedule_calls(linear: UOp) -> list[UOp]: return list(linear.src) if at_least(0, 13) else [ei.ast for ei in linear]  # type: ignore[attr-defined]  # the kernel graph's calls (tinygrad checks them before linearizing)

def program_sink(prg: UOp) -> UOp: return prg.src[0]
