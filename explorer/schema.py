"""The trace, typed: every record the engine writes (explorer.tracing.pipeline.trace) and every reader reads, as TypedDicts (a trace stays a plain
dict: JSON in, JSON out, no conversion on the hot path), and `validate_trace`, which checks a trace from outside this process (a queue
worker's result, a trace file) as strictly as a request: every field's type, no unknown field, bounded strings, and its spec, variant
and device through their own validation. Imports nothing from the explorer but the model (explorer.spec)."""
from __future__ import annotations
import functools
import math
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, NotRequired, Required, cast
from pydantic import AfterValidator, ConfigDict, Field, Strict, StringConstraints, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict
from explorer.spec import DEVICE_RE, ConvSpec, SpecError, Variant
from explorer.stages import STAGES, TRACE_SCHEMA
from explorer.targets import TARGETS

Name = Annotated[str, StringConstraints(max_length=256)]       # kernel, op, dtype, role, target and pass names
Line = Annotated[str, StringConstraints(max_length=8192)]      # labels, notes, one-line messages, rules
Text = Annotated[str, StringConstraints(max_length=64 << 20)]  # sources, listings, tracebacks, a program's source
Count = Annotated[int, Field(ge=0)]
Dim = int | Name  # a dimension: a number, or one a Variable sets, as tinygrad renders it ("toks", "(start_pos+1)")
Seconds = Annotated[float, Field(ge=0)]
Size = list[int | Name]  # a launch dimension is a number, or a symbolic one's text

STRICT = ConfigDict(extra="forbid", strict=True)

def _device(d: str) -> str:
  if not DEVICE_RE.fullmatch(d): raise ValueError(f"{d!r:.60} is not a device name such as CPU or CUDA:1")
  return d

Device = Annotated[Name, AfterValidator(_device)]

# ***** what a kernel is, on one target *****

@with_config(STRICT)
class Pass(TypedDict):
  """A rewrite pass: tinygrad's graph_rewrite name, its nesting depth, how many rewrites matched, and where its graphs are in the
  rewrite blob that recorded it (group, step, sink)."""
  name: Name
  depth: Count
  matches: Count
  group: NotRequired[Count | None]
  step: NotRequired[Count | None]
  sink: NotRequired[Count | None]

@with_config(STRICT)
class PassGroup(TypedDict):
  name: Line
  passes: list[Pass]

@with_config(STRICT)
class Occupancy(TypedDict):
  """Theoretical occupancy of the kernel's block on its arch: resident warps over the SM's maximum, and what limits them."""
  occupancy: float
  warps_per_sm: Count
  max_warps_per_sm: Count
  blocks_per_sm: Count
  block_threads: Count
  limited_by: list[Name]

@with_config(STRICT)
class Disassembly(TypedDict):
  """The compiled kernel as its compiler shows it."""
  kind: Line  # e.g. "SASS (cuobjdump -sass)", "PTX (nvcc)", "x86-64 assembly (clang, tinygrad's CPU flags)"
  text: Text

@with_config(STRICT)
class SassInstruction(TypedDict):
  """One SASS instruction as nvdisasm lists it: its byte offset, text (predicate, opcode, operands), opcode, the source line it came
  from (absent: none recorded), and the general (live) and uniform (ulive) registers live there (absent for the padding after the
  last branch, which never runs)."""
  offset: Count
  text: Line
  op: Name
  line: NotRequired[Count]
  live: NotRequired[Count]
  ulive: NotRequired[Count]

@with_config(STRICT)
class Sass(TypedDict):
  """The compiled kernel's SASS with lines and live registers (explorer.tracing.compilers.nvdisasm): lines_of names what its lines number ("cuda":
  the CUDA C, "ptx": the PTX; None: no line information), count the instructions (the first 4,000 kept, left_out the rest),
  registers ptxas' count (what it allocates: the highest register named, highest_register, plus one and the two it reserves),
  peak_live the most general registers live at one instruction (at peak_offset, from line peak_line), spills the local loads and
  stores, mix the instructions per opcode family (FFMA, LDG, ...), most first."""
  tool: Line
  lines_of: Name | None
  count: Count
  registers: Count | None
  highest_register: Count | None
  peak_live: Count | None
  peak_offset: Count | None
  peak_line: Count | None
  spills: Count
  mix: dict[Name, Count]
  instructions: list[SassInstruction]
  left_out: Count

@with_config(STRICT)
class CompileFacts(TypedDict):
  """The source compiled by a real compiler of the machine that traced it. ok: True compiled, False failed (message: the compiler's
  error), None not compiled (message: which compiler is missing and how to install it, or why none can run here). CUDA and PTX add
  ptxas' report (per thread registers, spills, shared memory, stack) and the occupancy."""
  ok: bool | None
  compiler: Line | None
  message: Text
  registers: NotRequired[Count | None]
  barriers: NotRequired[Count | None]
  stack_bytes: NotRequired[Count | None]
  spill_store_bytes: NotRequired[Count | None]
  spill_load_bytes: NotRequired[Count | None]
  shared_bytes: NotRequired[Count | None]
  occupancy: NotRequired[Occupancy | None]
  disasm: NotRequired[Disassembly | None]
  sass: NotRequired[Sass | None]       # CUDA and PTX, where nvdisasm is; else None and
  sass_note: NotRequired[Line | None]  # why there is none (which tool is missing and how to install it, or its message)

@with_config(STRICT)
class LiveRange(TypedDict):
  """A value's live range in the linear UOps."""
  uop: NotRequired[Count]          # where the value is defined (index in the linear UOps)
  op: NotRequired[Name]
  until: Count                     # its last use, extended to the END of any loop it is used in
  lanes: Count
  line: NotRequired[Count | None]  # the source line that defines it (from line_map)

@with_config(STRICT)
class Pressure(TypedDict):
  """Register pressure from the linearized UOps: values live at once (a value from its definition to its last use, extended to the END
  of a loop it is used in; a vector once per lane, a register array once per element), the peak and where (max_live_line: its source
  line, from line_map), the curve (at most 512 [uop index, live] points, each the peak of its stretch) and the longest live ranges."""
  ssa_values: Count
  max_live: Count
  max_live_at: int
  curve: list[list[int]]
  longest: list[LiveRange]
  max_live_line: NotRequired[Count | None]

@with_config(STRICT)
class SpecViolation(TypedDict):
  """One UOp a spec refused."""
  index: Count     # in the checked graph's toposort
  op: Name
  dtype: Name
  trace_num: int   # the UOp's number in the trace's rewrite blob
  message: Text    # type_verify's

@with_config(STRICT)
class SpecCheck(TypedDict):
  """One of tinygrad's spec PatternMatchers (tinygrad/uop/spec.py) run over every UOp of a graph, each violation kept (type_verify stops
  at the first): spec_tensor on the tensor graph and the kernel ASTs, spec_kernel_graph on the schedule's calls, spec_program on each
  target's program."""
  spec: Name
  ok: bool
  checked: Count
  violations: list[SpecViolation]
  violation_count: Count

