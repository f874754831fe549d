"""Request and response models of the JSON API. Field bounds catch malformed input; explorer.spec's validation catches the rest."""
from __future__ import annotations
from typing import TYPE_CHECKING, Annotated, Any, Literal
from pydantic import BaseModel, Field, create_model, field_validator, model_validator
from explorer.background import Recomputed, StartedAtOnce, TaskState

# the trace's records are defined with the trace (explorer.schema): named here for the routes and the OpenAPI schema
from explorer.schema import (
  Analysis as Analysis,
  CompileFacts as CompileFacts,
  Disassembly as Disassembly,
  KernelAxis as KernelAxis,
  LiveRange as LiveRange,
  LoopRange as LoopRange,
  LoopSplit as LoopSplit,
  Occupancy as Occupancy,
  Pass as Pass,
  Pressure as Pressure,
  SpecCheck as SpecCheck,
  SpecViolation as SpecViolation,
  TargetRecord as TargetRecord,
)
from explorer.spec import DTYPES, MAX_HAND_OPTS, PRESETS, STUDY_CI_WIDTH, TILES, ConvSpec, Knob, Variant, knobs
from explorer.targets import TARGETS
from explorer.tinygrads import TRACEABLE

if TYPE_CHECKING:  # the choices live in explorer.spec; to a type checker they are strings
  Tile = str; Target = str; Dtype = str; PresetName = str; TinygradName = str  # noqa: E702
else:  # to pydantic (and the OpenAPI schema) they are enums
  Tile, Target = Literal[TILES], Literal[TARGETS]
  Dtype, PresetName, TinygradName = Literal[tuple(DTYPES)], Literal[tuple(PRESETS)], Literal[TRACEABLE]

class SpecIn(BaseModel):
  """A convolution: NCHW input, OIHW weight."""
  model_config = {"extra": "forbid"}
  batch: int = Field(ge=1, le=1024)
  cin: int = Field(ge=1, le=4096)
  cout: int = Field(ge=1, le=4096)
  height: int = Field(ge=1, le=4096)
  width: int = Field(ge=1, le=4096)
  kernel: int = Field(ge=1, le=15)
  stride: int = Field(default=1, ge=1, le=8)
  padding: int | None = Field(default=None, ge=0, le=16)
  groups: int = Field(default=1, ge=1, le=4096)
  dtype: Dtype = "float32"

  @field_validator("batch", "cin", "cout", "height", "width", "kernel", "stride", "padding", "groups", mode="before")
  @classmethod
  def _not_a_bool(cls, v: Any) -> Any:
    if isinstance(v, bool): raise ValueError("must be a number, not true or false")  # pydantic would read true as 1
    return v

  def to_spec(self) -> ConvSpec: return ConvSpec(**self.model_dump())

class VariantFields(BaseModel):
  """What every request's variant shares; its fields come from explorer.spec.Variant's knobs (VariantIn below)."""
  model_config = {"extra": "forbid"}

  @model_validator(mode="before")
  @classmethod
  def _no_user_code(cls, data: Any) -> Any:
    if isinstance(data, dict) and data.get("rewrite_file") is not None:
      raise ValueError("rewrite_file is the CLI's alone (kernel-explorer trace --rewrite-file): this server never runs user code; "
                       "variant.rewrites names the catalogue's rewrites (GET /api/rewrites)")
    return data

  def to_variant(self) -> Variant:
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in self.model_dump().items()}
    return Variant(**fields)

def _variant_field(default: Any, k: Knob) -> tuple[Any, Any]:
  """One request field of a Variant knob: its type (an enum of its choices, a bounded integer, a string of its pattern), its default
  and its description, as the OpenAPI schema shows them."""
  if k.web == "refused": return None, Field(default=None, description=f"refused: {k.help}")
  one: Any = Literal[k.choices] if k.choices else Annotated[str, Field(pattern=k.pattern, max_length=16)] if k.pattern and k.cli == "list" \
    else bool if isinstance(default, bool) else int if isinstance(default, int) else str
  if k.cli == "list": return list[one], Field(default=list(default), max_length=k.max_length, description=k.help)
  if k.bounds is not None: return int, Field(default=default, ge=k.bounds[0], le=k.bounds[1], description=k.help)
  if default is None and k.choices: return one | None, Field(default=None, description=k.help)
  if default is None: return str | None, Field(default=None, max_length=k.max_length, description=k.help)
  return one, Field(default=default, pattern=k.pattern if one is str else None, max_length=k.max_length, description=k.help,
                    strict=True if one is bool else None)  # a flag is true or false, not 0.0 or "yes"

