"""The model: what convolution to trace (ConvSpec) and how to run it (Variant), with what a variant or a request may name (devices,
opts, custom rewrites) and the error a trace's output is judged against. No tinygrad imports here."""
from __future__ import annotations
import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from explorer import targets
from explorer.targets import TARGETS
from explorer.tinygrads import TINYGRAD, TINYGRADS, TRACEABLE, tinygrad_problem

DTYPES = {"float32": 4, "float16": 2}
# the architectures a variant may name for the targets that follow one (explorer.targets: CUDA and PTX follow Variant.cuda_arch, Metal
# Variant.metal_arch, with that arch's tensor cores)
CUDA_ARCHES = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")
METAL_ARCHES = ("Apple7", "Apple8", "Apple9")
ALGOS = ("direct", "winograd")
WINO_IMPLS = ("builtin", "explorer")
TILES = ("F(4,3)", "F(2,3)", "F(2,5)", "F(4,5)")  # F(m,r): m x m outputs per tile of an r x r kernel; the 5x5 ones are generated
STAGINGS = ("staged", "fused", "single")
CONSTS = ("symbolic", "materialized")
DEFAULT_MEMORY_BUDGET = 2 << 30  # bytes across input, weight and output
# a study's adaptive sampling, the CLI's and the web's default: go on until each B/A ratio's 95% interval is at most 2% of the ratio wide
STUDY_CI_WIDTH = 0.02
# a study's compile time: one trace per variant is one sample, too few for an interval, so the timing worker compiles each variant's
# kernel sources this many times more (the device's compiler, uncached, interleaved as the run times are). 10 pairs suffice for the
# signed-rank test; the cost is 10 compiles of every variant (about 2 minutes for the fusion study's wino32 on a 2-core CPU)
STUDY_COMPILE_REPEATS = 10

class SpecError(ValueError):
  """Bad user input: the message is one line a person can act on."""