@with_config(STRICT)
class LoopRange(TypedDict):
  """A loop: its axis, its size (a number, or a symbolic size's text) and its kind."""
  axis: int | Name
  size: int | Line | None
  kind: Name

LoopSplit = TypedDict("LoopSplit", {"pass": Name, "step": Count, "ranges": list[LoopRange], "into": list[LoopRange], "rule": Line,
                                    "rule_source": Text})
LoopSplit.__pydantic_config__ = STRICT  # type: ignore[attr-defined]
LoopSplit.__doc__ = """Where a range-splitting rewrite cut loops (0.14's "split ranges" pass, pm_split_ranges in tinygrad/codegen/simplify.py):
the loops it cut, the loops they became, and the rule, with its source read from tinygrad's file when the trace ran."""

LineMapRows = list[Annotated[tuple[Count, list[Count]], Field(strict=False)]] | None  # [source line, [linear uop indexes]]; JSON has no tuples

@with_config(STRICT)
class TargetRecord(TypedDict):
  """One kernel as one target's pipeline made it (the host's record has the same fields): its renderer configured for `arch`, the
  variant's opt setting (BEAM needs the device: a deviceless target gets heuristic opts, and notes say so), tinygrad's Estimates from
  its linearized UOps, and the source. line_map: [source line (1-based), [indexes into the linear UOps]] for every line of the kernel
  body (the UOps whose rendering turn wrote the line, and those inlined into it), or line_map_note says why there is none;
  linear_nums: each linear UOp's trace number (graph nodes carry it as `num`); compiled_source: the source as tinygrad's compiler
  hands it on, where that differs (PTX: the VERSION and TARGET placeholders filled)."""
  name: Name
  arch: Name | None
  opts: list[Line]
  global_size: Size
  local_size: Size | None
  linear_uops: Count
  ops: dict[Name, Count]
  flops: Count
  bytes: Count
  lds: NotRequired[int | None]
  passes: list[Pass]
  uops_listing: list[Text]
  source: Text
  pressure: NotRequired[Pressure | None]
  spec: NotRequired[SpecCheck | None]
  loop_splits: NotRequired[list[LoopSplit]]
  line_map: NotRequired[LineMapRows]
  line_map_note: NotRequired[Line | None]
  linear_nums: NotRequired[list[int] | None]
  program_sink: NotRequired[int | None]  # the program's SINK by trace number (the analysis checks tinygrad's program spec over it)
  rewrites: NotRequired[Name | None]     # the rewrite blob its passes address, where not its target's (a record computed on first view)
  compiled_source: NotRequired[Text | None]
  notes: list[Line]
  compile: CompileFacts | None

ANALYSIS_FIELDS = ("pressure", "line_map", "line_map_note", "loop_splits", "spec")

class Analysis(TypedDict):
  """What a page asks of a record beyond what tinygrad made, computed with it or when first viewed (an enrichment): the line map, the
  live values, the loops split and tinygrad's program spec (TargetRecord's fields of these names)."""
  pressure: Pressure | None
  line_map: LineMapRows
  line_map_note: Line | None
  loop_splits: list[LoopSplit]
  spec: SpecCheck | None

@with_config(STRICT)
class TimeStats(TypedDict):
  """A time (seconds) from n samples, and how it was measured (explorer.clocks): the clock (`method`), the cache state (`l2`), the 95%
  interval of its median. Records stored before clocks were named lack all three: explorer.clocks.method_of says what they were."""
  median: Seconds
  mean: Seconds
  std: Seconds
  min: Seconds
  n: Count
  method: NotRequired[Literal["host", "cupti", "events-held", "events"]]
  l2: NotRequired[Literal["flushed", "warm"]]
  ci_low: NotRequired[Seconds]
  ci_high: NotRequired[Seconds]
  batch: NotRequired[Count]  # a batched figure: each sample timed this many launches in one held event pair, divided by it
  samples: NotRequired[list[Seconds]]  # a schedule's (Timing.total_s, span_s): each repeat's, for sums over a program's realizes

@with_config(STRICT)
class BoundTime(TypedDict):
  """A symbolic kernel timed alone (as KernelRecord.time_s) with its variables bound to `variables`: one of the value sets it ran with."""
  variables: dict[Name, int]
  time_s: TimeStats

@with_config(STRICT)
class Storage(TypedDict):
  reg_buffers: Count
  reg_values: Count
  local_buffers: Count
  local_bytes: Count

@with_config(STRICT)
class KernelSpec(TypedDict):
  ast: SpecCheck
  program: NotRequired[SpecCheck]  # traces before analyses were enrichments; now the host's record has its own (TargetRecord.spec)

@with_config(STRICT)
class BeamCandidate(TypedDict):
  """One candidate tinygrad's BEAM search timed: its opts, its time (the least of its runs) and round, and whether it was kept."""
  opts: list[Line]
  time_s: Seconds
  round: Count
  kept: bool
  why: NotRequired[Line | None]      # why it was dropped (None: kept)

@with_config(STRICT)
class BeamRound(TypedDict):
  round: Count
  timed: Count
  best_s: Seconds
  kept: Count

@with_config(STRICT)
class BeamRecord(TypedDict):
  """What BEAM tried for a kernel on the trace's device (kernels[i].beam): every timed candidate by round, and the winner's path."""
  width: Count
  rounds: list[BeamRound]
  candidates: list[BeamCandidate]
  chosen: list[Line]
  path: list[list[Line]]
  note: Line
  method: NotRequired[Literal["host", "cupti", "events-held", "events"]]  # BEAM's own timer (tinygrad's): host on a CPU, events on a GPU

@with_config(STRICT)
class KernelAxis(TypedDict):
  """An axis of a kernel scheduled by hand, numbered as tinygrad's apply_opt numbers it (explorer.tracing.tg.kernel_axes): its
  size (a symbolic one's text), kind (global, local, loop, reduce, upcast, unroll, ...), and a reduce axis's number for UNROLL and for
  GROUP/GROUPTOP, which count only the unrollable and the reduce axes."""
  axis: Count
  size: int | Name
  kind: Name
  unroll: Count | None
  group: Count | None

@with_config(STRICT)
class SourceLine(TypedDict):
  file: Line
  line: Count

@with_config(STRICT)
class OnnxNode(TypedDict):
  """The node of an ONNX graph tinygrad's OnnxRunner was computing: its op type, index in the graph, name ("" where the runner was
  made before the capture, or the node has none) and first outputs."""
  op: Name
  index: Count
  name: Line
  outputs: Annotated[list[Line], Field(max_length=4)]

