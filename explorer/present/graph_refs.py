"""Graph references: the tail of a graph's URLs (tensor, kernels, ast/N, codegen[@T]/N/P/AT, rangeify/P/AT; see
explorer.web.services.graphs), parsed, and where in a trace each one's passes, rewrite blob, spec check and title are."""
from __future__ import annotations
import re
from dataclasses import dataclass
from explorer.schema import KernelRecord, Pass, SpecCheck, TargetRecord, TraceRecord, target_record

class GraphNotFound(LookupError):
  """The reference names no graph of this trace."""

REF_RE = re.compile(r"^(?:(tensor|kernels)|ast/(\d+)|codegen(?:@([a-z]+))?/(\d+)/(\d+)/(before|after|m\d+)|rangeify/(\d+)/(before|after|m\d+))$")

@dataclass(frozen=True)
class Ref:
  kind: str                 # tensor | kernels | ast | codegen | rangeify
  kernel: int | None = None
  pass_index: int | None = None
  at: str | None = None     # before | after | m{j}
  target: str | None = None # codegen of another target than the host's (codegen@cuda/...): its passes and rewrite blob

  @property
  def match(self) -> int | None: return int(self.at[1:]) if self.at is not None and self.at.startswith("m") else None

def parse_ref(ref: str) -> Ref:
  if (m := REF_RE.match(ref)) is None: raise GraphNotFound(f"no graph {ref!r}: see the graph reference formats in the API docs")
  if m.group(1): return Ref(m.group(1))
  if m.group(2): return Ref("ast", kernel=int(m.group(2)))
  if m.group(4): return Ref("codegen", kernel=int(m.group(4)), pass_index=int(m.group(5)), at=m.group(6), target=m.group(3))
  return Ref("rangeify", pass_index=int(m.group(7)), at=m.group(8))

def scheduler_passes(trace: TraceRecord) -> list[Pass]: return sch["passes"] if (sch := trace["scheduler"]) else []  # None: failed before it

def passes_of(trace: TraceRecord, ref: Ref) -> list[Pass]:
  if ref.kind == "rangeify": return scheduler_passes(trace)
  k = kernel_of(trace, ref.kernel)
  if ref.target is None: return k["passes"]
  if (rec := target_record(k, ref.target)) is None or not all("group" in p for p in rec["passes"]):
    raise GraphNotFound(f"kernel {ref.kernel} has no browsable {ref.target} passes in this trace")
  return rec["passes"]

def kernel_of(trace: TraceRecord, k: int | None) -> KernelRecord:
  kernels = trace["kernels"]
  if k is None or not 0 <= k < len(kernels): raise GraphNotFound(f"trace has no kernel {k} (it has {len(kernels)})")
  return kernels[k]

def record_blob(rec: TargetRecord | None, target: str) -> str:
  """The key of the rewrite blob a target's record addresses: the target's own (rendered with the trace) or the one it names (a record
  computed on first view: `cuda@3f2a...`)."""
  return str((rec.get("rewrites") if rec else None) or target)

def blob_of(trace: TraceRecord, ref: Ref) -> str | None:
  """The rewrite blob a codegen graph reference expands from: None for the host's; else its kernel's record's on that target."""
  if ref.target is None: return None
  return record_blob(target_record(kernel_of(trace, ref.kernel), ref.target), ref.target)

def blob_passes(trace: TraceRecord, blob: str | None = None) -> list[Pass]:
  """Every pass record in a rewrite blob (None: the host's: the scheduler's passes and every kernel's codegen passes; else a blob key,
  record_blob: the passes of the records that address it)."""
  kernels = trace["kernels"]
  if blob is None: return [*scheduler_passes(trace), *(p for k in kernels for p in k["passes"])]
  target = blob.split("@")[0]  # "": no target's (target_record would read it as the host's)
  return [p for k in kernels if target and (rec := target_record(k, target)) and record_blob(rec, target) == blob for p in rec["passes"]]

def find_pass(trace: TraceRecord, group: int, step: int, blob: str | None = None) -> Pass:
  """The pass record (group, step) addresses in a rewrite blob (None: the host's; blob_passes): a scheduler pass or a kernel's codegen
  pass."""
  if (p := next((p for p in blob_passes(trace, blob) if p.get("group") == group and p.get("step") == step), None)) is None:
    raise GraphNotFound(f"this trace records no pass {group}/{step}" + (f" in the rewrites of {blob}" if blob else ""))
  return p

def spec_violations(trace: TraceRecord, ref: Ref) -> list[int]:
  """The trace numbers of the UOps tinygrad's spec rejected in the stage a graph belongs to (a graph marks those it contains)."""
  return list(spec_messages(trace, ref))

def spec_messages(trace: TraceRecord, ref: Ref) -> dict[int, str]:
  """spec_violations with each UOp's message (type_verify's), by trace number."""
  check: SpecCheck | None = None
  if ref.kind == "tensor": check = trace.get("spec_checks", {}).get("tensor_graph")  # traces before spec checks have none
  elif ref.kind in ("ast", "codegen"):
    k = kernel_of(trace, ref.kernel)
    ks = k.get("spec")  # traces before spec checks have none
    if ref.kind == "ast": check = ks["ast"] if ks else None
    else:  # the record's own check; older traces: the kernel's, of the host's program
      rec = target_record(k, ref.target)
      check = (rec.get("spec") if rec else None) or (ks.get("program") if ks is not None and ref.target is None else None)
  return {v["trace_num"]: v["message"] for v in check["violations"]} if check else {}

def graph_title(trace: TraceRecord, ref: Ref) -> str:
  if ref.kind == "tensor": return "Tensor graph"
  if ref.kind == "kernels": return "Kernel graph"
  if ref.kind == "ast": return f"AST of kernel {ref.kernel} ({kernel_of(trace, ref.kernel)['role']}): the same for every target"
  p = passes_of(trace, ref)[ref.pass_index]  # type: ignore[index]
  where = ref.at if ref.at in ("before", "after") else f"after match {ref.match} of"
  # numbered from 1, as the pass list shows them
  return f"{where} {ref.target + ' ' if ref.target else ''}pass {(ref.pass_index or 0) + 1} “{p['name']}” ({p['matches']} matches)"