if TYPE_CHECKING: VariantIn = VariantFields
else: VariantIn = create_model("VariantIn", __base__=VariantFields, __doc__="How to compute and run it.",
                               **{name: _variant_field(d, k) for name, (d, k) in knobs().items()})

class TraceRequest(BaseModel):
  """Either a preset name or a full spec, and the variant."""
  # oneOf: exactly one of preset (a string) and spec (an object) is given and not null, as _one_spec checks
  model_config = {"extra": "forbid", "json_schema_extra": {"examples": [{"preset": "small", "variant": {"algo": "winograd"}}],
                                                           "oneOf": [{"required": ["preset"], "properties": {"preset": {"type": "string"}}},
                                                                     {"required": ["spec"], "properties": {"spec": {"type": "object"}}}]}}
  preset: PresetName | None = None
  spec: SpecIn | None = None
  variant: VariantIn = Field(default_factory=VariantIn)

  @model_validator(mode="after")
  def _one_spec(self) -> TraceRequest:
    if (self.preset is None) == (self.spec is None): raise ValueError("give exactly one of preset or spec")
    return self

  def to_spec(self) -> ConvSpec: return PRESETS[self.preset] if self.preset is not None else self.spec.to_spec()  # type: ignore[union-attr]

class StageProgress(BaseModel):
  model_config = {"extra": "forbid"}
  stage: str
  status: Literal["pending", "running", "done", "error", "skipped"]
  detail: str = ""

class TraceStatus(BaseModel):
  """Where a trace stands: queued or running (with per-stage progress), done, error (the one-line reason), or interrupted (the
  server stopped first: POST /api/traces/{id}/rerun runs it again)."""
  model_config = {"extra": "forbid"}
  id: str
  status: TaskState
  url: str
  label: str | None = None
  cached: bool = False
  stages: list[StageProgress] = []
  error: str | None = None

class TraceSummary(BaseModel):
  model_config = {"extra": "forbid"}
  id: str
  url: str
  label: str
  preset: str | None
  status: str
  created: float
  kernels: int | None = None
  time_s: float | None = None
  algo: str | None = None
  device: str | None = None
  failures: int = 0

class HeldStep(BaseModel):
  model_config = {"extra": "forbid"}
  cpu_ms: float = Field(description="the loop thread's CPU time in the step: how long it held the loop")
  wall_ms: float = Field(description="the step's time, waits for the interpreter lock (behind threads rendering pages) included")
  at: float = Field(description="when it started, on time.monotonic()'s clock")
  what: str = Field(description="what ran it: the explorer's coroutine where its task stood after the step, else the callback")

class LoopHeld(BaseModel):
  """The event loop's steps timed (settings.loop_watch): how long a request held it."""
  model_config = {"extra": "forbid"}
  steps: int = Field(description="the steps the loop ran since the server started")
  noted_ms: float = Field(description="a step this long (its CPU or its wall time) is noted (when it started, what ran it); shorter ones are not")
  over_ms: float
  over: int = Field(description="the noted steps (since held_since, where asked) that held the loop longer than over_ms")
  longest: list[HeldStep] = Field(description="the longest noted steps (since held_since, where asked), longest first")

class Health(BaseModel):
  model_config = {"extra": "forbid"}
  status: Literal["ok"]
  version: str
  tinygrad: str
  db: str | None = None  # the store's path: to loopback clients of a token-free server, and to token holders only
  tinygrad_imported: bool
  jobs_running: int
  dot: bool
  loop: LoopHeld | None = None  # with settings.loop_watch only