@with_config(STRICT)
class Instance(TypedDict):
  """A module object a model line ran inside: its class and which of that class's objects it is, in the order the capture met them."""
  cls: Name
  index: Count

@with_config(STRICT)
class Provenance(TypedDict):
  """A Tensor function whose UOps a kernel computes (tinygrad's metadata), and the model's line that called it (None where not
  recorded): the program's own, or that of a model shipped inside tinygrad (tinygrad.llm), with the program's line that ran it
  (`caller`). inferred: the kernel's own compute carries none (a copy, a fill), so it is taken from the kernels its output feeds."""
  fn: Name
  file: Line | None
  line: Count | None
  backward: bool
  via: NotRequired[Line | None]  # the tinygrad function the user's line called, when not the Tensor function (nn.optim.Optimizer.step)
  inferred: NotRequired[bool]
  caller: NotRequired[SourceLine]  # where file/line is a model shipped inside tinygrad: the program's line that ran it
  onnx: NotRequired[OnnxNode]      # the ONNX node it computes (tinygrad's OnnxRunner)
  backward_line: NotRequired[SourceLine]  # a backward entry's .backward() (or .gradient()) line
  scope: NotRequired[Annotated[list[Instance], Field(max_length=64)]]  # a tensor graph's site: the module objects it ran inside, outermost first

@with_config(STRICT)
class LightHalf(TypedDict):
  """What a kernel read light (explorer.store.pieces: the pages of a program read their kernels' light halves) has of what it lacks:
  the targets of its sources and how many codegen passes it has."""
  sources: list[Name]
  passes: Count
  analysable: NotRequired[list[Name]]  # the targets whose record keeps its linear UOps' numbers (what an analysis is rebuilt by)

@with_config(STRICT)
class KernelRecord(TypedDict):
  """One kernel of the schedule: what it computes (role, reads, writes), its AST, and its record per target (`targets`, the host's under
  host_target); the host record's fields are repeated at the top for the readers of schema 1. A trace of schema 1 has no `targets`
  nor `host_target`: `upgrade` gives it both where it is read, so that every reader finds them."""
  index: Count
  call: Count
  name: Name
  role: Name
  kind: Name
  ast_uops: Count
  ast_sink: int | None
  ast_key: NotRequired[Name]
  variables: NotRequired[dict[Name, list[int]]]  # a symbolic kernel's variables (its source's parameters) and their bounds [min, max]
  times_at: NotRequired[list[BoundTime]]         # a timed symbolic kernel's: alone at each set of values the program bound it to
  linear_uops: Count
  ops: dict[Name, Count]
  opts: list[Line]
  flops: Count
  bytes: Count
  lds: NotRequired[int | None]
  global_size: Size
  local_size: Size | None
  passes: list[Pass]
  uops_listing: list[Text]
  sources: dict[Name, Text]
  source_errors: dict[Name, Text]
  codegen_s: Seconds
  compile_s: Seconds
  compile_cached: NotRequired[bool]  # the binary came from tinygrad's disk cache of compiles (no compiler ran, as tinygrad does)
  reads: list[Count]
  writes: list[Count]
  time_s: TimeStats | None  # measured alone (L2 flushed where the clock can flush it): the trace's clock (Timing.method)
  time_warm_s: NotRequired[TimeStats | None]   # GPU clocks: the same kernel with the L2 warm from the sample before
  time_batch_s: NotRequired[TimeStats | None]  # held events, kernels under BATCH_BELOW_S: many launches in one held pair, divided
  storage: NotRequired[Storage]
  notes: list[Line]
  host_target: NotRequired[Name]
  targets: NotRequired[dict[Name, TargetRecord]]
  spec: NotRequired[KernelSpec]
  beam: NotRequired[BeamRecord]
  realize: NotRequired[Count]                 # a program's: which of its realizes ran it (TraceRecord.realizes)
  provenance: NotRequired[list[Provenance]]   # a program's: the Tensor functions and user lines it computes
  light: NotRequired[LightHalf]               # read light: it (and its records) lack their UOp listings, sources and passes

# ***** the schedule *****

@with_config(STRICT)
class ScheduleRow(TypedDict):
  index: Count
  kind: Name
  reads: list[Count]
  writes: list[Count]
  name: Name | None
  kernel: Count | None
  role: NotRequired[Name]  # absent where the schedule stage failed before it named the rows' roles
  realize: NotRequired[Count]

@with_config(STRICT)
class Buffer(TypedDict):
  index: Count
  name: Name
  role: Name
  numel: Count
  dtype: Name
  nbytes: Count
  device: Name
  written_by: list[Count]
  read_by: list[Count]
  planned: NotRequired[Line]
  num: NotRequired[int | None]  # its UOp's trace number: rangeify's graphs name it by it (StageRow.reads, .into)

@with_config(STRICT)
class Symbolic(TypedDict):
  """A size that Variables set (a KV cache's position, a prefill's token count): as tinygrad renders it, each variable's bounds
  [min, max], and its value at the values the realize bound them to (None where it bound none of them)."""
  nbytes: Line
  variables: dict[Name, Annotated[list[int], Field(min_length=2, max_length=2)]]
  at: Count | None

@with_config(STRICT)
class StageRow(TypedDict):
  """One bufferize (Ops.STAGE) of rangeify, or a buffer stored to directly (realized). Where Variables set its size: its shape names them,
  nbytes is its largest (what tinygrad allocates), and symbolic says how it varies."""
  shape: list[Dim]
  dtype: Name
  addrspace: Name
  removable: bool
  src_op: Name
  nbytes: Count
  num: int | None
  buffer: NotRequired[Count | None]
  reads: NotRequired[list[Count]]  # the buffers (trace.buffers indexes) its value is computed from
  into: NotRequired[list[Count]]   # the buffers its value is stored into: the kernels writing them compute it (inline, if it was removed)
  symbolic: NotRequired[Symbolic]

@with_config(STRICT)
class Stages(TypedDict):
  created: list[StageRow]
  kept: list[StageRow]
  fused: list[StageRow]
  realized: list[StageRow]
  debuf_pass: Count

@with_config(STRICT)
class Scheduler(TypedDict):
  seconds: Seconds
  groups: list[PassGroup]
  passes: list[Pass]
  stages: NotRequired[Stages]
  stage_counts: NotRequired[dict[Name, Count]]
  note: NotRequired[Line]  # why there are no stages: tinygrad's schedule cache served this graph (no rangeify pass ran)

@with_config(STRICT)
class TensorGraph(TypedDict):
  uops: Count
  ops: dict[Name, Count]
  sink: int | None
  sites: NotRequired[list[Provenance]]  # the Tensor functions (and model lines) that made the sink's UOps (traces before 2026-12: none)
  uop_sites: NotRequired[list[list[Count]]]  # [trace number, index into sites] for each of the sink's UOps tinygrad's metadata names
  uop_calls: NotRequired[list[list[Count]]]  # [trace number, schedule call] for each of the sink's UOps a kernel computes (its first)

