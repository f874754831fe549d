"""Diff two traces: kernels matched by role and data flow (not by position), the buffers only one side has, per-pair op, uop,
FLOP and byte deltas, an aligned source diff, a structural UOp graph diff, interleaved re-timing and the outputs compared.

Matching: each kernel covers a set of Winograd stages, its role split on "+" (`conv` covers the whole chain xhat, ghat,
mhat, out). Kernels covering the same stages pair one to one, ties broken by data flow (which roles and stages they read
from, which roles they write). The rest group by overlapping stages: one kernel against several is a fusion (`mhat+out`
against `mhat` and `out`), `conv` against a chain is a fold; kernels that share no stage are one side's only.
Buffers pair by role and by the kernel groups that write and read them, so an intermediate that lives inside a fused
group (MHAT), or a materialized constant, shows on one side only.

No tinygrad here: what needs it runs in a fresh worker (explorer.analysis.diff_worker, explorer.tracing.pipeline.timing).
"""
from __future__ import annotations
import difflib
import functools
import hashlib
import itertools
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast
from explorer import stats
from explorer.analysis import memory
from explorer.analysis.sass import estimate
from explorer.clocks import METHODS, ratio_words
from explorer.schema import (
  Buffer,
  CompileFacts,
  KernelRecord,
  RatioStats,
  ScheduleRow,
  TraceRecord,
  VariantTiming,
  registers_of,
  sass_in,
  schedule_role,
  stage_counts_of,
  target_record,
)
from explorer.text import fmt_bytes, fmt_signed, si, table
from explorer.tinygrads import TINYGRAD
from explorer.tracing import versions
from explorer.tracing.workers.process import DEFAULT_TIMEOUT_S, WorkerFailed, call_in_worker

CHAIN = ("xhat", "ghat", "mhat", "out")
OP_KEYS = ("alu", "loads", "stores", "consts", "ranges", "total")
SCALAR_KEYS = ("ast_uops", "linear_uops", "flops", "bytes")
NOT_SCHEDULE = ("notes", "targets", "warmup", "repeats", "time")  # variant fields that do not change what runs

def role_parts(role: str) -> frozenset[str]: return frozenset(CHAIN) if role == "conv" else frozenset(role.split("+"))

def _and(xs: list[str]) -> str: return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]

# ***** one side's data flow *****

class Side:
  """A trace's kernels and buffers, indexed for matching."""
  def __init__(self, trace: TraceRecord):
    self.trace, self.kernels, self.buffers, self.sched = trace, trace["kernels"], trace["buffers"], trace["schedule"]

  def writers(self, b: Buffer) -> list[ScheduleRow]: return [self.sched[i] for i in b["written_by"]]
  def readers(self, b: Buffer) -> list[ScheduleRow]: return [self.sched[i] for i in b["read_by"]]

  def upstream(self, k: KernelRecord) -> frozenset[str]:
    """Where a kernel's reads come from: the roles of external buffers, the stages of the kernels that wrote the others."""
    out: set[str] = set()
    for i in k["reads"]:
      b = self.buffers[i]
      if b["role"] != "intermediate": out.add(b["role"])
      for s in self.writers(b):
        if s["kind"] == "kernel" and s["kernel"] is not None: out |= {f"from:{p}" for p in role_parts(self.kernels[s["kernel"]]["role"])}
    return frozenset(out)

  def written_roles(self, k: KernelRecord) -> frozenset[str]: return frozenset(self.buffers[i]["role"] for i in k["writes"])
  def written_bytes(self, k: KernelRecord) -> int: return sum(self.buffers[i]["nbytes"] for i in k["writes"])

  @staticmethod
  def target_of(k: KernelRecord, target: str) -> str: return target if target_record(k, target) is not None else k["host_target"]

  def copy_bytes(self) -> int: return sum(self.buffers[i]["nbytes"] for s in self.sched if s["kind"] == "copy" for i in s["writes"])

# ***** kernel matching *****

Flow = tuple[frozenset[str], frozenset[str], int]  # a kernel's upstream, the roles it writes, the bytes it writes

def _score(a: Flow, b: Flow) -> float: return len(a[0] ^ b[0]) + len(a[1] ^ b[1]) + 0.5 * (a[2] != b[2])

EXHAUSTIVE = 40_000  # A x B kernels of one stage matched by trying every pair; past it (a long program's), equal flows pair in order

def _equal_flows_paired(ias: list[int], jbs: list[int], flow_a: list[Flow], flow_b: list[Flow],
                        pair: Callable[[int, int], None]) -> tuple[list[int], list[int]]:
  """Kernels of one stage whose data flows are equal, paired in schedule order (the k-th of a flow in A with the k-th in B: what the
  exhaustive match does for a program's repeated steps); returns those left, in order."""
  by_a: dict[Flow, list[int]] = defaultdict(list)
  by_b: dict[Flow, list[int]] = defaultdict(list)
  for i in ias: by_a[flow_a[i]].append(i)
  for j in jbs: by_b[flow_b[j]].append(j)
  paired_a, paired_b = set(), set()
  for flow, these in by_a.items():
    for i, j in zip(these, by_b.get(flow, []), strict=False):
      pair(i, j)
      paired_a.add(i); paired_b.add(j)
  return [i for i in ias if i not in paired_a], [j for j in jbs if j not in paired_b]