class GraphView(BaseModel):
  """A graph as the pages draw it: maybe simplified (notes say how), with highlighted node ids and a legend."""
  model_config = {"extra": "forbid"}
  ref: str
  title: str
  notes: list[str] = []
  total_nodes: int
  shown_nodes: int
  highlight: list[str] = []
  violations: list[str] = Field(default=[], description="ids of the nodes tinygrad's spec rejects in this graph's stage (outlined dashed violet; "
                                 "each node's `spec` is its message)")
  legend: list[dict[str, Any]] = []
  rule: str | None = None
  diff: list[str] | None = None
  svg_url: str
  nodes: list[dict[str, Any]] | None = None
  edges: list[dict[str, Any]] | None = None
  partial: bool = Field(default=False, description="not every node is here (cut over the node limit, or a big program's calls "
                        "collapsed by realize and line): whole=1 has them all")
  groups: list[dict[str, Any]] | None = Field(default=None, description="whole=1: the graph's groups (explorer.present.graph_groups), each "
                                              "parent before its children; a node's `group` indexes the deepest holding it")
  groupings: list[str] | None = Field(default=None, description="whole=1 on a tensor graph: the groupings `by` may name (line: the module "
                                      "objects and model lines that made each UOp; kernel: the kernel each UOp ended up in), where there are two")
  by: str | None = Field(default=None, description="whole=1 on a tensor graph: the grouping drawn")

class Match(BaseModel):
  """One match of a rewrite pass: the rule, the time tinygrad measured for it, the rewritten UOp before and after."""
  index: int = Field(description="1-based, in the order tinygrad recorded the matches")
  op: str = Field(description="the op of the UOp the rule matched")
  rule: str = Field(description="file:line of the UPat (tinygrad's files by their path in tinygrad, the explorer's by theirs)")
  rule_source: str = Field(description="the rule as it stands in its file")
  time_s: float = Field(description="the time the match took, as tinygrad recorded it")
  error: str | None = Field(default=None, description="the rule raised: its error (tinygrad's REWRITE_ERROR)")
  diff: list[str] = Field(description="unified diff of the rewritten UOp's Python form (pyrender), before -> after, three sources deep")
  before: dict[str, Any] = Field(description="the matched UOp's graph, three sources deep (nodes, edges)")
  after: dict[str, Any] = Field(description="what the rule returned, three sources deep")

class PassMatches(BaseModel):
  """A page of one pass's matches, and where in tinygrad the pass ran."""
  name: str
  call: str = Field(description="file:line of the graph_rewrite call that ran this pass")
  call_code: str = Field(description="that line of code")
  stack: list[dict[str, Any]] = Field(default_factory=list, description="the Python stack that opened the pass's rewrite group, outermost "
                                      "first (file, line, function, code; the explorer's frames left out): the host's passes of traces "
                                      "recorded since stacks were kept, else empty")
  total: int = Field(description="every match the pass recorded")
  bottom_up: bool
  depth: int
  offset: int
  matches: list[Match]

class Origin(BaseModel):
  """Where a UOp first appeared in a rewrite group, replayed from tinygrad's rewrite log (RewriteBlob.origin). kind: match (match `match`
  of pass `step` returned it: `rule` and `rule_source` made it), start (first seen in the graph pass `step` started from: made between
  passes, by no rule), input (in the graph the group's first pass was handed), unknown (in none of the group's graphs)."""
  num: int
  kind: Literal["match", "start", "input", "unknown"]
  step: int | None
  name: str | None = Field(description="the pass; a nested one also names the pass it ran inside")
  match: int | None
  depth: int | None
  rule: str | None = Field(description="file:line of the rule (UPat) whose match made it")
  rule_source: str | None

# ***** errors: their bodies, and the statuses each operation documents *****

class ErrorBody(BaseModel):
  """Every error but a 422: what went wrong, in one line."""
  detail: str

class FieldError(BaseModel):
  """One request field that failed validation: pydantic's error type, where (`["body", "spec", "cin"]`, `["query", "limit"]`) and why."""
  type: str
  loc: list[str | int]
  msg: str

class ValidationErrorBody(BaseModel):
  """A 422: a malformed request (`errors`: one per field that failed validation) or a well-formed one this server refuses (a spec over
  the memory budget, a note anchored to what the trace lacks: `errors` is empty). `detail` says it all in one line."""
  detail: str
  errors: list[FieldError]