# ***** the run *****

@with_config(STRICT)
class Failure(TypedDict):
  stage: Name
  error: Text
  traceback: NotRequired[Text]
  source: NotRequired[Text]

@with_config(STRICT)
class CheckError(TypedDict):
  max_abs: float
  max_rel: float
  ref_max_abs: float
  tolerance: float
  tolerance_for: Line
  within: bool

@with_config(STRICT)
class Repeat(TypedDict):
  """A realize that ran the same kernels as an earlier one (a loop's next step): its wall seconds as Tensor.realize ran it (the
  schedule from tinygrad's cache, the compiles from its cache, the run) and its variables' values."""
  seconds: Seconds
  variables: NotRequired[dict[Name, int]]

@with_config(STRICT)
class JitRunRecord(TypedDict):
  """One run of a TinyJit's captured schedule: host wall seconds (as tinygrad ran it, its launches included) and its variables' values."""
  seconds: Seconds
  variables: NotRequired[dict[Name, int]]

@with_config(STRICT)
class Jit(TypedDict):
  """A TinyJit the program ran: its captured kernels by name, the traced realizes that ran the same kernels ([first, end); empty when
  none did: they ran before the capture began), and each of its runs (the one right after its capture, then every replay)."""
  index: Count
  kernels: list[Name]
  realizes: list[Count]
  runs: list[JitRunRecord]

@with_config(STRICT)
class Realize(TypedDict):
  """One realize of a program: its kernels and schedule rows (ranges [first, end) of the program's), its tensor graph and outputs."""
  index: Count
  name: Line
  kernels: list[Count]
  schedule: list[Count]
  tensor_graph: TensorGraph | None
  seconds: Seconds
  outputs: list[Output]
  total_s: TimeStats | None
  span_s: NotRequired[TimeStats | None]  # its schedule replayed back to back (absent in programs captured before spans)
  variables: NotRequired[dict[Name, int]]  # the symbolic variables it binds, and their values in this run
  repeats: NotRequired[list[Repeat]]  # the later realizes of the same kernels, in order: a loop's steps after the first
  captured: NotRequired[bool]  # a TinyJit took its schedule as it captured it: nothing ran then (the JIT's runs ran it, `jits`)

@with_config(STRICT)
class Frame(TypedDict):
  """A frame of the Python stack that opened a rewrite group: tinygrad's files by their path in tinygrad, the rest by theirs."""
  file: Line
  line: Count
  function: Name
  code: Line  # the line of code, read when the trace ran

@with_config(STRICT)
class RewriteStack(TypedDict):
  """The stack that opened rewrite group `group` (as passes name groups), outermost frame first, the explorer's own frames left out."""
  group: Count
  frames: list[Frame]

# ***** the host's work over time (explorer.tracing.pipeline.host_timeline): the explorer's stages beside tinygrad's own profile *****

Micros = Annotated[float, Strict(), Field(allow_inf_nan=False)]  # microseconds from the timeline's start
Index = Annotated[int, Strict(), Field(ge=0)]
_LIST_AS_TUPLE = Field(strict=False)  # a row is a JSON list: read as a tuple, each item strict

@with_config(STRICT)
class TimelineStage(TypedDict):
  """A stage of the explorer's pipeline (stages.STAGES), or work beside one (the reference check), or a program's repeated step."""
  name: Name
  realize: int | None  # a program's realize it belongs to (a repeat: the realize it repeats); None in a single trace
  st: Micros
  en: Micros

@with_config(STRICT)
class Timeline(TypedDict):
  """When each stage, rewrite pass, Tensor function and kernel launch happened, and the memory each device's buffers held, on the
  host's clock (tinygrad's profiler, PROFILE, and the explorer's stages). Names are interned: a range and a run name `names[i]` and
  `lanes[j]` (0: the stages; then tinygrad's host lanes, "tensor" and "tinygrad"; then one per device)."""
  unit: Literal["us"]
  stages: list[TimelineStage]
  ranges: list[Annotated[tuple[Index, Index, Micros, Micros], _LIST_AS_TUPLE]]  # (lane, name, start, end)
  runs: list[Annotated[tuple[Index, Index, Micros], _LIST_AS_TUPLE]]              # (device lane, kernel name, launched at)
  memory: dict[Name, list[Annotated[tuple[Micros, Index], _LIST_AS_TUPLE]]]       # device -> (at, bytes its buffers hold after it)
  lanes: list[Name]
  names: list[Line]
  left_out: Count  # ranges past the cap (the shortest), not stored

@with_config(STRICT)
class Timing(TypedDict):
  """How the trace's kernels were timed (explorer.tracing.pipeline.trace._time): each kernel alone (kernels[i].time_s; total_s, their sum per
  repeat) and the whole schedule replayed back to back as tinygrad's JIT replays it (span_s: first start to last end), by one clock
  (method; notice: why a better one was not used). eager_s: the one eager realize the run stage made, first launch to last end."""
  device: Device
  warmup: Count
  repeats: Count
  total_s: TimeStats | None
  method: NotRequired[Literal["host", "cupti", "events-held", "events"]]
  notice: NotRequired[Line | None]
  span_s: NotRequired[TimeStats | None]
  replay: NotRequired[Literal["launches", "graph"]]  # how the span's replay ran: each call launched in turn, or tinygrad's graph of them
  eager_s: NotRequired[Seconds | None]

@with_config(STRICT)
class Totals(TypedDict):
  kernels: Count
  copies: Count
  buffers: Count
  flops: Count
  bytes: Count
  compile_s: Seconds
  codegen_s: Seconds
  time_s: TimeStats | None

@with_config(STRICT)
class RanOn(TypedDict):
  worker: Name | None
  host: Name
  pid: Count
  by: Name
  stages: dict[Name, Name]
  targets: NotRequired[dict[Name, Name]]

@with_config(STRICT)
class Env(TypedDict):
  tinygrad: Name
  device: Device
  host: Name
  python: Name
  created: Name
  tracking: bool
  compiler: NotRequired[Line | None]
  fallback: NotRequired[Line | None]
  device_name: NotRequired[Line | None]
  ran_on: NotRequired[RanOn]

@with_config(STRICT)
class RewriteRecord(TypedDict):
  """A custom codegen rewrite the variant added: its name, where it ran, what it does and the source that ran."""
  name: Name
  point: Name
  summary: Line
  source: Text

@with_config(STRICT)
class Output(TypedDict):
  shape: list[Dim]
  dtype: Name

@with_config(STRICT)
class ProgramOrigin(TypedDict):
  kind: Literal["script", "capture"]
  fn: NotRequired[Name | None]
  line: NotRequired[Count | None]

