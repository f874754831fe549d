"""Provenance: the Tensor functions, and the user's lines, that made each kernel."""
from __future__ import annotations
import contextlib, dataclasses, os, sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator
import tinygrad
from tinygrad.helpers import Metadata
from tinygrad.uop import ops as uop_ops
from explorer.tracing.tg.compat import PARAM
from tinygrad.uop.ops import GroupOp, Ops, UOp

# tinygrad names the Tensor function that made each tensor-graph UOp (all_metadata: Metadata(name, backward); the gradient pass marks its
# UOps backward) but keeps neither the caller's line nor the link to kernels. `sited_metadata` records the line (a Metadata subclass,
# kept by the gradient's dataclasses.replace), `carrying_metadata` carries it through the scheduler's rewrites (a rewritten compute
# UOp keeps its original's), and `kernel_provenance` reads it back off a kernel's AST.

_EXPLORER_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))  # explorer/, this package two levels down
_TINYGRAD_DIR = os.path.dirname(os.path.abspath(tinygrad.__file__))
_COMPUTE = frozenset(GroupOp.ALU) | {Ops.REDUCE, Ops.CAST, Ops.BITCAST, Ops.WMMA, Ops.STORE}

@dataclass(frozen=True)
class SitedMetadata(Metadata):
  site: tuple[str, int, str | None] | None = dataclasses.field(default=None, compare=False)  # the user's (file, line) and `via`

def _user_site() -> tuple[str, int, str | None] | None:
  """The first frame outside tinygrad and the explorer (the user's line that called the Tensor function), and `via`: the tinygrad
  function that line called when it is not the Tensor function itself (an nn layer's __call__, an optimizer's step)."""
  f: Any = sys._getframe(2)
  callee = None
  while f is not None and f.f_code.co_filename.startswith((_TINYGRAD_DIR, _EXPLORER_DIR, "<frozen")):
    f, callee = f.f_back, f
  if f is None: return None
  via = None
  if callee is not None and callee.f_code.co_filename.startswith(_TINYGRAD_DIR) and not callee.f_code.co_filename.endswith("tensor.py"):
    module = os.path.relpath(callee.f_code.co_filename, _TINYGRAD_DIR).removesuffix(".py").removesuffix("/__init__").replace(os.sep, ".")
    via = f"{module}.{callee.f_code.co_qualname}"
  return (f.f_code.co_filename, f.f_lineno, via)

def user_site() -> tuple[str, int] | None:
  """The user's line this call came from: the first frame outside tinygrad and the explorer."""
  site = _user_site()
  return None if site is None else (site[0], site[1])

@contextlib.contextmanager
def sited_metadata() -> Iterator[None]:
  """While inside, each outermost Tensor function call records its caller's file and line with its metadata."""
  import tinygrad.tensor as tensor_module
  plain = tensor_module._METADATA
  class Sited(type(plain)):  # type: ignore[misc]
    def set(self, x: Any) -> Any:
      return super().set(SitedMetadata(x.name, x.backward, _user_site()) if type(x) is Metadata else x)
  sited = Sited(plain.get())
  tensor_module._METADATA = sited
  try: yield
  finally: tensor_module._METADATA = plain

def _carry(rewrite: Callable[[Any, UOp], UOp]) -> Callable[[Any, UOp], UOp]:
  def carried(ctx: Any, root: UOp) -> UOp:
    ret, md, replace = rewrite(ctx, root), uop_ops.all_metadata, ctx.replace
    for old, new in replace.items():
      if (m := md.get(old)) is None and (new.op not in _COMPUTE or new in md or (m := _beneath(old)) is None): continue
      for _ in range(64):  # a node rewritten to one that was rewritten again: each along the chain is the old one's
        if new is old: break
        if new.op in _COMPUTE and new not in md: md[new] = m
        old, new = new, replace.get(new, new)
    return ret
  return carried

def _beneath(u: UOp) -> tuple | None:
  """The metadata of the compute nearest below a view (a movement op a rewrite turned into compute: RESHAPE(REDUCE) -> REDUCE(RESHAPE))."""
  frontier = list(u.src)
  for _ in range(4):
    for s in frontier:
      if s.op in _COMPUTE and (m := uop_ops.all_metadata.get(s)) is not None: return m
    frontier = [s for x in frontier if x.op in GroupOp.Movement for s in x.src]
  return None

@contextlib.contextmanager
def carrying_metadata() -> Iterator[None]:
  """While inside (the schedule), a compute UOp a rewrite makes of another keeps the other's metadata. Only compute UOps: a constant or
  a buffer is shared by every kernel that uses it, and would carry one kernel's functions into all of them."""
  ctx: Any = uop_ops.RewriteContext
  names = [n for n in ("walk_rewrite", "unified_rewrite") if hasattr(ctx, n)]  # (0.12 rewrote by unified_rewrite alone)
  saved = {n: getattr(ctx, n) for n in names}
  for n, fn in saved.items(): setattr(ctx, n, _carry(fn))
  try: yield
  finally:
    for n, fn in saved.items(): setattr(ctx, n, fn)

def kernel_provenance(ast: UOp) -> list[dict[str, Any]]:
  """The Tensor functions whose compute a kernel does, each with the user's file and line when recorded: the metadata of the compute
  UOps its stores are computed from, not looking into what it loads (those values were computed by the kernels that stored them).
  Deduplicated, in source order."""
  out: dict[tuple, dict[str, Any]] = {}
  seen: set[UOp] = set()
  stack = [u for u in ast.toposort() if u.op is Ops.STORE]
  while stack:
    u = stack.pop()
    if u in seen or (u.op is Ops.INDEX and u.src[0].op is PARAM): continue
    seen.add(u)
    if u.op in _COMPUTE:
      for m in uop_ops.all_metadata.get(u, ()):
        site = getattr(m, "site", None)
        key = (m.name, m.backward, site)
        if key not in out: out[key] = {"fn": m.name, "file": site[0] if site else None, "line": site[1] if site else None, "backward": m.backward,
                                       "via": site[2] if site else None}
    stack.extend(u.src)
  entries = sorted(out.values(), key=lambda e: (e["file"] or "", e["line"] or 0))
  # metadata of UOps made before the recording began (a random seed's counter) has no line: noise beside a kernel's recorded lines
  return [e for e in entries if e["file"] is not None] or entries