# answered before the operation runs (explorer/web/limits.py, the access token check), so every operation may answer them
GUARDS = {400: "the Content-Length header is not a number",
          401: "the server requires an access token (KERNEL_EXPLORER_TOKEN) and the request has none or a wrong one",
          403: "a Host header that does not name loopback on a loopback-only server, or a request from another site that would change or start "
               "something (POST, DELETE; GETs that would start work: a target's codegen, a graph layout, a diff, an export)",
          408: "the request body did not arrive within request_body_timeout_s of its head",
          413: "the request body is over max_body_bytes",
          414: "the URL is over 8 KiB",
          500: "the server failed (a bug): the detail is its one line, the server's log has the rest",
          503: "the server is serving max_connections requests already, or max_connections x 4 bodies are still arriving (Retry-After)"}
NOT_FOUND = {404: "no trace with this id", 409: "the trace is still queued or running"}

def documented(errors: dict[int, str] | None = None, guards: tuple[int, ...] = tuple(GUARDS)) -> dict[int | str, dict[str, Any]]:
  """An operation's `responses`: its own error statuses (with what each means there) and the guards', each with its body model."""
  errors = errors or {}
  def why(code: int) -> str: return "; or ".join(w for w in (errors.get(code), GUARDS.get(code) if code in guards else None) if w)
  return {code: {"model": ValidationErrorBody if code == 422 else ErrorBody, "description": why(code)} for code in sorted({*errors, *guards})}

class ProbeStatus(BaseModel):
  """The roofline probe of a trace's device: queued, running (`detail` says what it measures now), done (`result`: the peaks measured,
  cached for every trace of that device), error (`error`: why), or none (no probe of the device has run on this server: no `id`).
  One probe per device runs at a time; requests meanwhile share it."""
  model_config = {"extra": "forbid"}
  id: str | None
  device: str
  status: Literal[Recomputed, "none"]
  detail: str = ""
  url: str
  result: dict[str, Any] | None = None
  error: str | None = None
  elapsed_s: float

class EnrichmentJob(BaseModel):
  """An enrichment being computed on first request (202): a kernel's record on a target the trace did not render, a record's analysis
  or its compile facts (kind); poll the same URL: 200 brings it."""
  kind: Literal["target", "analysis", "facts"]
  target: str
  kernels: list[int]
  status: Recomputed
  detail: str = ""
  error: str | None = None
  started: float
  ahead: int | None = Field(None, description="while it waits for a worker: how many tasks are before it in the line (0: it is next)")

class HandOptsRequest(BaseModel):
  """A kernel scheduled by hand: opts OP:AXIS:ARG (tinygrad's Opt), applied after the start's opts, on a target."""
  target: str | None = Field(None, max_length=16, description="a render target (default: the trace's own)")
  opts: list[str] = Field(default_factory=list, max_length=MAX_HAND_OPTS, description="e.g. [\"UPCAST:0:4\", \"LOCAL:1:8\"]")
  start: Literal["current", "none", "heuristic"] = Field("current", alias="from", description="the kernel's current opts on the target, "
                                                         "none, or tinygrad's heuristic's, before `opts`")
  model_config = {"populate_by_name": True, "extra": "forbid"}

class OptsJob(BaseModel):
  """A hand schedule being computed (202): poll GET .../opts with the same target, opts and from; 200 brings the result."""
  kind: Literal["opts"]
  kernel: int
  target: str
  start: str = Field(alias="from")
  opts: list[str]
  status: Recomputed
  detail: str = ""
  error: str | None = None
  started: float

class Unopened(BaseModel):
  """A compute device this host did not open, and tinygrad's reason (NV fails with a bare StopIteration in some VMs where CUDA opens)."""
  device: str
  reason: str

class DevicesOffered(BaseModel):
  """The compute devices a trace may name here, best first, and those that did not open (with a job queue: none listed here)."""
  devices: list[str]
  unopened: list[Unopened] = []

class TinygradVersion(BaseModel):
  """A tinygrad a trace may run on and where its environment stands (explorer.tracing.versions): server (the server's own), ready
  (made from its lock), missing (not made yet), stale (made from another lock) or broken (half made, or a file of its tinygrad missing or changed)."""
  version: str
  state: Literal["server", "ready", "missing", "stale", "broken"]
  meaning: str