@with_config(STRICT)
class ProgramInfo(TypedDict):
  """A captured program (explorer.tracing.pipeline.program): its name, its source as it ran, how it ran, and the tensors it realized."""
  name: Line
  source: Text | None
  origin: ProgramOrigin | None
  outputs: list[Output]
  file: NotRequired[Line | None]  # the source's file, as the user's lines in a kernel's provenance name it

@with_config(STRICT)
class SpecRecord(TypedDict):
  """explorer.spec.ConvSpec as JSON."""
  batch: int
  cin: int
  cout: int
  height: int
  width: int
  kernel: int
  stride: int
  padding: int | None
  groups: int
  dtype: Name

@with_config(STRICT)
class VariantRecord(TypedDict):
  """explorer.spec.Variant as JSON (the fields added since the first traces may be missing: their defaults apply)."""
  algo: Name
  wino_impl: Name
  tile: Name
  staging: Name
  consts: Name
  opt: Name
  targets: list[Name]
  warmup: int
  repeats: int
  time: bool
  fallback: bool
  device: Device | None
  cuda_arch: NotRequired[Name]
  metal_arch: NotRequired[Name]
  rewrites: NotRequired[list[Name]]
  rewrite_file: NotRequired[Line | None]
  tinygrad: NotRequired[Name | None]  # the tinygrad it asked for (None: the server's own; env.tinygrad says which ran it)
  notes: list[Line]

def _spec(d: SpecRecord | None) -> SpecRecord | None:
  try:
    if d is not None: ConvSpec.from_dict(dict(d)).validate(memory_budget=1 << 62)  # the shape's sense; its size is the runner's to bound
  except SpecError as e: raise ValueError(str(e)) from None
  return d

def _variant(d: VariantRecord) -> VariantRecord:
  try: Variant.from_dict(dict(d)).validate(max_repeats=1 << 30, max_beam=1 << 10)
  except SpecError as e: raise ValueError(str(e)) from None
  return d

@with_config(STRICT)
class TraceRecord(TypedDict):
  """One trace: a convolution (spec) or a captured program (program), through every stage."""
  schema: Annotated[int, Field(ge=1, le=TRACE_SCHEMA)]
  spec: Annotated[SpecRecord | None, AfterValidator(_spec)]
  preset: Name | None
  program: ProgramInfo | None
  variant: Annotated[VariantRecord, AfterValidator(_variant)]
  label: Line
  env: Env
  status: Literal["ok", "partial"]  # partial: a stage failed (failures says which); what the stages before it recorded stands
  failures: list[Failure]
  notes: list[Line]
  stage_seconds: dict[Name, Seconds]
  tinygrad_seconds: NotRequired[dict[Name, Seconds]]
  tensor_graph: TensorGraph | None
  scheduler: Scheduler | None
  schedule: list[ScheduleRow]
  buffers: list[Buffer]
  kernels: list[KernelRecord]
  totals: Totals | Annotated[dict[str, Any], Field(max_length=0)]  # {}: a trace that failed before its totals were counted
  error: CheckError | None
  rewrites: list[RewriteRecord]
  spec_checks: NotRequired[dict[Name, SpecCheck]]
  timing: NotRequired[Timing]
  realizes: NotRequired[list[Realize]]  # a captured program's, in order
  jits: NotRequired[list[Jit]]  # a captured program's TinyJits, in the order each first ran
  variables: NotRequired[dict[Name, int]]  # the symbolic variables the schedule binds and their values in this run (a KV cache's pos)
  timeline: NotRequired[Timeline | None]  # absent in traces recorded before timelines
  rewrite_stacks: NotRequired[list[RewriteStack]]  # the host's rewrite groups' (absent before stacks were kept)

@functools.cache
def _trace_adapter() -> TypeAdapter[TraceRecord]: return TypeAdapter(TraceRecord)

# ***** a trace while it runs: what it reports as it goes (explorer.tracing.pipeline.trace.Recorder.partial) *****

@with_config(STRICT)
class ScheduleSoFar(TypedDict):
  """Once scheduled: its calls, buffers and tensor graph."""
  schedule: list[ScheduleRow]
  buffers: list[Buffer]
  tensor_graph: TensorGraph | None

@with_config(STRICT)
class KernelRow(TypedDict):
  """A kernel, reported as its codegen ends."""
  index: Count
  call: Count
  name: Name
  role: Name
  ast_uops: Count
  linear_uops: Count
  flops: Count
  bytes: Count
  global_size: Size
  local_size: Size | None
  opts: list[Line]
  codegen_s: Seconds
  compile_s: Seconds
  compile_cached: NotRequired[bool]

@functools.cache
def record_adapters() -> dict[str, TypeAdapter[Any]]:
  """What the store checks each enrichment row against before it merges it into a trace: a target's record (or a failed render's
  {"error"}), a record's analysis, its compile facts."""
  return {"record": TypeAdapter(TargetRecord | FailedRender), "analysis": TypeAdapter(Analysis), "facts": TypeAdapter(CompileFacts)}

@with_config(STRICT)
class FailedRender(TypedDict):
  error: Text

@functools.cache
def _study_adapter() -> TypeAdapter[StudyResult]: return TypeAdapter(StudyResult)

def study_problem(data: Any) -> str | None:
  """What keeps `data` from reading as a study's result (StudyResult: every case with its rows and comparisons), in one line naming
  the first field that does not fit; None where it reads. A queue worker's result and a stored row are read through it."""
  try: _study_adapter().validate_python(data)
  except ValidationError as e:
    err = e.errors()[0]
    return f"{'.'.join(str(x) for x in err.get('loc', ())) or 'its top level'}: {err['msg']}"[:300]
  return None

@functools.cache
def _partial_adapters() -> dict[str, TypeAdapter[Any]]: return {"schedule": TypeAdapter(ScheduleSoFar), "kernel": TypeAdapter(KernelRow)}

def validate_partial(what: str, data: Any) -> Any:
  """A running trace's report (`schedule` or `kernel`), checked as data (it may come from a queue worker); SpecError if it is not one."""
  if (adapter := _partial_adapters().get(what)) is None: raise SpecError(f"a running trace reports no {what!r}")
  try: return adapter.validate_python(data)
  except ValidationError as e: raise SpecError(f"a running trace's {what} report does not read: {e.errors()[0]['msg']}"[:300]) from None

