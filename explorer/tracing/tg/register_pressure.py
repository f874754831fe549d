"""Register pressure: values live at once over the linear order (what a register allocator has to fit)."""
from __future__ import annotations
import typing
from tinygrad import dtypes
from tinygrad.dtype import AddrSpace
from tinygrad.uop.ops import Ops, UOp
from explorer.tracing.tg.compat import PARAM, addrspace, max_numel

if typing.TYPE_CHECKING:  # types only: pydantic (the schema's validation) stays out of the worker processes
  from explorer.schema import Pressure

CURVE_POINTS = 512
NOT_VALUES = (Ops.CONST, PARAM, Ops.SINK, Ops.GROUP, Ops.AFTER, Ops.NOOP, Ops.RANGE, Ops.END, Ops.IF, Ops.ENDIF)

def _is_value(u: UOp) -> bool:
  """A value the kernel holds in registers: not void, not an immediate (a CONST or a cast of one), not a kernel argument, no loop mark."""
  return u.dtype != dtypes.void and u.op not in NOT_VALUES and not (u.op is Ops.CAST and u.src and u.src[0].op is Ops.CONST)

def _lanes(u: UOp) -> int:
  if u.op is Ops.BUFFER: return max_numel(u) if addrspace(u) is AddrSpace.REG else 0  # a register array holds its elements
  return max(1, int(getattr(u.dtype, "count", 1)))

def pressure(lin: list[UOp]) -> Pressure:
  """Liveness over the linearized UOps: a value is live from its definition to its last use, extended to the END of any loop it is
  used in that started after it was defined (the loop reads it every iteration); a vector counts once per lane, a register array
  once per element. Returns ssa_values, max_live (lanes), max_live_at (uop index), the curve (at most CURVE_POINTS [uop index, live]
  points, each the peak of its stretch) and the longest live ranges of the values live at the peak (not the thread indices)."""
  pos = {u: i for i, u in enumerate(lin)}
  loops = [(pos[u.src[-1]], i) for i, u in enumerate(lin) if u.op is Ops.END and u.src and u.src[-1].op is Ops.RANGE and u.src[-1] in pos]
  last = {i: i for i, u in enumerate(lin) if _is_value(u)}
  for j, u in enumerate(lin):
    for s in u.src:
      if (i := pos.get(s)) is None or i not in last: continue
      last[i] = max(last[i], j, *(end for start, end in loops if i < start < j <= end))
  delta = [0] * (len(lin) + 1)
  for i, end in last.items():
    delta[i] += (n := _lanes(lin[i]))
    delta[end + 1] -= n
  curve, live = [], 0
  for d in delta[:-1]: curve.append(live := live + d)
  peak_at = max(range(len(curve)), key=curve.__getitem__, default=0)
  step = max(1, -(-len(curve) // CURVE_POINTS))
  points = [[i, max(curve[i:i + step])] for i in range(0, len(curve), step)]
  # what holds the peak: the values live there, longest first; thread and block indices (SPECIAL) are live throughout, the peak or not
  at_peak = [i for i in last if i <= peak_at <= last[i] and lin[i].op is not Ops.SPECIAL]
  longest = sorted(at_peak, key=lambda i: (last[i] - i, -i), reverse=True)[:5]
  return {"ssa_values": len(last), "max_live": curve[peak_at] if curve else 0, "max_live_at": peak_at, "curve": points,
          "longest": [{"uop": i, "op": lin[i].op.name, "until": last[i], "lanes": _lanes(lin[i])} for i in longest]}