class OptsTiming(BaseModel):
  """The original (A) and the hand schedule (B) timed in interleaved pairs on the trace's device, in this run, by the device's clock
  (method): B/A's median and 95% interval, and each side's timing record."""
  device: str
  repeats: int
  method: str | None = Field(default=None, description="the clock (explorer.clocks.METHODS); null: a schedule stored before clocks were named")
  notice: str | None = None
  a_median_s: float
  b_median_s: float
  a_s: dict[str, Any] | None = None
  b_s: dict[str, Any] | None = None
  ratio: float
  ci_low: float
  ci_high: float
  a_samples: list[float]
  b_samples: list[float]

class OptsCheck(BaseModel):
  """The original and the hand schedule run once on the trace's device over the same seeded inputs: the values written compared."""
  values: int
  max_abs_diff: float
  same: bool

class HandSchedule(BaseModel):
  """The kernel with the opts applied: its record on the target (as a trace records one), the opts tinygrad would let BEAM try next
  (get_kernel_actions), the kernel's axes as apply_opt numbers them, and the timing where it ran on the trace's device."""
  target: str
  start: str
  opts: list[str]
  record: TargetRecord
  next: list[str]
  timing: OptsTiming | None = None
  check: OptsCheck | None = None
  original_compile: dict[str, Any] | None = Field(default=None, description="the original's compile facts, compiled beside the hand "
                                                  "schedule where the trace had none yet (its registers)")
  axes: list[KernelAxis] | None = Field(default=None, description="the kernel's axes before any opt, where the first opt's axis points "
                                        "(null: a schedule stored by an older version)")
  axes_after: list[KernelAxis] | None = Field(default=None, description="its axes after these opts, where a next opt's axis points")

# ***** studies: a seed document's experiment, every case, timed interleaved with intervals and verdicts *****

StudyKind = Literal["constants", "fusion"]

class StudyRequest(BaseModel):
  """A study: `constants` (seed 000: symbolic vs materialized Winograd constants) or `fusion` (seed 003: staged, fused, single and
  builtin Winograd). Its cases: `presets` and/or custom `specs` (neither: the document's own cases)."""
  model_config = {"extra": "forbid", "json_schema_extra": {"examples": [{"kind": "constants", "presets": ["small"], "repeats": 20}]}}
  kind: StudyKind
  presets: list[PresetName] = Field(default=[], max_length=8, description="default (with no specs): small,medium,large,k5 or wino8,wino16,wino32")
  specs: list[SpecIn] = Field(default=[], max_length=8, description="custom shapes, run after the presets")
  repeats: int = Field(default=20, ge=3, le=1000, strict=True, description="timed interleaved repeats (the minimum, with ci_width)")
  warmup: int = Field(default=3, ge=0, le=100, strict=True)  # strict: false is no count of warmups
  ci_width: float | None = Field(default=STUDY_CI_WIDTH, gt=0, le=1, description="sample past `repeats` until every B/A interval is narrower "
                                 "than this, relative to the ratio (null: exactly `repeats`); the CLI's `--ci-width` has the same default")
  budget_s: float = Field(default=120, ge=1, le=3600, description="the adaptive sampling's time budget per case, in seconds")
  tile: Tile | None = Field(default=None, description="the explorer's tile, for the cases whose kernel it fits (F(m,r): r x r); "
                             "the other cases, and the default: F(4,3) for 3x3 kernels, F(4,5) for 5x5")
  targets: list[Target] = Field(default=["cuda"], min_length=1, max_length=len(TARGETS))
  device: str | None = Field(default=None, max_length=32, description="a device this server offers (GET /api/devices); default: the best one")
  tinygrad: TinygradName | None = Field(default=None, description="the tinygrad every case traces and times on (default: this server's own; "
                                        "GET /api/versions): its verdicts are that tinygrad's")

class StudyStatus(BaseModel):
  """Where a study stands: running (`step` of `steps`, what it does now in `detail`), done (`result`: the JSON the CLI writes, and
  `table`: every case's figures beside the document's), error, or interrupted (the server stopped first)."""
  model_config = {"extra": "forbid"}
  id: str
  kind: StudyKind | None = Field(description="null: a damaged row whose kind is none this version runs (`damaged` says so)")
  label: str
  status: StartedAtOnce
  url: str
  step: int = 0
  steps: int = 0
  current: str = ""
  detail: str = ""
  error: str | None = None
  created: float
  elapsed_s: float
  request: dict[str, Any]
  result: dict[str, Any] | None = None
  table: list[dict[str, Any]] | None = None
  damaged: str | None = Field(default=None, description="a stored row that does not read as a study (an older or damaged database): "
                              "what is wrong; its result and table are then null")