def validate_trace(data: Any, what: str = "the trace") -> TraceRecord:
  """`data` as a trace, checked as a request is (SpecError, one line, naming the first field that fails); a trace from outside this
  process goes through here before anything stores, shows or runs it."""
  totals = data.get("totals") if isinstance(data, dict) else None
  if isinstance(totals, dict) and any(isinstance(x, float) and not math.isfinite(x) for x in (totals.get("flops"), totals.get("bytes"))):
    raise SpecError(f"{what} has totals that are not finite")  # said as such: NaN is no count
  try: trace = _trace_adapter().validate_python(data)
  except ValidationError as e:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err.get("loc", ()) if not str(x).startswith("function-after")) or "its top level"
    raise SpecError(f"{what} is not a Kernel Explorer trace of this version: {where}: {err['msg']}"[:500]) from None
  if not set(trace["stage_seconds"]) <= set(STAGES): raise SpecError(f"{what} names a stage this version lacks: {sorted(trace['stage_seconds'])}")
  if any(t not in TARGETS for k in trace["kernels"] for t in k.get("targets") or {}):
    raise SpecError(f"{what} has a record for a target this version lacks")
  check_references(trace, what)
  return trace

FATES = ("created", "kept", "fused", "realized")  # Stages' lists of rows

def check_references(t: TraceRecord, what: str = "the trace") -> None:
  """Every index one record keeps of another within range (each list's own `index` its place), so that no reader indexes out of a
  trace: SpecError naming the first that is not. Linear in the trace."""
  nk, ns, nb, realizes = len(t["kernels"]), len(t["schedule"]), len(t["buffers"]), t.get("realizes") or []
  def refs(where: str, xs: Iterable[int], n: int, noun: str, has: str = "the trace") -> None:
    if (bad := next((x for x in xs if not 0 <= x < n), None)) is not None:
      raise SpecError(f"{what}: {where} names {noun} {bad}, and {has} has {n or 'none'}")
  listed: tuple[tuple[str, list[Any]], ...] = (("kernels", t["kernels"]), ("schedule", t["schedule"]), ("buffers", t["buffers"]),
                                               ("realizes", realizes))
  for field, rows in listed:
    if (i := next((i for i, r in enumerate(rows) if r["index"] != i), None)) is not None:
      raise SpecError(f"{what}: {field}[{i}].index is {rows[i]['index']}, not its place {i}")
  for i, k in enumerate(t["kernels"]):
    refs(f"kernels[{i}].call", (k["call"],), ns, "schedule row")
    refs(f"kernels[{i}].reads", k["reads"], nb, "buffer")
    refs(f"kernels[{i}].writes", k["writes"], nb, "buffer")
    if "realize" in k: refs(f"kernels[{i}].realize", (k["realize"],), len(realizes), "realize")
    for name, rec in (k.get("targets") or {}).items(): _record_references(rec, f"kernels[{i}].targets.{name}", refs)
  for i, s in enumerate(t["schedule"]):
    refs(f"schedule[{i}].reads", s["reads"], nb, "buffer")
    refs(f"schedule[{i}].writes", s["writes"], nb, "buffer")
    if s["kernel"] is not None: refs(f"schedule[{i}].kernel", (s["kernel"],), nk, "kernel")
    if "realize" in s: refs(f"schedule[{i}].realize", (s["realize"],), len(realizes), "realize")
  for i, b in enumerate(t["buffers"]):
    refs(f"buffers[{i}].written_by", b["written_by"], ns, "schedule row")
    refs(f"buffers[{i}].read_by", b["read_by"], ns, "schedule row")
  stages = t["scheduler"].get("stages") if t["scheduler"] is not None else None
  for fate, rows in zip(FATES, (stages["created"], stages["kept"], stages["fused"], stages["realized"]) if stages is not None else (), strict=False):
    for j, row in enumerate(rows):
      refs(f"scheduler.stages.{fate}[{j}].buffer", () if (into := row.get("buffer")) is None else (into,), nb, "buffer")
      refs(f"scheduler.stages.{fate}[{j}].reads", row.get("reads") or (), nb, "buffer")
      refs(f"scheduler.stages.{fate}[{j}].into", row.get("into") or (), nb, "buffer")
  for i, r in enumerate(realizes):  # [first, end) of the program's kernels and schedule rows (explorer.tracing.pipeline.program)
    for f, span, n in (("kernels", r["kernels"], nk), ("schedule", r["schedule"], ns)):
      if len(span) != 2 or not 0 <= span[0] <= span[1] <= n:
        raise SpecError(f"{what}: realizes[{i}].{f} is {str(span)[:60]}, not a range [first, end) of the trace's {n} {f}")

  for i, jit in enumerate(t.get("jits") or []):
    if jit["index"] != i: raise SpecError(f"{what}: jits[{i}].index is {jit['index']}, not its place {i}")
    if (span := jit["realizes"]) and (len(span) != 2 or not 0 <= span[0] < span[1] <= len(realizes)):
      raise SpecError(f"{what}: jits[{i}].realizes is {str(span)[:60]}, not a range [first, end) of the trace's {len(realizes)} realizes")
  if (tl := t.get("timeline")) is not None: _timeline_references(tl, what)

def _timeline_references(tl: Timeline, what: str) -> None:
  nl, nn = len(tl["lanes"]), len(tl["names"])
  for field, rows in (("ranges", tl["ranges"]), ("runs", tl["runs"])):
    if (j := next((j for j, r in enumerate(rows) if r[0] >= nl or r[1] >= nn), None)) is not None:
      raise SpecError(f"{what}: timeline.{field}[{j}] names a lane or name the timeline lacks ({nl} lanes, {nn} names)")

def _record_references(rec: TargetRecord, where: str, refs: Callable[..., None]) -> None:
  """A target record's linear UOp indexes (line map, live values) within its linear UOps."""
  n, has = rec["linear_uops"], "the record"
  for ln, ix in rec.get("line_map") or (): refs(f"{where}.line_map (line {ln})", ix, n, "uop", has)
  if (p := rec.get("pressure")) is None: return
  if n or p["max_live_at"]: refs(f"{where}.pressure.max_live_at", (p["max_live_at"],), n, "uop", has)  # 0 where there are no uops
  for j, r in enumerate(p["longest"]):
    refs(f"{where}.pressure.longest[{j}].uop", (r["uop"],) if "uop" in r else (), n, "uop", has)
    refs(f"{where}.pressure.longest[{j}].until", (r["until"],), n, "uop", has)

# ***** a device, as a worker describes and measures it (explorer.tracing.pipeline.probe; the roofline's peaks cache keeps Measured) *****

class DeviceInfo(TypedDict):
  """A device this host opens: tinygrad's name, the driver's, its compiler, why tinygrad falls back (None: it does not), the host."""
  device: str
  name: str
  compiler: str
  fallback: str | None
  host: str
  tinygrad: str

class Unopened(TypedDict):
  device: str
  reason: str

class DevicesFound(TypedDict):
  default: str
  devices: list[DeviceInfo]
  unopened: NotRequired[list[Unopened]]  # the compute devices that did not open here, each with why (tinygrad's error)

class Measured(DeviceInfo):
  """The probe's FP32 FLOP/s and bandwidth (bytes/s) of a device, with the runs behind them."""
  fp32: float
  bw: float
  probe: dict[str, Any]