def match_kernels(sa: Side, sb: Side) -> list[tuple[list[int], list[int]]]:
  """Groups of (A kernel indices, B kernel indices): pairs covering the same stages first, then groups of overlapping stages."""
  groups: list[tuple[list[int], list[int]]] = []
  left_a, left_b = set(range(len(sa.kernels))), set(range(len(sb.kernels)))
  by_parts: dict[frozenset[str], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
  for i, k in enumerate(sa.kernels): by_parts[role_parts(k["role"])][0].append(i)
  for j, k in enumerate(sb.kernels): by_parts[role_parts(k["role"])][1].append(j)
  flow_a = [(sa.upstream(k), sa.written_roles(k), sa.written_bytes(k)) for k in sa.kernels]  # once per kernel: a big program pairs
  flow_b = [(sb.upstream(k), sb.written_roles(k), sb.written_bytes(k)) for k in sb.kernels]  # hundreds of kernels with hundreds
  def pair(i: int, j: int) -> None:
    groups.append(([i], [j])); left_a.remove(i); left_b.remove(j)
  for ias, jbs in by_parts.values():
    # same stages on both sides: the data flow decides who pairs with whom, then the schedule order
    if len(ias) * len(jbs) > EXHAUSTIVE:  # a long program's thousands of one stage: equal flows paired in schedule order first
      ias, jbs = _equal_flows_paired(ias, jbs, flow_a, flow_b, pair)
      if len(ias) * len(jbs) > EXHAUSTIVE:
        for i, j in zip(ias, jbs, strict=False): pair(i, j)
        continue
    cands = sorted((_score(flow_a[i], flow_b[j]), abs(x - y), i, j) for x, i in enumerate(ias) for y, j in enumerate(jbs))
    for *_, i, j in cands:
      if i in left_a and j in left_b: pair(i, j)
  # what is left groups by overlapping stages (union-find over both sides' kernels: an A and a B kernel sharing a stage are one group)
  parent: dict[tuple[str, int], tuple[str, int]] = {n: n for n in [("a", i) for i in left_a] + [("b", j) for j in left_b]}
  def find(n: tuple[str, int]) -> tuple[str, int]:
    while parent[n] != n: n = parent[n]
    return n
  having: dict[str, tuple[list[tuple[str, int]], list[tuple[str, int]]]] = defaultdict(lambda: ([], []))
  for side, left, ks in (("a", left_a, sa.kernels), ("b", left_b, sb.kernels)):
    for i in sorted(left):
      for part in role_parts(ks[i]["role"]): having[part][side == "b"].append((side, i))
  for in_a, in_b in having.values():
    if in_a and in_b:
      for n in in_a + in_b[1:]: parent[find(n)] = find(in_b[0])
  comps: dict[tuple[str, int], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
  for n in sorted(parent): comps[find(n)][0 if n[0] == "a" else 1].append(n[1])
  groups += list(comps.values())
  def order(g: tuple[list[int], list[int]]) -> tuple[float, float]:
    return (min((sa.kernels[i]["call"] for i in g[0]), default=float("inf")), min((sb.kernels[j]["call"] for j in g[1]), default=float("inf")))
  return sorted(((sorted(a, key=lambda i: sa.kernels[i]["call"]), sorted(b, key=lambda j: sb.kernels[j]["call"])) for a, b in groups), key=order)

def relation_label(group: Mapping[str, Any]) -> str:
  """How a matched group reads: "same" only for kernels whose figures and code are identical; same roles with other code read
  "same role, changed"."""
  if (relation := str(group["relation"])) != "same": return relation
  return "identical" if group["identical"] else "same role, changed"

def _relation(ra: list[str], rb: list[str]) -> tuple[str, str | None, str]:
  """(relation, the side that fused or folded, a sentence)."""
  if not rb: return "a_only", None, f"{_and(ra)} only in A"
  if not ra: return "b_only", None, f"{_and(rb)} only in B"
  if ("conv" in ra) != ("conv" in rb):
    side, one, many = ("a", ra, rb) if "conv" in ra else ("b", rb, ra)
    other = "B" if side == "a" else "A"
    return "folded", side, f"{_and(many)} ({other}) fold into {_and(one)} ({side.upper()})"
  if len(ra) == len(rb) == 1: return ("same" if ra == rb else "changed"), None, f"{ra[0]} matches {rb[0]}" if ra == rb else f"{ra[0]} became {rb[0]}"
  if len(ra) == 1 or len(rb) == 1:
    side, one, many = ("a", ra, rb) if len(ra) == 1 else ("b", rb, ra)
    if role_parts(one[0]) >= frozenset().union(*map(role_parts, many)):
      return "fused", side, f"{_and(many)} fused into {one[0]} in {side.upper()}"
  return "regrouped", None, f"{_and(ra)} (A) regrouped as {_and(rb)} (B)"

# ***** per group: metrics, sources, graphs *****

def _on(k: KernelRecord, target: str) -> dict[str, Any]:
  """The kernel as `target` made it (its per-target record, trace schema 2), else its host fields."""
  return {**k, **rec} if (rec := target_record(k, target)) is not None else {**k}

def _facts(k: KernelRecord, target: str) -> CompileFacts | None:
  """The kernel's compile facts on `target`: None where it has no record there, or the record none."""
  return None if (rec := target_record(k, target)) is None else rec["compile"]

def _metrics(ks: list[KernelRecord], target: str = "host") -> dict[str, Any]:
  """A group's figures on `target`: uops, FLOPs, bytes and op counts summed; the highest peak of live values; from its compile facts
  (where a compiler ran) the most registers any kernel uses, the spill bytes summed and the lowest occupancy; the host's measured time."""
  recs = [_on(k, target) for k in ks]
  m: dict[str, Any] = {k: sum(x[k] for x in recs) for k in SCALAR_KEYS}
  ops: Counter[str] = Counter()
  for x in recs: ops.update({k: v for k, v in x["ops"].items() if k in OP_KEYS or k.startswith("op:")})
  m.update({k: ops[k] for k in OP_KEYS}, **{k: v for k, v in sorted(ops.items()) if k.startswith("op:")})
  facts = [f for k in ks if (f := _facts(k, target)) is not None]
  def every(xs: list[Any]) -> bool: return bool(ks) and len(xs) == len(ks)  # a figure every kernel of the group has
  registers = [r for f in facts if (r := registers_of(f)) is not None]  # compile facts' fields: absent where no compiler ran
  m["registers"] = max(registers) if every(registers) else None
  m["spill_bytes"] = sum((f.get("spill_store_bytes") or 0) + (f.get("spill_load_bytes") or 0) for f in facts) if every(registers) else None
  occupancy = [o["occupancy"] for f in facts if (o := f.get("occupancy")) is not None]
  m["occupancy"] = min(occupancy) if every(occupancy) else None
  sass = [got for f in facts if (got := sass_in(f))]
  whole = every(sass)  # SASS figures where every kernel of the group has its SASS (CUDA, PTX)
  m["sass_instructions"] = sum(s["count"] for s in sass) if whole else None
  m["sass_peak_live"] = max((s["peak_live"] or 0) for s in sass) if whole else None
  m["sass_spills"] = sum(s["spills"] for s in sass) if whole else None
  peaks = [p for k in ks if (rec := target_record(k, target)) is not None and (p := estimate(rec)) is not None]
  m["max_live"] = max(peaks) if peaks and len(peaks) == len(recs) else None  # the group's highest register pressure (trace schema 2)
  times = [t["median"] for x in ks if (t := x["time_s"])]
  m["time_s"] = sum(times) if times and len(times) == len(ks) else None
  return m

def metric_delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
  """b - a per figure; a figure one side lacks (None: no compile facts, no timing) has no delta. Both sides have every figure but the
  ops (op:WMMA...): a group's op counts name only the ops it has, so an op the other side alone has counts 0 here."""
  keys = list(dict.fromkeys([*a, *b]))
  ca, cb = Counter(a), Counter(b)
  return {k: cb[k] - ca[k] for k in keys if k.startswith("op:") or (ca[k] is not None and cb[k] is not None)}

def source_rows(a: str, b: str) -> list[dict[str, Any]]:
  """Aligned rows for a side-by-side view: {a, b, kind: same|changed|a_only|b_only, a_no, b_no} (1-based line numbers)."""
  al, bl = a.splitlines(), b.splitlines()
  rows = []
  for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, al, bl, autojunk=False).get_opcodes():
    for d in range(max(i2 - i1, j2 - j1)):
      i, j = i1 + d, j1 + d
      ina, inb = i < i2, j < j2
      kind = "same" if op == "equal" else "changed" if ina and inb else "a_only" if ina else "b_only"
      rows.append({"a": al[i] if ina else None, "b": bl[j] if inb else None, "kind": kind,
                   "a_no": i + 1 if ina else None, "b_no": j + 1 if inb else None})
  return rows

def _group_source(ks: list[KernelRecord], target: str) -> tuple[str, list[dict[str, Any]]]:
  """The sources of a group's kernels joined by a blank line, and where each kernel starts (1-based line)."""
  parts, line, texts = [], 1, []
  for k in ks:
    text = k["sources"].get(target, "")  # a target's source, where it rendered
    parts.append({"kernel": k["index"], "name": k["name"], "first_line": line, "lines": len(text.splitlines())})
    texts.append(text.rstrip("\n"))
    line += len(text.splitlines()) + 1
  return "\n\n".join(texts), parts

class Shared:
  """What a diff's groups have in common, kept once: a program's repeated kernels give equal source rows and equal figures (the diff of
  a 10,000-kernel loop of 73 kernels with itself held 10,001 copies of 73 distinct ones). Values kept here are never changed after."""
  def __init__(self) -> None:
    self._rows: dict[tuple[str, str], tuple[list[dict[str, Any]], dict[str, int]]] = {}
    self._figures: dict[tuple[tuple[str, type, Any], ...], dict[str, Any]] = {}
    self._metrics: dict[tuple[int, int], dict[str, Any]] = {}

  def rows(self, a: str, b: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """source_rows(a, b) and their count by kind."""
    if (got := self._rows.get((a, b))) is None:
      rows = source_rows(a, b)
      got = self._rows[(a, b)] = (rows, dict(Counter(r["kind"] for r in rows)))
    return got

  def metrics(self, ma: dict[str, Any], mb: dict[str, Any]) -> dict[str, Any]:
    """A group's figures on both sides and their delta (each side's figures: numbers and None, compared by value and type: 2 is not 2.0)."""
    ma, mb = (self._figures.setdefault(tuple((k, type(v), v) for k, v in m.items()), m) for m in (ma, mb))
    if (got := self._metrics.get((id(ma), id(mb)))) is None: got = self._metrics[(id(ma), id(mb))] = {"a": ma, "b": mb, "delta": metric_delta(ma, mb)}
    return got

def packed(d: dict[str, Any]) -> dict[str, Any]:
  """The diff as stored: the values its groups share (figures, source rows and counts: Shared) written once, in `shared`, each group
  naming them by position (a 10,000-kernel loop's diff with itself: 69 MB of JSON, most of it repeats, read back as as many copies)."""
  pool: list[Any] = []
  at: dict[int, int] = {}
  def ref(value: Any) -> int:
    if (i := at.get(id(value))) is None:
      i = at[id(value)] = len(pool)
      pool.append(value)
    return i
  groups = [{**g, "metrics": ref(g["metrics"]), "source": {**g["source"], "rows": ref(g["source"]["rows"]), "counts": ref(g["source"]["counts"])}}
            for g in d["groups"]]
  return {**d, "groups": groups, "shared": pool}

def unpacked(stored: dict[str, Any]) -> dict[str, Any] | None:
  """A stored diff as `packed` wrote it, its groups' shared values put back (shared again); None where it is not one (a stored value
  is data: a position out of range, or of the wrong kind, is not trusted)."""
  pool = stored.get("shared")
  if not isinstance(pool, list) or not isinstance(groups := stored.get("groups"), list): return None
  def got(i: Any, kind: type) -> Any:
    if not isinstance(i, int) or not 0 <= i < len(pool) or not isinstance(pool[i], kind): raise ValueError(i)
    return pool[i]
  try: out = [{**g, "metrics": got(g["metrics"], dict), "source": {**g["source"], "rows": got(g["source"]["rows"], list),
                                                                    "counts": got(g["source"]["counts"], dict)}} for g in groups]
  except (ValueError, KeyError, TypeError): return None
  return {k: v for k, v in stored.items() if k != "shared"} | {"groups": out}

def _source_diff(ka: list[KernelRecord], kb: list[KernelRecord], target: str, shared: Shared | None = None) -> dict[str, Any]:
  note = None
  if not all(target in k["sources"] for k in ka + kb):
    missing = sorted({k["name"] for k in ka + kb if target not in k["sources"]})
    note, target = f"no {target} source for {', '.join(missing)}: showing each side's host source", "host"
  (a, pa), (b, pb) = _group_source(ka, target), _group_source(kb, target)
  rows, counts = (shared or Shared()).rows(a, b)
  return {"target": target, "note": note, "rows": rows, "counts": counts, "a_parts": pa, "b_parts": pb}

def node_signatures(graph: dict[str, Any]) -> dict[str, str]:
  """Canonical signature per node: its label (kernel names dropped) and the multiset of its inputs' signatures."""
  ins: dict[str, list[str]] = defaultdict(list)
  for e in graph["edges"]: ins[e["dst"]].append(e["src"])
  labels = {n["id"]: ("SINK" if n["op"] == "SINK" else n["label"]) for n in graph["nodes"]}
  sig: dict[str, str] = {}
  for n in _topo(labels, ins):
    sig[n] = hashlib.sha1(repr((labels[n], sorted(sig[s] for s in ins[n] if s in sig))).encode()).hexdigest()[:16]
  return sig

def _topo(labels: dict[str, str], ins: dict[str, list[str]]) -> list[str]:
  order, done = [], set()
  for root in labels:
    stack = [(root, False)]
    while stack:
      n, expanded = stack.pop()
      if n in done or n not in labels: continue
      if expanded: done.add(n); order.append(n); continue
      stack.append((n, True))
      stack += [(s, False) for s in ins[n] if s not in done]
  return order

def graph_diff(ga: list[dict[str, Any]], gb: list[dict[str, Any]]) -> dict[str, Any]:
  """Nodes (by canonical signature, as multisets) only in A's kernel graphs and only in B's. A changed leaf changes every node
  above it; `frontier` lists the differing nodes whose inputs all exist on both sides: where the change starts."""
  def side(gs: list[dict[str, Any]]) -> tuple[Counter[str], list[tuple[str, dict[str, Any], list[str]]]]:
    nodes = []
    for g in gs:
      sig, ins = node_signatures(g), defaultdict(list)
      for e in g["edges"]: ins[e["dst"]].append(e["src"])
      nodes += [(sig[n["id"]], n, [sig[s] for s in ins[n["id"]] if s in sig]) for n in g["nodes"]]
    return Counter(s for s, _, _ in nodes), nodes
  (ca, na), (cb, nb) = side(ga), side(gb)
  common = ca & cb
  def only(c: Counter[str], nodes: list[tuple[str, dict[str, Any], list[str]]], other: Counter[str]) -> list[dict[str, Any]]:
    extra, out = c - other, []
    for s, n, in_sigs in reversed(nodes):  # the excess copies of a signature: the last ones seen
      if extra[s] > 0:
        extra[s] -= 1
        out.append({"id": n["id"], "op": n["op"], "label": n["label"], "frontier": all(x in common for x in in_sigs)})
    return out[::-1]
  oa, ob = only(ca, na, cb), only(cb, nb, ca)
  return {"a_nodes": sum(ca.values()), "b_nodes": sum(cb.values()), "common": sum(common.values()), "only_a": oa, "only_b": ob,
          "only_a_ops": dict(Counter(n["op"] for n in oa)), "only_b_ops": dict(Counter(n["op"] for n in ob)),
          "frontier_a": sum(n["frontier"] for n in oa), "frontier_b": sum(n["frontier"] for n in ob)}

# ***** buffers *****

def _who(side: Side, si: int, groups_of: dict[int, int], reading: bool) -> list[str]:
  s = side.sched[si]
  if s["kind"] == "kernel": return [f"g{groups_of[s['kernel']]}" if s["kernel"] is not None else f"unbuilt:{schedule_role(s)}"]
  if not reading: return [s["kind"]]
  # a copy reads it: it is for whoever reads the copy's destination
  return [f"{s['kind']}>{w}" for o in s["writes"] for r in side.buffers[o]["read_by"] for w in _who(side, r, groups_of, True)]

def _buffer_key(side: Side, b: Buffer, groups_of: dict[int, int]) -> tuple[Any, ...]:
  if b["role"] in ("input", "weight", "output"): return (b["role"],)
  writers = sorted({w for i in b["written_by"] for w in _who(side, i, groups_of, False)})
  readers = sorted({w for i in b["read_by"] for w in _who(side, i, groups_of, True)})
  return (b["role"], tuple(writers), tuple(readers))

def _buffer_info(side: Side, b: Buffer) -> dict[str, Any]:
  def names(idx: list[int]) -> list[str]:  # a kernel's role (from the schedule: a failed trace may not have built every kernel)
    return [schedule_role(side.sched[i]) or "kernel" if side.sched[i]["kind"] == "kernel" else side.sched[i]["kind"] for i in idx]
  def final_readers(bb: Buffer) -> list[str]:  # through copies: the kernels that read what the copies write
    return [n for i in bb["read_by"] for n in (names([i]) if side.sched[i]["kind"] == "kernel" else
                                                 [x for o in side.sched[i]["writes"] for x in final_readers(side.buffers[o])])]
  w, r = names(b["written_by"]), names(b["read_by"])
  what = b["role"] if b["role"] != "intermediate" else f"intermediate {'+'.join(w)} -> {'+'.join(r)}"
  if b["role"] in ("constant", "host"):
    what = f"constant for {'+'.join(final_readers(b)) or '-'}" + (" (the host copy)" if b["role"] == "host" or not w else "")
  return {"index": b["index"], "name": b["name"], "role": b["role"], "what": what, "nbytes": b["nbytes"], "numel": b["numel"],
          "dtype": b["dtype"], "device": b["device"], "written_by": w, "read_by": r}

def match_buffers(sa: Side, sb: Side, ga: dict[int, int], gb: dict[int, int]) -> dict[str, Any]:
  keyed: dict[tuple[Any, ...], tuple[list[Buffer], list[Buffer]]] = defaultdict(lambda: ([], []))
  for b in sa.buffers: keyed[_buffer_key(sa, b, ga)][0].append(b)
  for b in sb.buffers: keyed[_buffer_key(sb, b, gb)][1].append(b)
  matched, only_a, only_b = [], [], []
  for bas, bbs in keyed.values():
    bas, bbs = sorted(bas, key=lambda b: b["nbytes"]), sorted(bbs, key=lambda b: b["nbytes"])
    for x, y in zip(bas, bbs, strict=False):
      matched.append({"a": _buffer_info(sa, x), "b": _buffer_info(sb, y), "nbytes_delta": y["nbytes"] - x["nbytes"]})
    only_a += [_buffer_info(sa, x) for x in bas[len(bbs):]]
    only_b += [_buffer_info(sb, y) for y in bbs[len(bas):]]
  return {"matched": sorted(matched, key=lambda m: m["a"]["index"]), "only_a": sorted(only_a, key=lambda b: b["index"]),
          "only_b": sorted(only_b, key=lambda b: b["index"])}

# ***** the diff *****

def _totals(side: Side, target: str) -> dict[str, Any]:
  """A side's totals, counted on `target`'s records as the groups' rows are (a kernel without a record there: its host's)."""
  t, ks = side.trace, [_on(k, side.target_of(k, target)) for k in side.kernels]
  kb, cb = sum(k["bytes"] for k in ks), side.copy_bytes()
  return {"kernels": len(ks), "copies": sum(1 for s in side.sched if s["kind"] == "copy"), "buffers": len(side.buffers),
          "buffer_bytes": sum(b["nbytes"] for b in side.buffers), "flops": sum(k["flops"] for k in ks), "kernel_bytes": kb, "copy_bytes": cb,
          "bytes_moved": kb + cb, "ast_uops": sum(k["ast_uops"] for k in ks), "linear_uops": sum(k["linear_uops"] for k in ks),
          "stage_counts": stage_counts_of(t["scheduler"])}

def _about(t: TraceRecord) -> dict[str, Any]:
  return {"label": t["label"], "status": t["status"], "spec": t["spec"], "variant": t["variant"], "device": t["env"]["device"],
          "host": t["env"]["host"], "tinygrad": t["env"]["tinygrad"], "error": t["error"], "failures": t["failures"]}

def _kref(k: KernelRecord, target: str) -> dict[str, Any]:
  """A kernel as a group lists it: its name on `target` (each target's codegen names it by its own launch dims), its host name beside."""
  rec = target_record(k, target)
  return {"index": k["index"], "call": k["call"], "name": rec["name"] if rec is not None else k["name"], "host_name": k["name"],
          "role": k["role"], "notes": k["notes"]}

Whole = Callable[[KernelRecord], KernelRecord]  # a kernel with its sources (a trace read light keeps them apart: explorer.store.pieces)

def as_it_is(k: KernelRecord) -> KernelRecord: return k

def _variant_as_run(t: TraceRecord) -> dict[str, Any]:
  """A trace's variant with the tinygrad it ran on named (a variant asks for None: the server's own, which its env names)."""
  return {**t["variant"], "tinygrad": t["variant"].get("tinygrad") or t["env"].get("tinygrad")}

def diff_traces(a: TraceRecord, b: TraceRecord, a_rewrites: bytes | None = None, b_rewrites: bytes | None = None, target: str = "cuda",
                timeout_s: float = DEFAULT_TIMEOUT_S, whole_a: Whole = as_it_is, whole_b: Whole = as_it_is) -> dict[str, Any]:
  """The structural diff of two traces (JSON-ready; groups share equal figures and source rows, `Shared`: copy one before changing
  it). With both rewrite blobs, each group also gets a UOp graph diff (in a worker).
  whole_a, whole_b: each side's kernel with its sources, for its group's source diff (traces read light: a group's kernels at a time,
  never the whole program's sources at once)."""
  sa, sb = Side(a), Side(b)
  groups = match_kernels(sa, sb)
  ga = {i: g for g, (ias, _) in enumerate(groups) for i in ias}
  gb = {j: g for g, (_, jbs) in enumerate(groups) for j in jbs}
  out_groups, shared, whole = [], Shared(), []
  blobs = (a_rewrites, b_rewrites) if a_rewrites is not None and b_rewrites is not None else None
  for g, (ias, jbs) in enumerate(groups):
    ka, kb = [sa.kernels[i] for i in ias], [sb.kernels[j] for j in jbs]
    relation, side, sentence = _relation([k["role"] for k in ka], [k["role"] for k in kb])
    ma, mb = _metrics(ka, target), _metrics(kb, target)
    wa, wb = [whole_a(k) for k in ka], [whole_b(k) for k in kb]
    if blobs is not None: whole.append((wa, wb))  # what the graph diff reads again; else they go with their group (a big program's: 600 MB at once)
    src = _source_diff(wa, wb, target, shared)
    identical = relation == "same" and {**ma, "time_s": 0} == {**mb, "time_s": 0} and all(r["kind"] == "same" for r in src["rows"])
    out_groups.append({"index": g, "relation": relation, "side": side, "describe": sentence, "identical": identical,
                       "a": [_kref(k, target) for k in ka], "b": [_kref(k, target) for k in kb],
                       "metrics": shared.metrics(ma, mb), "source": src, "graph": None, "rules": None,
                       "passes": pass_changes(wa, wb)})
  notes: list[str] = []
  if blobs is not None: _attach_graphs(out_groups, sa, sb, *blobs, timeout_s, notes, whole)
  else: notes.append("no rewrite blobs: no structural graph diff")
  ta, tb = _totals(sa, target), _totals(sb, target)
  va, vb = _variant_as_run(a), _variant_as_run(b)
  return {"a": _about(a), "b": _about(b), "target": target, "specs_match": a["spec"] == b["spec"],
          "variant_changes": {k: [v, vb.get(k)] for k, v in va.items() if k not in NOT_SCHEDULE and vb.get(k) != v},
          "groups": out_groups, "kernel_group": {"a": [ga[i] for i in range(len(sa.kernels))], "b": [gb[j] for j in range(len(sb.kernels))]},
          "fusions": [g["describe"] for g in out_groups if g["relation"] in ("fused", "folded", "regrouped")],
          "buffers": match_buffers(sa, sb, ga, gb), "totals": {"a": ta, "b": tb, "delta": _totals_delta(ta, tb)},
          "memory": memory.compare(a, b, target), "sass": sass_mixes(sa.kernels, sb.kernels, target), "timing": None, "numerics": None,
          "notes": notes}

def pass_changes(ka: Sequence[KernelRecord], kb: Sequence[KernelRecord]) -> dict[str, Any]:
  """How the host codegen passes of a group's kernels differ, by pass name (two tinygrads' pipelines: a pass one has and the other has
  not; the same pass matching more or less): {only_a, only_b: names, in the order they ran; renamed: [{a, b}], a name only in A and
  one only in B that read alike (difflib, 0.8: "remove_reduce" and "remove reduces"), probably one pass renamed; changed: [{name, a,
  b}] matches; same: how many passes match equally}. A kernel read without its passes (a light one) counts none."""
  def by_name(ks: Sequence[KernelRecord]) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in ks:
      for p in k.get("passes") or []: out[p["name"]] = out.get(p["name"], 0) + p["matches"]
    return out
  a, b = by_name(ka), by_name(kb)
  only_a, only_b = [n for n in a if n not in b], [n for n in b if n not in a]
  renamed = []
  for n in list(only_a):
    if (alike := difflib.get_close_matches(n, only_b, n=1, cutoff=0.8)):
      renamed.append({"a": n, "b": alike[0]})
      only_a.remove(n)
      only_b.remove(alike[0])
  return {"only_a": only_a, "only_b": only_b, "renamed": renamed,
          "changed": [{"name": n, "a": a[n], "b": b[n]} for n in a if n in b and a[n] != b[n]], "same": sum(1 for n in a if b.get(n) == a[n])}

def sass_mixes(ka: list[KernelRecord], kb: list[KernelRecord], target: str) -> dict[str, Any] | None:
  """Both sides' SASS on `target` summed over their kernels: instructions, the highest peak of live registers, spill instructions and
  the instruction mix side by side (most first); None unless every kernel of both sides has its SASS."""
  sides: list[dict[str, Any]] = []
  for ks in (ka, kb):
    got = [x for k in ks if (f := _facts(k, target)) is not None and (x := sass_in(f))]
    if not ks or len(got) != len(ks): return None
    sides.append({"count": sum(x["count"] for x in got), "peak_live": max((x["peak_live"] or 0) for x in got),
                  "spills": sum(x["spills"] for x in got), "mix": sum((Counter(x["mix"]) for x in got), Counter())})
  ma, mb = sides[0].pop("mix"), sides[1].pop("mix")
  ops = sorted(set(ma) | set(mb), key=lambda o: (-max(ma[o], mb[o]), o))
  return {"a": sides[0], "b": sides[1], "mix": [{"op": o, "a": ma[o], "b": mb[o]} for o in ops]}

def _totals_delta(ta: dict[str, Any], tb: dict[str, Any]) -> dict[str, Any]:
  return {k: tb[k] - ta[k] for k, v in ta.items() if isinstance(v, (int, float))}

@dataclass(frozen=True)
class Rebuilt:
  """What a diff rebuilds from the two rewrite blobs: each side's kernel AST graphs by trace number, and the rules each of its passes
  asked for went through, in the order asked (RewriteBlob.rules_fired)."""
  graphs_a: dict[int, Any]
  graphs_b: dict[int, Any]
  rules_a: list[list[dict[str, Any]]]
  rules_b: list[list[dict[str, Any]]]

def kernel_graphs(a: TraceRecord, b: TraceRecord, a_blob: bytes, b_blob: bytes, a_sinks: Sequence[int | None], b_sinks: Sequence[int | None],
                  timeout_s: float, a_steps: Sequence[Sequence[int]] = (), b_steps: Sequence[Sequence[int]] = ()) -> Rebuilt:
  """Each side's kernel AST graphs and its passes' rules (a_steps, b_steps: [group, step] each), rebuilt from its rewrite blob in a
  worker of the tinygrad that wrote it: one worker for both where that is one tinygrad, one each where they differ (WorkerFailed where
  a blob does not load)."""
  va, vb = versions.recorded(a), versions.recorded(b)
  if va == vb:
    args = {"a_blob": a_blob, "b_blob": b_blob, "a_sinks": a_sinks, "b_sinks": b_sinks, "a_steps": a_steps, "b_steps": b_steps}
    both, _ = call_in_worker("explorer.analysis.diff_worker:kernel_graphs", args, timeout_s=timeout_s, env={"VIZ": "0"}, tinygrad=va)
    return Rebuilt(*both["graphs"], *both["rules"])
  def side(blob: bytes, sinks: Sequence[int | None], steps: Sequence[Sequence[int]], version: str | None) -> dict[str, Any]:
    got, _ = call_in_worker("explorer.analysis.diff_worker:side_graphs", {"blob": blob, "sinks": sinks, "steps": steps}, timeout_s=timeout_s,
                            env={"VIZ": "0"}, tinygrad=version)
    return cast(dict[str, Any], got)
  sa, sb = side(a_blob, a_sinks, a_steps, va), side(b_blob, b_sinks, b_steps, vb)
  return Rebuilt(sa["graphs"][0], sb["graphs"][0], sa["rules"][0], sb["rules"][0])

RULE_KERNELS = 64  # a side's kernels whose passes' rules a diff compares, at most: a program's thousands are left to their pages

def pass_steps(groups: Sequence[tuple[Sequence[KernelRecord], Sequence[KernelRecord]]]) -> tuple[list[list[int]], list[list[int]]]:
  """[group, step] of every host codegen pass of the groups' kernels, each side's (the first RULE_KERNELS kernels of a side)."""
  def steps(ks: Iterable[KernelRecord]) -> list[list[int]]:
    return [[g, s] for k in itertools.islice(ks, RULE_KERNELS) for p in k.get("passes") or []
            if (g := p.get("group")) is not None and (s := p.get("step")) is not None]
  return steps(k for ka, _ in groups for k in ka), steps(k for _, kb in groups for k in kb)

def rule_changes(ka: Sequence[KernelRecord], kb: Sequence[KernelRecord], fired_a: Mapping[tuple[int, int], list[dict[str, Any]]],
                 fired_b: Mapping[tuple[int, int], list[dict[str, Any]]], at_most: int = 12) -> list[dict[str, Any]] | None:
  """How the rules a group's passes went through differ, pass by pass (a pass in both, or a pair pass_changes reads as renamed): the
  rules that fired on one side only ({code, at, count}, most first), a pair of them calling the same function with its pattern written
  anew (reworded: {action, a, b, at_a, at_b, count_a, count_b}) and those that fired more or less ({code, at_a, at_b, a, b}), each list
  cut at at_most (its length in only_a_n, only_b_n, reworded_n, changed_n). A rule is named by its code, not its line (which moves between
  versions). None where a side's passes were not looked at (fired_*: by (group, step), as kernel_graphs read them)."""
  def by_pass(ks: Sequence[KernelRecord], fired: Mapping[tuple[int, int], list[dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]] | None:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for k in ks:
      for p in k.get("passes") or []:
        if (g := p.get("group")) is None or (st := p.get("step")) is None: continue  # (a pass recorded without its place)
        if (rules := fired.get((g, st))) is None: return None
        mine = out.setdefault(p["name"], {})
        for r in rules:
          if (got := mine.get(r["code"])) is None: mine[r["code"]] = dict(r)
          else: got["count"] += r["count"]
    return out
  a, b = by_pass(ka, fired_a), by_pass(kb, fired_b)
  if a is None or b is None: return None
  pairs = [(n, n) for n in a if n in b] + [(r["a"], r["b"]) for r in pass_changes(ka, kb)["renamed"]]
  out = []
  for na, nb in pairs:
    ra, rb = a[na], b[nb]
    only_a, only_b = [r for c, r in ra.items() if c not in rb], [r for c, r in rb.items() if c not in ra]
    reworded = _reworded(only_a, only_b)
    changed = [{"code": c, "at_a": r["at"], "at_b": rb[c]["at"], "a": r["count"], "b": rb[c]["count"]}
               for c, r in ra.items() if c in rb and rb[c]["count"] != r["count"]]
    if only_a or only_b or changed or reworded:
      most = functools.partial(sorted, key=lambda r: -r["count"])
      out.append({"a": na, "b": nb, "only_a": most(only_a)[:at_most], "only_b": most(only_b)[:at_most], "only_a_n": len(only_a),
                  "only_b_n": len(only_b), "reworded": reworded[:at_most], "reworded_n": len(reworded),
                  "changed": sorted(changed, key=lambda r: -abs(r["b"] - r["a"]))[:at_most], "changed_n": len(changed)})
  return out

RULE_ACTION = re.compile(r",\s*([A-Za-z_][\w.]*)\s*\)\s*,?\s*$")  # a rule's named function, last in its (UPat, fn) tuple

def _reworded(only_a: list[dict[str, Any]], only_b: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """Rules only in A and only in B that call the same named function (its pattern written anew, as 0.14 did fold_const_alu's): paired
  and taken out of only_a and only_b. A lambda names none."""
  def action(r: dict[str, Any]) -> str | None: return m.group(1) if (m := RULE_ACTION.search(r["code"])) else None
  by_b: dict[str, dict[str, Any]] = {}
  for r in only_b:
    if (n := action(r)) is not None: by_b.setdefault(n, r)
  out = []
  for r in list(only_a):
    if (n := action(r)) is not None and (rb := by_b.pop(n, None)) is not None:
      out.append({"action": n, "a": r["code"], "b": rb["code"], "at_a": r["at"], "at_b": rb["at"], "count_a": r["count"], "count_b": rb["count"]})
      only_a.remove(r)
      only_b.remove(rb)
  return out

def _attach_graphs(groups: list[dict[str, Any]], sa: Side, sb: Side, a_blob: bytes, b_blob: bytes, timeout_s: float, notes: list[str],
                   whole: Sequence[tuple[list[KernelRecord], list[KernelRecord]]]) -> None:
  a_sinks, b_sinks = [k["ast_sink"] for k in sa.kernels], [k["ast_sink"] for k in sb.kernels]
  a_steps, b_steps = pass_steps(whole)
  try: got = kernel_graphs(sa.trace, sb.trace, a_blob, b_blob, a_sinks, b_sinks, timeout_s, a_steps, b_steps)
  except WorkerFailed as e:
    notes.append(f"graph diff failed: {e}")
    return
  fired_a = {(g, s): r for (g, s), r in zip(a_steps, got.rules_a, strict=False)}
  fired_b = {(g, s): r for (g, s), r in zip(b_steps, got.rules_b, strict=False)}
  for g, (wa, wb) in zip(groups, whole, strict=False):
    g["graph"] = graph_diff([got.graphs_a[sa.kernels[k["index"]]["ast_sink"]] for k in g["a"]],
                            [got.graphs_b[sb.kernels[k["index"]]["ast_sink"]] for k in g["b"]])
    g["rules"] = rule_changes(wa, wb, fired_a, fired_b)

# ***** measured: timing and outputs, each in one worker *****

def comparable(a: Mapping[str, Any], b: Mapping[str, Any], kind: str = "numerics") -> str | None:
  """Why the two cannot be measured against each other here (rebuilt from their specs, on one device), or None; kind: "timing" (two
  tinygrads take turns, each in a worker of its own environment: explorer.tracing.pipeline.turns) or "numerics" (both run in one worker, one
  tinygrad). A side may be a queue job's (explorer.queue.jobs.measure), checked for its env's device only: its spec and env may be
  absent."""
  if a.get("spec") is None or b.get("spec") is None:
    return "a captured program cannot be rebuilt here: time it when capturing it (capture(time=True), or trace --script without --no-time)"
  if a.get("spec") != b.get("spec"): return "the specs differ"
  da, db = (a.get("env") or {}).get("device"), (b.get("env") or {}).get("device")
  if da != db: return f"they ran on different devices ({da} and {db})"
  ta, tb = tinygrads_of(a, b)
  if ta != tb and kind != "timing": return f"they ran on different tinygrads ({ta} and {tb}): outputs are compared within one tinygrad"
  return None

def tinygrads_of(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[str, str]:
  """The tinygrad each side asked for (none: the server's own)."""
  ta, tb = ((t.get("variant") or {}).get("tinygrad") or TINYGRAD for t in (a, b))
  return ta, tb

def _variant_on(t: Mapping[str, Any]) -> dict[str, Any]: return {**t["variant"], "device": t["env"]["device"]}

def _quantile(xs: list[float], q: float) -> float:
  xs = sorted(xs)
  pos = q * (len(xs) - 1)
  lo = int(pos)
  return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)

def ratio_stats(a: list[float], b: list[float]) -> RatioStats:
  """B/A repeat by repeat (an interleaved repeat runs both): the median ratio with its quartiles and range."""
  rs = [y / x for x, y in zip(a, b, strict=False) if x > 0]
  if not rs: return {"n": 0}
  q1, q3 = _quantile(rs, 0.25), _quantile(rs, 0.75)
  return {"median": statistics.median(rs), "q1": q1, "q3": q3, "iqr": q3 - q1, "min": min(rs), "max": max(rs), "n": len(rs)}

def remeasure_interleaved(a_trace: Mapping[str, Any], b_trace: Mapping[str, Any], repeats: int = 20, warmup: int = 3,
                          timeout_s: float = DEFAULT_TIMEOUT_S, progress: Any = None) -> dict[str, Any]:
  """Time A and B interleaved (A, B, B, A...) in one fresh worker, tracking off; the ratio B/A with its spread. Two tinygrads take
  turns instead, each side in a worker of its own environment (explorer.tracing.pipeline.turns), by the clock both name.
  progress(stage, status, detail) hears the worker: compiling each variant, waiting for the device, the repeats."""
  if (why := comparable(a_trace, b_trace, "timing")) is not None: return {"compared": False, "reason": f"not timed: {why}"}
  ta, tb = tinygrads_of(a_trace, b_trace)
  variants = [_variant_on(a_trace), _variant_on(b_trace)]
  try:
    timed: list[VariantTiming]
    if ta != tb:
      from explorer.tracing.pipeline.turns import time_across
      timed = cast("list[VariantTiming]", time_across(a_trace["spec"], variants, [versions.older(ta), versions.older(tb)],
                                                      a_trace["env"]["device"], warmup, repeats, timeout_s, progress))
    else:
      args = {"spec": a_trace["spec"], "variants": variants, "warmup": warmup, "repeats": repeats}
      timed, _ = call_in_worker("explorer.tracing.pipeline.timing:time_interleaved", args, progress, timeout_s=timeout_s, env={"VIZ": "0"})
  except WorkerFailed as e: return {"compared": False, "reason": f"timing failed: {e}"}
  ra, rb = timed
  if ra.get("method") != rb.get("method"):
    return {"compared": False, "reason": f"not timed: the two sides' clocks differ ({ra.get('method')} and {rb.get('method')})"}
  ma, mb = ra["total_s"]["median"], rb["total_s"]["median"]
  out: dict[str, Any] = {"compared": True, "device": ra["device"], "compiler": ra["compiler"], "fallback": ra["fallback"] or rb["fallback"],
                         "method": ra.get("method"), "notice": ra.get("notice"), "warmup": warmup, "repeats": repeats,
                         "a_total_s": ra["total_s"], "b_total_s": rb["total_s"], "ratio": paired_ratio(ra["samples"], rb["samples"]),
                         "ratio_of_medians": mb / ma if ma > 0 else None, "headline": HEADLINE,
                         **({"tinygrads": [ta, tb]} if ta != tb else {})}
  if "span_samples" in ra and "span_samples" in rb:
    out.update(a_span_s=ra["span_s"], b_span_s=rb["span_s"], span_ratio=paired_ratio(ra["span_samples"], rb["span_samples"]),
               replay=ra.get("replay"))
  return {**out, "verdict": time_headline(out), "span_verdict": time_headline(out, "span")}

HEADLINE = "kernels"  # what a diff's and a study's headline ratio quotes: the kernels' times (each alone) summed, not the span

def paired_ratio(a: list[float], b: list[float]) -> RatioStats:
  """B/A repeat by repeat with its quartiles, range and the median's 95% interval (n 0 where no repeat ran)."""
  ratio = ratio_stats(a, b)
  if ratio["n"]:
    interval = stats.median_ratio(a, b)
    ratio["ci_low"], ratio["ci_high"] = interval["ci_low"], interval["ci_high"]
  return ratio

def compare_outputs(a_trace: Mapping[str, Any], b_trace: Mapping[str, Any], timeout_s: float = DEFAULT_TIMEOUT_S,
                    progress: Any = None) -> dict[str, Any]:
  """Both variants run on the traces' seeded inputs in one worker: how far apart their outputs are."""
  if (why := comparable(a_trace, b_trace)) is not None: return {"compared": False, "reason": f"not compared: {why}"}
  try:
    args = {"spec": a_trace["spec"], "variants": [_variant_on(a_trace), _variant_on(b_trace)]}
    res, _ = call_in_worker("explorer.analysis.diff_worker:output_difference", args, progress, timeout_s=timeout_s, env={"VIZ": "0"})
  except WorkerFailed as e: return {"compared": False, "reason": f"output comparison failed: {e}"}
  return {"compared": True, **res}

DIFF_STEPS = ("structure", "timing", "outputs")

def full_diff(a: TraceRecord, b: TraceRecord, a_blobs: dict[str, bytes] | None = None, b_blobs: dict[str, bytes] | None = None, target: str = "cuda",
              time: bool = True, repeats: int = 20, warmup: int = 3, numerics: bool = True, timeout_s: float = DEFAULT_TIMEOUT_S,
              progress: Any = None) -> dict[str, Any]:
  """diff_traces, plus the interleaved timing and the output comparison; progress hears of each of DIFF_STEPS (done or skipped).
  a_blobs, b_blobs: each side's rewrite blobs by key ("" the host's; TraceResult.blobs). The target's analyses (peak live values) and
  compile facts (registers) are computed first where a side lacks them and keeps the blob they are computed from
  (explorer.tracing.enrichments.enrich)."""
  from explorer.tracing.enrichments.enrich import add_analysis, add_facts
  step = progress or (lambda stage, status, detail: None)
  step("structure", "start", f"{target} analyses and compile facts where missing, kernels matched, graphs rebuilt in a worker")
  a_blobs, b_blobs = a_blobs or {}, b_blobs or {}
  analysed = [add_analysis(t, blobs, [target], timeout_s=timeout_s) for t, blobs in ((a, a_blobs), (b, b_blobs))]
  a, b = (add_facts(t, [target], timeout_s=timeout_s) for t in analysed)
  d = diff_traces(a, b, a_blobs.get(""), b_blobs.get(""), target, timeout_s)
  step("structure", "done", f"{len(d['groups'])} groups")
  step("timing", "start" if time else "skipped", f"A and B interleaved, {warmup} warmup + {repeats} repeats" if time else "")
  if time: d["timing"] = remeasure_interleaved(a, b, repeats, warmup, timeout_s)
  if time: step("timing", "done", "")
  step("outputs", "start" if numerics else "skipped", "")
  if numerics: d["numerics"] = compare_outputs(a, b, timeout_s)
  if numerics: step("outputs", "done", "")
  return d

# ***** the printed summary *****

def headline(d: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
  """The diff in one line, B against A, what a reader wants first: bytes moved, FLOPs, peak live values and registers (the most any kernel
  of a side needs), and, once measured, the time ratio with its 95% interval."""
  ta, tb = d["totals"]["a"], d["totals"]["b"]
  who = ", ".join(f"{k} {v[1]}" for k, v in d["variant_changes"].items()) or "B"
  moved = tb["bytes_moved"] - ta["bytes_moved"]
  parts = [f"{fmt_bytes(abs(moved))} {'less' if moved < 0 else 'more'} moved" if moved else "the same bytes moved"]
  if ta["flops"] != tb["flops"]: parts.append(f"FLOPs {si(ta['flops'])} -> {si(tb['flops'])}")
  for key, label in (("max_live", "peak live values"), ("registers", "registers"), ("sass_peak_live", "SASS peak live registers")):
    sides = [[x for g in d["groups"] if (x := g["metrics"][s][key]) is not None] for s in ("a", "b")]
    if all(sides): parts.append(f"{label} {max(sides[0])} -> {max(sides[1])}")
  if (sm := d["sass"]) is not None: parts.append(f"SASS instructions {sm['a']['count']} -> {sm['b']['count']}")
  if timing_text := time_headline(timing): parts.append(timing_text)
  return f"{who}: {', '.join(parts)}"

def time_headline(t: Mapping[str, Any] | None, figure: str = "kernels") -> str | None:
  """B's time against A's in words, the interval running the same way as the words: "B is 2.20x slower (95% interval 2.17-2.22x)".
  figure: "kernels" (the kernels each alone, summed: the headline) or "span" (the schedule replayed back to back)."""
  if not t or not t["compared"]: return None
  r = t.get("ratio") if figure == "kernels" else t.get("span_ratio")
  if not r or not r["n"]: return None  # compared: n 0 where no repeat ran; a span absent in diffs stored before spans were measured
  ci = (r["ci_low"], r["ci_high"]) if "ci_low" in r else None
  return ratio_words(r["median"], ci)

def summary(d: dict[str, Any]) -> str:
  out = [headline(d, d["timing"]), f"A: {d['a']['label']}   device={d['a']['device']}", f"B: {d['b']['label']}   device={d['b']['device']}"]
  if d["variant_changes"]: out.append("changed: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in d["variant_changes"].items()))
  if not d["specs_match"]: out.append("note: the specs differ (no timing or output comparison)")
  for side in ("a", "b"):
    out += [f"{side.upper()} FAILED in {f['stage']}: {f['error']} (the diff covers what it recorded)" for f in d[side]["failures"]]
  def ks(refs: list[dict[str, Any]]) -> str: return ", ".join(f"{k['name']} ({k['role']})" for k in refs) or "-"
  rows = []
  for g in d["groups"]:
    dl = g["metrics"]["delta"]
    rel = relation_label(g)
    gr = "-" if g["graph"] is None else f"{len(g['graph']['only_a'])}/{len(g['graph']['only_b'])}"
    ma, mb = g["metrics"]["a"], g["metrics"]["b"]
    def a_to_b(key: str, ma: dict[str, Any] = ma, mb: dict[str, Any] = mb) -> str:
      return "-" if ma[key] is None or mb[key] is None else f"{ma[key]} -> {mb[key]}"
    rows.append((ks(g["a"]), ks(g["b"]), rel, fmt_signed(dl["alu"]), fmt_signed(dl["loads"]), fmt_signed(dl["flops"], si),
                 fmt_signed(dl["bytes"], fmt_bytes), a_to_b("max_live"), a_to_b("registers"), gr))
  out += ["", f"kernels, matched by role and data flow ({d['target']} figures):",
          table(("A kernel(s)", "B kernel(s)", "relation", "d ALU", "d loads", "d FLOPs", "d bytes", "peak live", "registers", "AST nodes only A/B"),
                rows)]
  out += [f"  {s}" for s in d["fusions"]]
  for g in d["groups"]:  # where the two pipelines differ (two tinygrads): the passes, by name
    if (ps := g.get("passes")) and (ps["only_a"] or ps["only_b"] or ps["renamed"]):
      said = [f"{len(ps[k])} only in {k[-1].upper()} ({', '.join(ps[k][:6])}{', ...' if len(ps[k]) > 6 else ''})"
              for k in ("only_a", "only_b") if ps[k]]
      said += [f"renamed {', '.join(r['a'] + ' -> ' + r['b'] for r in ps['renamed'])}"] if ps["renamed"] else []
      out.append(f"  group {g['index']}'s codegen passes: " + "; ".join(said))
  for side in ("a", "b"):
    for b in d["buffers"][f"only_{side}"]: out.append(f"only in {side.upper()}: {b['name']} {b['what']}, {si(b['nbytes'], 'B')} on {b['device']}")
  out.append("")
  ta, tb = d["totals"]["a"], d["totals"]["b"]
  for key, fmt in (("kernels", str), ("copies", str), ("buffers", str), ("flops", si), ("bytes_moved", fmt_bytes)):
    out.append(f"{key.replace('_', ' ')}: {fmt(ta[key])} -> {fmt(tb[key])} ({fmt_signed(tb[key] - ta[key], fmt)})")
  if (mm := d["memory"]) is not None:
    out.append(f"memory peak: {fmt_bytes(mm['a']['peak_bytes'])} -> {fmt_bytes(mm['b']['peak_bytes'])} "
               f"(intermediates {fmt_bytes(mm['a']['intermediate_bytes'])} -> {fmt_bytes(mm['b']['intermediate_bytes'])})")
  out += [line for line in (_timing_line(d["timing"]), _numerics_line(d["numerics"])) if line is not None]
  out += [f"note: {n}" for n in d["notes"]]
  return "\n".join(x for x in out if x is not None)

def _timing_line(t: dict[str, Any] | None) -> str | None:
  if t is None: return None
  if not t["compared"]: return f"timing: {t['reason']}"
  r, method = t["ratio"], METHODS[m].label if (m := t.get("method")) in METHODS else "tinygrad's timer"
  line = f"timing, the kernels each alone and summed ({method}, {r['n']} interleaved repeats): {time_headline(t)}; " \
         f"A {t['a_total_s']['median']*1e3:.4f} ms, B {t['b_total_s']['median']*1e3:.4f} ms on {t['device']}"
  if (span := time_headline(t, "span")) is not None:
    line += f"\ntiming, the schedule replayed back to back (its span): {span}; A {t['a_span_s']['median']*1e3:.4f} ms, " \
            f"B {t['b_span_s']['median']*1e3:.4f} ms"
  return line + (f" ({t['fallback']})" if t["fallback"] else "")

def _numerics_line(n: dict[str, Any] | None) -> str | None:
  if n is None: return None
  if not n["compared"]: return f"outputs: {n['reason']}"
  return f"outputs: max abs difference {n['max_abs']:.3g} ({n['max_rel']:.3g} of the largest |output| {n['scale']:.3g})"