# ***** live classes (explorer.web.services.classes): a presenter drives its students' browsers *****

class ClassStart(BaseModel):
  """Start a class on the page at `url` (a path on this server, with its query: the page the teacher is on)."""
  model_config = {"extra": "forbid"}
  url: str = Field(max_length=2000, pattern=r"^/([^/\x00-\x1f][^\x00-\x1f]*)?$")

ViewKey = Annotated[str, Field(min_length=1, max_length=40)]
ViewValue = Annotated[str, Field(max_length=200)] | Annotated[float, Field(allow_inf_nan=False)] | bool | None

class ClassState(BaseModel):
  """What the presenter shows: the page's address (its state lives in its URL: the tour step, kernel, target tab, pass and match, the
  selected node) and a small view beside it (a graph's pan and zoom, an opened panel: what the URL does not hold)."""
  model_config = {"extra": "forbid"}
  url: str = Field(max_length=2000, pattern=r"^/([^/\x00-\x1f][^\x00-\x1f]*)?$")
  view: dict[ViewKey, ViewValue] = Field(default_factory=dict, max_length=16)

class ExploredPage(BaseModel):
  page: str
  students: int

class ClassCounts(BaseModel):
  """Who is in the class now: students following the presenter, students exploring, and the pages most of those are on."""
  following: int
  exploring: int
  pages: list[ExploredPage]

class AskedFor(BaseModel):
  """A question that asks for a number typed, or a node of the page's graph clicked (its number)."""
  model_config = {"extra": "forbid"}
  id: str = Field(pattern=r"^[a-z0-9-]{1,40}$")
  kind: Literal["number", "node"]
  prompt: str = Field(min_length=1, max_length=300)
  choices: list[str] = Field(default_factory=list, max_length=0)

class AskedToChoose(BaseModel):
  """A question that asks for one of its choices."""
  model_config = {"extra": "forbid"}
  id: str = Field(pattern=r"^[a-z0-9-]{1,40}$")
  kind: Literal["choice"]
  prompt: str = Field(min_length=1, max_length=300)
  choices: list[Annotated[str, Field(min_length=1, max_length=80)]] = Field(min_length=2, max_length=8, json_schema_extra={"uniqueItems": True})

# what the presenter asks the class; its answer stays with the presenter until revealed
ClassQuestion = Annotated[AskedFor | AskedToChoose, Field(discriminator="kind")]

class GivenAnswer(BaseModel):
  answer: str
  students: int

class Poll(BaseModel):
  """The question asked now, how many students gave each answer (most first; never who gave which), and the answer once revealed."""
  question: AskedFor | AskedToChoose
  answers: list[GivenAnswer]
  total: int
  revealed: str | None

class ClassAnswer(BaseModel):
  """A student's answer to the question `question` (a new one replaces its last)."""
  model_config = {"extra": "forbid"}
  student: str = Field(pattern=r"^[A-Za-z0-9_-]{8,32}$")
  question: str = Field(pattern=r"^[a-z0-9-]{1,40}$")
  answer: str = Field(min_length=1, max_length=32)

class ClassReveal(BaseModel):
  model_config = {"extra": "forbid"}
  answer: str = Field(min_length=1, max_length=32)

class ClassView(BaseModel):
  """A live class: its state, how many moves made it (`seq`), its students' counts, and the question it asks (`poll`)."""
  id: str
  join_url: str
  state: ClassState
  seq: int
  ended: bool
  counts: ClassCounts
  poll: Poll | None

class ClassStarted(ClassView):
  """A class just started, with its presenter key: said once (the server keeps its hash), kept by the teacher's browser; send it as
  X-Presenter-Key to move or end the class."""
  presenter_key: str

class Presence(BaseModel):
  """A student's browser (`student`: an id it made, one per tab) follows the class, or explores on `page`."""
  model_config = {"extra": "forbid"}
  student: str = Field(pattern=r"^[A-Za-z0-9_-]{8,32}$")
  following: bool
  page: str = Field("", max_length=200)