class Sampling(TypedDict):
  """How an interleaved timing ended: the repeats it timed and why it stopped (explorer.tracing.pipeline.timing._stop)."""
  repeats: int
  ended: str
  target_width: float | None
  budget_s: float | None

class VariantTiming(TypedDict):
  """One variant's interleaved timing (explorer.tracing.pipeline.timing.time_interleaved, in a worker): the per-repeat kernel sums (samples) and
  spans (span_samples) and their stats by the device's clock (method), how the sampling ended, and the compile times of its kernels'
  sources ([] where none were asked for)."""
  total_s: TimeStats
  samples: list[float]
  span_s: NotRequired[TimeStats]      # the schedule replayed back to back (absent in results from before spans were measured)
  span_samples: NotRequired[list[float]]
  replay: NotRequired[str]
  method: NotRequired[str]
  notice: NotRequired[str | None]
  device: str
  compiler: str
  fallback: str | None
  sampling: Sampling
  compile_samples: list[float]

# ***** what a study holds (explorer.analysis.study.run_study: its case, rows and comparisons; the studies' JSON, the store's result) *****

class Claim(TypedDict, total=False):
  """The document's figures for a case as B/A ratios (CLAIMS), each absent where the document made none: `of` the variant they are
  about (absent: every one), `says` the document's words per figure. A case the documents did not measure has {}."""
  of: str
  graph: float
  uops: float
  time: float
  spread: float
  compile: float
  says: dict[str, str]

class StudyKernel(TypedDict):
  name: str
  role: str
  alu: int
  loads: int
  consts: int
  linear_uops: int
  codegen_s: float

class StudyRow(TypedDict):
  """One variant of a case: its trace's counts (one trace each) and its interleaved timing (_row). Keys marked absent: in studies
  stored before they were recorded."""
  variant: str
  status: str
  kernels: int
  graph_uops: NotRequired[int | None]  # absent in older studies; None where the trace has no tensor graph
  copies: int
  buffers: int
  roles: list[str]
  alu: int
  loads: int
  consts: int
  linear_uops: NotRequired[int]  # absent in older studies
  flops: int
  codegen_s: float
  compile_s: float
  source_lines: int
  max_abs_error: float | None
  max_rel_error: float | None
  time_median_s: float
  time_std_s: float
  time_min_s: float
  time_n: int
  samples: list[float]
  method: NotRequired[str | None]        # the clock (explorer.clocks.METHODS): absent in older studies
  span_median_s: NotRequired[float | None]  # the schedule replayed back to back, per repeat: absent in older studies
  span_samples: NotRequired[list[float]]
  device: str
  compiler: str
  fallback: str | None
  compile_samples: list[float]
  compile_median_s: NotRequired[float | None]  # absent in older studies; None where no compile times were asked for
  per_kernel: list[StudyKernel]
  failures: list[Any]
  trace_id: NotRequired[str | None]  # run_study's: the stored trace's id (keep)
  slowdown_vs_first: NotRequired[float | None]  # run_study's: median time over the first variant's

class Comparison(TypedDict):
  """A paired figure of B against A (stats.compare, stats.compare_medians): the B/A ratio, its 95% interval, the verdict."""
  a: str
  b: str
  figure: Literal["time", "span", "spread", "compile"]
  ratio: float
  ci_low: float
  ci_high: float
  p_value: float | None
  claim: float | None
  verdict: str
  claim_position: NotRequired[str | None]  # absent in older studies; None where there is no claim (stats.claim_position)

class CountComparison(TypedDict):
  """An exact count of B against A (count_comparisons): one trace each, no interval."""
  a: str
  b: str
  figure: Literal["graph", "uops"]
  kernel: str | None
  a_count: int
  b_count: int
  ratio: float | None
  claim: float | None
  verdict: str

class StudyCase(TypedDict):
  """One case of a study (run_study; run_studies adds preset and case)."""
  study: str
  preset: NotRequired[str]  # run_studies's: the case's preset (or custom shape) name
  case: NotRequired[str]  # run_studies's: which setting the case measures
  spec: dict[str, Any]
  tile: str
  repeats: int
  warmup: int
  compile_repeats: int
  rows: list[StudyRow]
  claim: Claim
  comparisons: list[Comparison]
  counts: NotRequired[list[CountComparison]]  # absent in studies stored before counts had verdicts
  sampling: Sampling | None
  identical_kernels: bool
  traces: dict[str, dict[str, Any]]

class StudyResult(TypedDict):
  """run_studies: every case of one study."""
  study: str
  cases: list[StudyCase]
  tinygrad: NotRequired[str]  # the tinygrad every case traced and timed on (absent: a study run before the choice, on the server's own)

def setting_of(case: StudyCase) -> str:
  """Which setting the case measures ("": a case run alone, by run_study)."""
  return case.get("case", "")

# ***** a diff's interleaved timing (explorer.analysis.diff.remeasure_interleaved), as the store keeps it *****

class RatioStats(TypedDict, total=False):
  """B/A repeat by repeat (ratio_stats): n, and where n > 0 the median, quartiles and range; ci_low and ci_high, the median's 95%
  interval, where remeasure_interleaved added them (absent in diffs stored before it did)."""
  n: Required[int]
  median: float
  q1: float
  q3: float
  iqr: float
  min: float
  max: float
  ci_low: float
  ci_high: float

class InterleavedTiming(TypedDict):
  """A and B timed interleaved (remeasure_interleaved), as a diff stores it: compared, with its ratio; or not, with the reason."""
  compared: bool
  reason: NotRequired[str]  # not compared: why
  device: NotRequired[str]  # the rest: compared
  compiler: NotRequired[str]
  fallback: NotRequired[str | None]
  warmup: NotRequired[int]
  repeats: NotRequired[int]
  method: NotRequired[str | None]  # the clock (explorer.clocks.METHODS); absent in diffs stored before clocks were named
  notice: NotRequired[str | None]
  a_total_s: NotRequired[dict[str, Any]]  # the kernels each alone, summed per repeat: what the headline quotes (headline)
  b_total_s: NotRequired[dict[str, Any]]
  ratio: NotRequired[RatioStats]
  ratio_of_medians: NotRequired[float | None]
  verdict: NotRequired[str | None]
  headline: NotRequired[str]              # "kernels": which figure the verdict quotes
  a_span_s: NotRequired[dict[str, Any]]   # the schedule replayed back to back, first start to last end (absent in older diffs)
  b_span_s: NotRequired[dict[str, Any]]
  span_ratio: NotRequired[RatioStats]
  span_verdict: NotRequired[str | None]
  replay: NotRequired[str | None]

# ***** reading a trace: older schemas upgraded once, and the one accessor for a kernel's record on a target *****