@dataclass(frozen=True)
class ConvSpec:
  batch: int
  cin: int
  cout: int
  height: int
  width: int
  kernel: int
  stride: int = 1
  padding: int | None = None  # None: keep the spatial size (kernel//2)
  groups: int = 1
  dtype: str = "float32"

  @property
  def pad(self) -> int: return self.kernel // 2 if self.padding is None else self.padding
  @property
  def out_hw(self) -> tuple[int, int]:
    return tuple((d + 2*self.pad - self.kernel) // self.stride + 1 for d in (self.height, self.width))  # type: ignore[return-value]
  @property
  def input_shape(self) -> tuple[int, ...]: return (self.batch, self.cin, self.height, self.width)
  @property
  def weight_shape(self) -> tuple[int, ...]: return (self.cout, self.cin // self.groups, self.kernel, self.kernel)
  @property
  def output_shape(self) -> tuple[int, ...]: return (self.batch, self.cout, *self.out_hw)
  @property
  def itemsize(self) -> int: return DTYPES[self.dtype]
  @property
  def tensor_bytes(self) -> int:
    return sum(math.prod(s) for s in (self.input_shape, self.weight_shape, self.output_shape)) * self.itemsize
  @property
  def direct_flops(self) -> int:
    """Multiply-adds of the direct convolution, counted as 2 FLOPs each."""
    return 2 * math.prod(self.output_shape) * (self.cin // self.groups) * self.kernel * self.kernel

  def validate(self, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> ConvSpec:
    for name in ("batch", "cin", "cout", "height", "width", "kernel", "stride", "groups"):
      if not isinstance(v := getattr(self, name), int) or isinstance(v, bool) or v < 1:
        raise SpecError(f"{name} must be a positive integer, got {v!r}")
    if self.padding is not None and (not isinstance(self.padding, int) or isinstance(self.padding, bool) or self.padding < 0):
      raise SpecError(f"padding must be a non-negative integer, got {self.padding!r}")
    if self.dtype not in DTYPES: raise SpecError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
    if self.cin % self.groups or self.cout % self.groups:
      raise SpecError(f"groups={self.groups} must divide both in channels ({self.cin}) and out channels ({self.cout})")
    if min(self.height, self.width) + 2*self.pad < self.kernel:
      raise SpecError(f"kernel {self.kernel}x{self.kernel} does not fit a {self.height}x{self.width} input with padding {self.pad}")
    if self.tensor_bytes > memory_budget:
      raise SpecError(f"tensors need {self.tensor_bytes/2**20:.1f} MiB, over the memory budget of {memory_budget/2**20:.1f} MiB")
    return self

  def label(self) -> str:
    s = f"{self.batch}x{self.cin}->{self.cout} {self.height}x{self.width} k{self.kernel}"
    if self.stride != 1: s += f" s{self.stride}"
    if self.padding is not None and self.padding != self.kernel // 2: s += f" p{self.padding}"
    if self.groups != 1: s += f" g{self.groups}"
    return s + ("" if self.dtype == "float32" else f" {self.dtype}")

  def to_dict(self) -> dict[str, Any]: return dataclasses.asdict(self)
  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> ConvSpec:
    return cls(**_checked_fields(cls, d, "spec"))

PRESETS: dict[str, ConvSpec] = {
  # seed 000's cases
  "small": ConvSpec(1, 3, 16, 32, 32, 3),
  "medium": ConvSpec(8, 16, 32, 64, 64, 3),
  "large": ConvSpec(16, 32, 64, 128, 128, 3),
  "k5": ConvSpec(8, 16, 32, 64, 64, 5),
  # seed 003's shapes
  "wino8": ConvSpec(1, 8, 8, 32, 32, 3),
  "wino16": ConvSpec(1, 16, 16, 32, 32, 3),
  "wino32": ConvSpec(1, 32, 32, 64, 64, 3),
}

def preset_of(spec: ConvSpec) -> str | None: return next((n for n, p in PRESETS.items() if p == spec), None)


# tinygrad devices that compute on real hardware, best first (tinygrad's own order). Every other device is never offered to a web
# request: DISK, TINYFS and NPY read and write files or open sockets, PYTHON emulates kernels in Python, NULL runs nothing.
COMPUTE_DEVICES = ("METAL", "AMD", "NV", "CUDA", "CL", "CPU")
DEVICE_RE = re.compile(r"([A-Z][A-Z0-9_]*)(:[0-9]{1,2})?")  # a device and, on multi-GPU hosts, its index: CUDA, CUDA:1

SINGLE_INSTANCE = ("CPU",)  # tinygrad opens one of these: CPU:1 would compute what CPU does, under another trace id

def normalize_device(device: str) -> str:
  """The one name tinygrad means by `device` (its Device.canonicalize, made strict): an index 0 goes (CPU:0 and CPU:00 are CPU), another
  loses its leading zeros (CUDA:01 is CUDA:1); SpecError for what is no device name, or for an index on a device of one instance."""
  if not isinstance(device, str) or not (m := DEVICE_RE.fullmatch(device)):
    raise SpecError(f"device must be a device name such as CPU or CUDA:1, got {device!r:.40}")
  name, index = m.group(1), int(m.group(2)[1:]) if m.group(2) else 0
  if index == 0: return name
  if name in SINGLE_INSTANCE: raise SpecError(f"device {device}: {name} has one instance; name it {name}")
  return f"{name}:{index}"

def device_problem(device: str, offered: Sequence[str] = COMPUTE_DEVICES) -> str | None:
  """Why `device` may not be used (None: it may): it must be a device name that is its own normal form (normalize_device) and one of
  `offered`, or one of them with an index (CUDA:1)."""
  allowed = ", ".join(offered) or "none"
  try: normal = normalize_device(device)
  except SpecError as e: return f"{e}; this server offers: {allowed}"
  if normal != device: return f"device {device} is {normal}: name it so"
  if normal.split(":")[0] not in offered: return f"device {normal.split(':')[0]} is not offered here; this server offers: {allowed}"
  return None

OPT_RE = re.compile(r"heuristic|none|beam:[1-9][0-9]*")

# ***** opts by hand (explorer.tracing.enrichments.handopts): tinygrad's Opt(op, axis, arg) written OP:AXIS:ARG, UPCAST:0:4 *****
OPT_OPS = ("TC", "UPCAST", "UNROLL", "LOCAL", "THREAD", "GROUP", "GROUPTOP", "NOLOCALS", "PADTO", "SWAP")  # tinygrad's OptOps
# TC's argument may be negative (-1: any tensor core); every other op's is a size, 0 or more
_AXIS, _SIZES, _SIGNED = r"([0-9]{1,2})?", r"([0-9]{1,5}(,[0-9]{1,5}){0,2})?", r"(-?[0-9]{1,5}(,-?[0-9]{1,5}){0,2})?"
HAND_OPT_RE = re.compile(rf"(?:TC:{_AXIS}:{_SIGNED}|({'|'.join(o for o in OPT_OPS if o != 'TC')}):{_AXIS}:{_SIZES})")
_SIGNED_OPT_RE = re.compile(rf"({'|'.join(OPT_OPS)}):([0-9]{{1,2}})?:-?[0-9,-]*")  # an opt but for its sign: said so, not "not an opt"
MAX_HAND_OPTS = 16
HAND_OPTS_QUERY = rf"^({HAND_OPT_RE.pattern}(,{HAND_OPT_RE.pattern}){{0,{MAX_HAND_OPTS - 1}}})?$"  # opts in a URL, comma separated
_OPT_SPLIT = re.compile(rf",(?=(?:{'|'.join(OPT_OPS)}):)", re.IGNORECASE)  # a comma that starts an opt (TC's argument has commas too)

def split_opts(text: str | None) -> list[str]:
  """Opts as a URL writes them, UPCAST:0:4,TC:0:-1,2,1,LOCAL:1:8, one by one."""
  return [o for o in _OPT_SPLIT.split(text or "") if o.strip()]
OPTS_FROM = ("current", "none", "heuristic")  # where a hand schedule starts: the kernel's own opts, none, or tinygrad's heuristic's

_OPT_REPR = re.compile(r"Opt\(op=OptOps\.(\w+), axis=(\w+), arg=(.*)\)")

def opt_label(opt: str) -> str:
  """An applied opt as OP:AXIS:ARG (traces record it so; older ones kept tinygrad's repr, Opt(op=OptOps.UPCAST, axis=0, arg=4))."""
  if not (m := _OPT_REPR.fullmatch(opt)): return opt
  op, axis, arg = m.groups()
  return f"{op}:{'' if axis == 'None' else axis}:{'' if arg == 'None' else arg.strip('()').replace(' ', '').rstrip(',')}"

def hand_opts(opts: Sequence[str], start: str = "current") -> tuple[str, ...]:
  """Opts as a user wrote them, checked as text (tinygrad judges them in a worker); SpecError says which one is not an opt."""
  if start not in OPTS_FROM: raise SpecError(f"from must be one of {', '.join(OPTS_FROM)}, got {start!r}")
  if len(opts) > MAX_HAND_OPTS: raise SpecError(f"at most {MAX_HAND_OPTS} opts, got {len(opts)}")
  out = tuple(o.strip().upper() for o in opts if isinstance(o, str) and o.strip())
  if len(out) != len(opts): raise SpecError("an opt is empty or not text")
  for o in out:
    if HAND_OPT_RE.fullmatch(o): continue
    if (m := _SIGNED_OPT_RE.fullmatch(o)) and "-" in o.split(":", 2)[2]:  # tinygrad would take it as a size and fail inside
      raise SpecError(f"{o[:40]!r}: {m.group(1)}'s argument is a size, 0 or more (0: the whole axis; UPCAST:0:4)")
    raise SpecError(f"{o[:40]!r} is not an opt: OP:AXIS:ARG with OP one of {', '.join(OPT_OPS)} (UPCAST:0:4)")
  return out

# the largest error a trace's output may have against the float64 reference, relative to the reference's largest magnitude (error_stats'
# max_rel): float16 keeps 11 bits, and Winograd's transforms amplify rounding, F(4,3) more than F(2,3)
ERROR_TOLERANCE = {("direct", "float32"): 1e-5, ("F(2,3)", "float32"): 1e-4, ("F(4,3)", "float32"): 1e-3,
                   ("F(2,5)", "float32"): 1e-4, ("F(4,5)", "float32"): 1e-3,
                   ("direct", "float16"): 5e-3, ("F(2,3)", "float16"): 5e-3, ("F(4,3)", "float16"): 5e-2,
                   ("F(2,5)", "float16"): 2e-2, ("F(4,5)", "float16"): 5e-2}

def error_tolerance(variant_dict: Mapping[str, Any], dtype: str) -> tuple[float, str]:
  """The tolerance a trace's error is judged against, and what it is for ("F(4,3) float32")."""
  if variant_dict.get("algo") != "winograd": kind = "direct"
  else: kind = "F(4,3)" if variant_dict.get("wino_impl") == "builtin" else variant_dict.get("tile", "F(4,3)")
  return ERROR_TOLERANCE[(kind, dtype)], f"{kind} {dtype}"

@dataclass(frozen=True)
class RewriteInfo:
  usage: str    # how a variant names it
  summary: str  # one line
  point: str    # where in codegen it runs: "sink" (the graph the linearizer is handed) or "linear" (the linearized order)

# the custom rewrites a variant may add to codegen (explorer.tracing.pipeline.rewrites implements them), after the codegen notes (seed 004)
REWRITES = {
  "sink-loads": RewriteInfo("sink-loads", "move each LOAD down to just before its first use (never past a store, loop or branch mark), "
                            "shortening live ranges: the notes' load sinking, done on the linear order tinygrad's linearizer chose", "linear"),
  "peel": RewriteInfo("peel:N", "peel the first N iterations of each kernel's outermost loop into a loop of their own (the notes' "
                      "generic loop peeler; 0.14's own cutting is the split ranges pass)", "sink"),
  "drop-end": RewriteInfo("drop-end", "remove the END of each kernel's outermost loop: the notes' \"missing .end()\", a teaching case "
                          "that must fail (the loop's closing brace is never rendered)", "sink"),
}
def rewrite_file_name(path: str) -> str:
  """How a user's rewrite file is named: in the variant's label, its codegen pass (explorer rewrite NAME) and the trace's record."""
  return f"file:{path.rsplit('/', 1)[-1]}"

REWRITE_RE = re.compile(r"sink-loads|drop-end|peel:[1-9][0-9]{0,3}")

def _checked_fields(cls: type, d: Mapping[str, Any], what: str) -> dict[str, Any]:
  fields = {f.name: f for f in dataclasses.fields(cls)}
  if unknown := set(d) - set(fields): raise SpecError(f"unknown {what} field(s): {', '.join(sorted(unknown))}")
  required = {n for n, f in fields.items() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
  if missing := required - set(d): raise SpecError(f"missing {what} field(s): {', '.join(sorted(missing))}")
  return dict(d)

NOT_SET = object()

@dataclass(frozen=True)
class Knob:
  """How one field of Variant is offered, declared once beside the field: the API's request model (explorer.web.http.models), the CLI's
  flags (explorer.cli.main), the form's defaults and the trace ids (explorer.store.trace_key) are derived from it."""
  help: str
  choices: tuple[str, ...] | None = None  # the names the field takes (its type on the API: an enum)
  bounds: tuple[int, int] | None = None   # an integer field's least and most (the settings may bound it further)
  pattern: str | None = None              # a string field's form (the API's pattern)
  max_length: int | None = None           # a string's, or a list's, longest
  cli: str = "value"                      # how the CLI reads it: "value", "list" (comma separated), "switch" (--flag), "negated" (--no-flag)
  flag: str | None = None                 # the CLI's flag, when not --field-name
  cli_help: str | None = None             # the CLI flag's help, when not `help` (a negated flag's)
  web: str = "offered"                    # "offered" on the API, or "refused" (only null is accepted: the CLI's alone)
  unkeyed: Any = NOT_SET                  # a field added after the first release: the value a trace id leaves out (its default when it was
                                          # added, so that earlier ids stay the same; never its current default, which may change)

def knob(default: Any, help: str, **how: Any) -> Any:
  return field(default=default, metadata={"knob": Knob(help, **how)})

@dataclass(frozen=True)
class Variant:
  """How to compute and run a convolution. Every field but notes is a Knob (above)."""
  algo: str = knob("direct", "direct convolution, or Winograd", choices=ALGOS)
  wino_impl: str = knob("builtin", "whose Winograd: tinygrad's builtin (WINO=1) or the explorer's (every tile, staging and constant mode)",
                        choices=WINO_IMPLS)
  tile: str = knob("F(4,3)", "the explorer's Winograd tile F(m,r): m x m outputs of an r x r kernel", choices=TILES)
  staging: str = knob("staged", "the explorer's Winograd: transforms in kernels of their own (staged), fused into the product, or one kernel",
                      choices=STAGINGS)
  consts: str = knob("symbolic", "the explorer's Winograd transform constants: symbolic (deviceless) or materialized", choices=CONSTS)
  opt: str = knob("heuristic", "heuristic (tinygrad's default), none (NOOPT) or beam:N", pattern=f"^({OPT_RE.pattern})$", max_length=16)
  targets: tuple[str, ...] = knob((), "other render targets, besides the host's own (which is always rendered); a stored trace computes any "
                                  "other when a page first shows it", choices=TARGETS, max_length=len(TARGETS), cli="list", flag="--target")
  warmup: int = knob(2, "untimed runs before the timed ones", bounds=(0, 1000))
  repeats: int = knob(10, "timed runs of every kernel, interleaved", bounds=(1, 1000))
  time: bool = knob(True, "time every kernel, interleaved (warmup, then repeats)", cli="negated", cli_help="skip timing")
  fallback: bool = knob(False, "run the direct algorithm (with a note) where Winograd does not apply", cli="switch")
  device: str | None = knob(None, "the device to run on (default: the best one; a server offers GET /api/devices)", max_length=32)
  cuda_arch: str = knob("sm_90", "the arch the cuda and ptx targets render and compile for", choices=CUDA_ARCHES, unkeyed="sm_90")
  metal_arch: str = knob("Apple9", "the GPU family the metal target renders for", choices=METAL_ARCHES, unkeyed="Apple9")
  rewrites: tuple[str, ...] = knob((), "custom codegen rewrites, applied in this order: sink-loads, peel:N, drop-end",
                                   pattern=f"^({REWRITE_RE.pattern})$", max_length=len(REWRITES), cli="list", flag="--rewrite", unkeyed=())
  rewrite_file: str | None = knob(None, "your own rewrite: a Python file defining `matcher`, a tinygrad PatternMatcher (and optionally point = "
                                  "'sink' or 'linear'); the CLI's alone, a server never runs user code", web="refused", unkeyed=None)
  tinygrad: str | None = knob(None, "the tinygrad to trace with: the server's own (default), or an older one in an environment of its own "
                              "(kernel-explorer versions; GET /api/versions)", choices=TINYGRADS, unkeyed=None)
  notes: tuple[str, ...] = field(default=(), compare=False)

  @property
  def beam(self) -> int: return int(self.opt.split(":")[1]) if self.opt.startswith("beam:") else 0

  def validate(self, max_repeats: int = 1000, max_beam: int = 8) -> Variant:
    def one_of(name: str, allowed: tuple[str, ...]) -> None:
      if getattr(self, name) not in allowed: raise SpecError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
    one_of("algo", ALGOS); one_of("wino_impl", WINO_IMPLS); one_of("tile", TILES); one_of("staging", STAGINGS); one_of("consts", CONSTS)
    if not isinstance(self.opt, str) or not OPT_RE.fullmatch(self.opt): raise SpecError(f"opt must be heuristic, none or beam:N, got {self.opt!r}")
    if self.beam > max_beam: raise SpecError(f"beam width {self.beam} is over the limit of {max_beam}")
    if bad := [t for t in self.targets if t not in TARGETS]: raise SpecError(f"unknown target(s) {', '.join(bad)}; known: {', '.join(TARGETS)}")
    if len(set(self.targets)) != len(self.targets): raise SpecError("targets are listed more than once")
    one_of("cuda_arch", CUDA_ARCHES); one_of("metal_arch", METAL_ARCHES)
    if self.device is not None and normalize_device(self.device) != self.device:
      raise SpecError(f"device {self.device} is {normalize_device(self.device)}: name it so")
    if bad := [r for r in self.rewrites if not isinstance(r, str) or not REWRITE_RE.fullmatch(r)]:
      raise SpecError(f"unknown rewrite(s) {', '.join(map(repr, bad))}; known: {', '.join(i.usage for i in REWRITES.values())}")
    if len({r.split(':')[0] for r in self.rewrites}) != len(self.rewrites): raise SpecError("a rewrite is listed more than once")
    if self.tinygrad is not None: self._check_tinygrad(self.tinygrad)
    if any(not isinstance(v, int) or isinstance(v, bool) for v in (self.warmup, self.repeats)) \
       or not 0 <= self.warmup <= max_repeats or not 1 <= self.repeats <= max_repeats:
      raise SpecError(f"warmup must be 0..{max_repeats} and repeats 1..{max_repeats}")
    if self.algo == "direct" and self.wino_impl != "builtin": raise SpecError("--wino-impl applies to --algo winograd only")
    if self.algo == "winograd" and self.wino_impl == "builtin" and (self.tile, self.staging, self.consts) != ("F(4,3)", "staged", "symbolic"):
      raise SpecError("the builtin Winograd (tinygrad's WINO=1) is F(4,3), staged, with symbolic constants; "
                      "use --wino-impl explorer to vary them")
    return self

  def winograd_problem(self, spec: ConvSpec) -> str | None:
    """Why Winograd does not apply to this spec, or None when it does."""
    if self.algo != "winograd": return None
    r = int(self.tile.strip("F()").split(",")[1]) if self.wino_impl == "explorer" else 3
    if spec.kernel != r:
      tile = self.tile if self.wino_impl == "explorer" else "tinygrad's builtin F(4,3)"
      return f"Winograd {tile} needs a {r}x{r} kernel, this one is {spec.kernel}x{spec.kernel}"
    if spec.stride != 1: return f"Winograd needs stride 1, this one has stride {spec.stride}"
    if self.wino_impl == "explorer" and spec.groups != 1: return "the explorer's Winograd supports groups=1 only"
    return None

  def _check_tinygrad(self, version: str) -> None:
    """A supported tinygrad the explorer traces on, and nothing asked of it that is not built for it yet."""
    if (problem := tinygrad_problem(version)) is not None: raise SpecError(problem)
    if version == TINYGRAD: return
    if version not in TRACEABLE:
      raise SpecError(f"tracing on tinygrad {version} is not built yet: the explorer traces on tinygrad {', '.join(TRACEABLE)}")
    if self.beam > 0: raise SpecError(f"BEAM on tinygrad {version} is not built yet: trace without, or on tinygrad {TINYGRAD}")

  def resolve(self, spec: ConvSpec) -> Variant:
    """Validate against the spec: a clear error, or with fallback the direct algorithm and a note saying so."""
    self.validate()
    spec.validate()
    if (problem := self.winograd_problem(spec)) is None: return self
    if not self.fallback: raise SpecError(f"{problem} (use --fallback to run the direct algorithm instead)")
    return dataclasses.replace(self, algo="direct", wino_impl="builtin", tile="F(4,3)", staging="staged", consts="symbolic",
                               notes=self.notes + (f"fell back to the direct algorithm: {problem}",))

  def arch(self, target: str) -> str:
    """The architecture `target` renders for under this variant."""
    if (t := targets.BY_NAME.get(target)) is None: return ""
    return t.arch_for({"cuda_arch": self.cuda_arch, "metal_arch": self.metal_arch})

  def label(self) -> str:
    if self.algo == "direct": s = "direct"
    elif self.wino_impl == "builtin": s = "winograd builtin"
    else: s = f"winograd {self.tile} {self.staging} {self.consts}"
    extra = [*self.rewrites, *([rewrite_file_name(self.rewrite_file)] if self.rewrite_file else [])]
    return f"{s} opt={self.opt}" + "".join(f" +{r}" for r in extra) + (f" tinygrad {self.tinygrad}" if self.tinygrad not in (None, TINYGRAD) else "")

  def to_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d["targets"], d["notes"], d["rewrites"] = list(self.targets), list(self.notes), list(self.rewrites)
    return d
  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> Variant:
    d = _checked_fields(cls, d, "variant")
    for k in ("targets", "notes", "rewrites"):
      if k in d:
        if isinstance(d[k], str) or not isinstance(d[k], (list, tuple)): raise SpecError(f"{k} must be a list of strings, got {d[k]!r}")
        d[k] = tuple(d[k])
    return cls(**d)

def knobs() -> dict[str, tuple[Any, Knob]]:
  """Every knob of Variant by field name: (its default, its Knob), in the fields' order."""
  return {f.name: (f.default, f.metadata["knob"]) for f in dataclasses.fields(Variant) if "knob" in f.metadata}

class RequestBounds(Protocol):
  """What a request may ask for where it runs (explorer.settings.Settings, a server's or a worker's, is one)."""
  @property
  def memory_budget_mb(self) -> int: ...
  @property
  def max_repeats(self) -> int: ...
  @property
  def max_beam(self) -> int: ...

def checked_device(device: str, offered: Sequence[str], field: str, where: str = "server") -> str:
  """device in its normal form (CPU:0 is CPU) when it is one of `offered` (or one of them with an index); else SpecError naming the
  field and what this server (or worker) offers."""
  try: normal = normalize_device(device)
  except SpecError as e: raise SpecError(f"{field}: {e}; this {where} offers: {', '.join(offered) or 'none'}") from None
  if (why := device_problem(normal, offered)) is not None: raise SpecError(f"{field}: {why.replace('this server', f'this {where}')}")
  return normal

def resolve_request(spec: ConvSpec, variant: Variant, bounds: RequestBounds | None, offered: Sequence[str] = COMPUTE_DEVICES,
            field: str = "variant.device", where: str = "server") -> tuple[ConvSpec, Variant, str | None]:
  """A request as it runs: (spec, variant, device), the variant as asked but for its device in its normal form (the id hashes it),
  and that device, None where it names none. Checked against `bounds` (SpecError otherwise): the device is one `offered`, the spec
  and variant within bounds, Winograd applies (or falls back). bounds None: a request accepted earlier, its device only normalized."""
  device = None if variant.device is None else checked_device(variant.device, offered, field, where)
  if device != variant.device: variant = dataclasses.replace(variant, device=device)
  if bounds is None: return spec, variant, device
  spec.validate(memory_budget=int(bounds.memory_budget_mb) << 20)
  variant.validate(max_repeats=int(bounds.max_repeats), max_beam=int(bounds.max_beam))
  variant.resolve(spec)  # raises where Winograd does not apply and fallback is off
  return spec, variant, device