HOST_TARGET_OF_SCHEMA_1 = "host"  # a trace of schema 1 knew its host's target by this name only
TARGET_FIELDS = ("name", "opts", "global_size", "local_size", "linear_uops", "ops", "flops", "bytes", "lds", "passes", "uops_listing")

def _schema_1_kernel(kernel: dict[str, Any]) -> dict[str, Any]:
  """A kernel of schema 1 (no per-target records) with the host's record made from its own fields, under the name schema 1 knew."""
  record = {**{f: kernel.get(f) for f in TARGET_FIELDS}, "source": (kernel.get("sources") or {}).get("host", ""), "arch": None,
            "notes": ["recorded before per-target records (trace schema 1): the other targets have their source only"], "compile": None}
  return {**kernel, "host_target": kernel.get("host_target") or HOST_TARGET_OF_SCHEMA_1,
          "targets": kernel.get("targets") or {HOST_TARGET_OF_SCHEMA_1: record}}

def upgrade(trace: dict[str, Any]) -> TraceRecord:
  """`trace` as this version reads it, once, where it is read (the store, a trace file): a kernel of schema 1 gets its host's record
  (`targets`, `host_target`) from its own fields. The `schema` number stays as recorded; a current trace is returned as it is."""
  def current(k: dict[str, Any]) -> bool: return "targets" in k and "host_target" in k
  if trace.get("status") == "error": trace = {**trace, "status": "partial"}  # (its name until traces of every failed stage were partial)
  if all(current(k) for k in trace["kernels"]): return cast(TraceRecord, trace)
  return cast(TraceRecord, {**trace, "kernels": [k if current(k) else _schema_1_kernel(k) for k in trace["kernels"]]})

def host_target(kernel: KernelRecord) -> str:
  """The target of the host's own record (clang on a CPU, cuda on an NVIDIA GPU...)."""
  return kernel["host_target"]

def target_records(kernel: KernelRecord) -> dict[str, TargetRecord]:
  """Every target's record of a kernel (kernels[i].targets; a trace of schema 1 has the host's only, made by `upgrade`)."""
  return kernel["targets"]

def target_record(kernel: KernelRecord, target: str | None = None) -> TargetRecord | None:
  """A kernel's record on `target` (None: the host's own), or None where the trace has none (yet: another target is computed on first
  view)."""
  return kernel["targets"].get(target or kernel["host_target"])

def totals_of(trace: TraceRecord) -> Totals | None:
  """The trace's totals, or None where it failed before they were counted (its totals are {})."""
  return cast(Totals, t) if (t := trace["totals"]) else None

def realizes_of(trace: TraceRecord) -> list[Realize]:
  """A captured program's realizes, in order ([] for a convolution's trace, which has none)."""
  return trace.get("realizes") or []

def kernel_runs(trace: TraceRecord, kernel: KernelRecord) -> list[tuple[str, dict[str, int], float | None]]:
  """Each time a program ran the kernel, in order, as (how, its variables' values, the wall seconds of the step it ran in: None for
  the traced realize, whose stages are timed apart): its realize (traced, or captured by a TinyJit and not run then), that realize's
  repeats, and the runs of each TinyJit whose kernels are its realize's."""
  r, realizes = kernel.get("realize", 0), realizes_of(trace)
  if r >= len(realizes): return [("traced", trace.get("variables") or {}, None)]
  me = realizes[r]
  how = "captured by TinyJit (not run then)" if me.get("captured") else "traced"
  runs: list[tuple[str, dict[str, int], float | None]] = [(how, me.get("variables") or trace.get("variables") or {}, None)]
  runs += [("repeat", x.get("variables") or {}, x["seconds"]) for x in me.get("repeats", [])]
  for j in trace.get("jits") or []:
    if j["realizes"] and j["realizes"][0] <= r < j["realizes"][1]:
      runs += [(f"TinyJit {j['index'] + 1}", x.get("variables") or {}, x["seconds"]) for x in j["runs"]]
  return runs

def bound_sets(trace: TraceRecord, kernel: KernelRecord) -> list[dict[str, int]]:
  """The distinct values a symbolic kernel's variables were bound to when it ran (a captured realize's excepted: nothing ran), in the
  order first seen; [] for a kernel without variables."""
  names, out = set(kernel.get("variables") or {}), list[dict[str, int]]()
  for how, values, _ in kernel_runs(trace, kernel):
    mine = {n: v for n, v in values.items() if n in names}
    if names and set(mine) == names and not how.startswith("captured") and mine not in out: out.append(mine)
  return out

def pressure_of(rec: TargetRecord) -> Pressure | None:
  """A record's live values (register pressure), or None where they were not computed (an enrichment computes them on first view)."""
  return rec.get("pressure")

def ast_key_of(kernel: KernelRecord) -> str | None:
  """A kernel's AST key (tinygrad's content hash of its AST), or None in traces from before kernels were keyed by their AST."""
  return kernel.get("ast_key")

def max_live_line(pressure: Pressure) -> int | None:
  """The source line where the live values peak, or None: records from before line maps have none, and a peak may map to no line."""
  return pressure.get("max_live_line")

def registers_of(facts: CompileFacts) -> int | None:
  """Registers per thread, where the compiler reports them (ptxas: CUDA, PTX); None where it does not, or no compiler ran."""
  return facts.get("registers")

def stage_counts_of(scheduler: Scheduler | None) -> dict[str, int] | None:
  """The UOps after each scheduler stage, or None: the schedule failed (no scheduler), or was recorded before stages were counted."""
  return scheduler.get("stage_counts") if scheduler is not None else None

def schedule_role(row: ScheduleRow) -> str | None:
  """A schedule row's role; None where the schedule stage failed before it named the rows' roles."""
  return row.get("role")

def provenance_of(kernel: KernelRecord) -> list[Provenance]:
  """A kernel's provenance: none for a convolution's kernels (a captured program's have theirs)."""
  return kernel.get("provenance") or []

def via_of(e: Provenance) -> str:
  """The tinygrad function the user's line called, where not the Tensor function ("" where it is the Tensor function)."""
  return e.get("via") or ""

def own_provenance(kernel: KernelRecord) -> list[Provenance]:
  """A kernel's provenance from its own compute, less what was inferred from data flow ([] where none: a convolution's kernels)."""
  return [e for e in provenance_of(kernel) if not e.get("inferred")]

def sass_in(facts: CompileFacts) -> Sass | None:
  """The SASS of compile facts: absent where no compiler ran (or none of CUDA's), None where nvdisasm was missing."""
  return facts.get("sass")

def device_name(env: Env) -> str:
  """The driver's name of the device a trace ran on (recorded where the backend tells it), else tinygrad's ("CUDA:1")."""
  return env.get("device_name") or env["device"]

def timing_of(trace: TraceRecord) -> Timing | None:
  """How the trace's kernels were timed; None: untimed."""
  return trace.get("timing")
