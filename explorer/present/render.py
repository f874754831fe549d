"""Templates, number formatting and source highlighting, shared by the web pages and the self-contained export (no FastAPI)."""
from __future__ import annotations
import collections
import contextlib
import functools
import importlib.util
import json
import marshal
import os
import pathlib
import re
import tempfile
from collections.abc import Callable, Mapping
from typing import Any
import jinja2
import pygments.lexers
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import CLexer, LlvmLexer, TextLexer
from explorer import targets
from explorer.clocks import METHODS, how, method_of, ratio_words
from explorer.present.beam import beam_plot
from explorer.present.graphs import kernel_time
from explorer.schema import KernelRecord, RanOn, StageRow, TraceRecord, host_target, target_records, totals_of
from explorer.spec import HAND_OPT_RE, opt_label
from explorer.stages import STAGE_TITLES
from explorer.stats import noisy
from explorer.text import fmt_ago, fmt_bytes, fmt_count, fmt_flops, fmt_rate, fmt_seconds, fmt_size, provenance_sites

TEMPLATES_DIR = pathlib.Path(__file__).resolve().parent.parent / "templates"
STATIC_DIR = pathlib.Path(__file__).resolve().parent.parent / "static"

TARGET_LABELS = {"host": "Host", **{t.name: t.label for t in targets.ALL}}
LEXERS: dict[str, type[Lexer]] = {t.name: getattr(pygments.lexers, t.lexer) for t in targets.ALL}
# each line an anchor (#L-12, the permalink) inside a span (S-12, what the line map colours); a page's other sources prefix theirs
# (cuda-L-12), so that no id is there twice
@functools.cache
def formatter(prefix: str = "") -> HtmlFormatter:
  return HtmlFormatter(cssclass="hl", nowrap=False, linenos="table", lineanchors=f"{prefix}L", linespans=f"{prefix}S", anchorlinenos=False,
                       wrapcode=True)

def target_label(target: str) -> str: return TARGET_LABELS.get(target, target)  # a target with no label of its own: its name

def lexer_for(target: str, source: str) -> Lexer:
  if target == "host": return LlvmLexer() if re.search(r"^\s*define\s", source, re.M) else CLexer()
  return LEXERS.get(target, TextLexer)()

@functools.lru_cache(maxsize=256)
def highlighted(target: str, source: str, ids: str = "") -> Markup:
  """The source highlighted, each line's anchor and span ids prefixed by `ids` ("cuda-": cuda-L-12); none for the page's own source."""
  return Markup(highlight(source, lexer_for(target, source), formatter(ids)))

_RUNS = re.compile(r" {2,}")

def compact_uop(line: str) -> str:
  """A print_uops line without its column padding and the Ops./dtypes. prefixes (for the narrow pane beside a source)."""
  return _RUNS.sub("  ", line.replace("Ops.", "").replace("dtypes.", "")).rstrip()

def pygments_css() -> str:
  """The highlighting style, scoped to .hl (pygments also emits global pre/td rules, which would restyle the whole page)."""
  return "\n".join(ln for ln in formatter().get_style_defs(".hl").splitlines() if ln.startswith(".hl"))

def gflops(k: KernelRecord, rec: Any = None) -> float | None:
  """The kernel's FLOP/s over its measured time, in GFLOP/s: its FLOPs as `rec` counts them (a target's record), else the host's."""
  t, flops = kernel_time(k), (rec or k)["flops"]
  return flops / t / 1e9 if t and flops else None

def gbps(k: KernelRecord, rec: Any = None) -> float | None:
  t, nbytes = kernel_time(k), (rec or k)["bytes"]
  return nbytes / t / 1e9 if t and nbytes else None

def defined(fn: Callable[..., str]) -> Callable[..., str]:
  """A formatting filter that reads a missing value (jinja's Undefined) as None: failed traces lack whole sections."""
  return lambda x, *a: fn(None if isinstance(x, jinja2.Undefined) else x, *a)

def ran_on_parts(ran_on: RanOn | None) -> list[tuple[str, str]]:
  """Where a trace's parts ran (env.ran_on), compactly: (NAME@HOST, which parts) per place, the trace's own first; one place for
  all its stages is "every stage", and the only place names no parts. A trace recorded before per-part records names one place. (Its
  fields are read with .get: a trace recorded before ran_on gets one holding only `targets` once a target is computed for it.)"""
  if not ran_on: return []
  stages, targets = ran_on.get("stages") or {}, ran_on.get("targets") or {}
  if not stages and ran_on.get("host"): return [(f"{ran_on.get('worker') or ran_on.get('pid')}@{ran_on['host']}", "")]
  places: dict[str, list[str]] = {}
  for stage, by in stages.items(): places.setdefault(by, []).append(stage.replace("_", " "))
  if len(places) == 1: places = {by: ["every stage"] for by in places}
  for target, by in targets.items(): places.setdefault(by, []).append(f"{target_label(target)} target")
  if len(places) == 1 and not targets: return [(by, "") for by in places]
  return [(by, ", ".join(parts)) for by, parts in places.items()]

HTML_SAFE_JSON = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "'": "\\u0027"})

def grouped_stages(rows: list[StageRow]) -> list[tuple[StageRow, int]]:
  """STAGE rows with identical figures (shape, dtype, space, op, bytes, removable, the buffer they became, what they are computed from and
  stored into) as one row and how many."""
  first: dict[tuple[Any, ...], StageRow] = {}
  count: collections.Counter[tuple[Any, ...]] = collections.Counter()
  for s in rows:
    key = (tuple(s["shape"]), s["dtype"], s["addrspace"], s["src_op"], s["nbytes"], s["removable"], s.get("buffer"),
           tuple(s.get("reads") or ()), tuple(s.get("into") or ()), s["symbolic"]["nbytes"] if "symbolic" in s else None)  # links: absent where none
    first.setdefault(key, s)
    count[key] += 1
  return [(row, count[key]) for key, row in first.items()]

STAGE_FATES = ("kept", "realized", "fused")  # the STAGE table's order

def stage_rows(stages: Mapping[str, Any]) -> list[tuple[str, StageRow, int]]:
  """The STAGE table's rows: (fate, row, how many STAGEs have its figures: grouped_stages), kept first, then realized, then inlined."""
  return [(fate, row, n) for fate in STAGE_FATES for row, n in grouped_stages(stages.get(fate) or [])]

def tojson_compact(x: Any) -> Markup:
  """JSON safe in a single-quoted HTML attribute or a <script>: <, >, & and ' escaped as JSON \\u escapes, as jinja's tojson does."""
  return Markup(json.dumps(x, separators=(",", ":")).translate(HTML_SAFE_JSON))

def largest_buffers(buffers: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
  """The limit largest of a memory timeline's buffers, in schedule order: what a drawing of a big program's memory has room for."""
  if len(buffers) <= limit: return buffers
  keep = {id(b) for b in sorted(buffers, key=lambda b: -b["nbytes"])[:limit]}
  return [b for b in buffers if id(b) in keep]

def memory_bars(steps: list[dict[str, Any]], at_most: int) -> list[dict[str, Any]]:
  """A memory timeline's bars, as many as a drawing of `at_most` pixels shows: a bar per step, or past that a bar per run of consecutive
  steps with the most bytes alive in it (the peak stays drawn), each {first, last, name, live_bytes} (first, last: step positions)."""
  per = -(-len(steps) // at_most) if len(steps) > at_most else 1
  out = []
  for i in range(0, len(steps), per):
    run = steps[i:i + per]
    top = max(run, key=lambda s: s["live_bytes"])
    name = top["name"] if per == 1 else f"steps {run[0]['index']}–{run[-1]['index']}"
    out.append({"first": i, "last": i + len(run) - 1, "index": top["index"], "name": name, "live_bytes": top["live_bytes"]})
  return out

def memory_line(live_bytes: list[int], at_most: int) -> str:
  """A polyline's points for bytes alive per step, in a 40-high box as wide as the steps: a point per step, or past `at_most` steps
  the least and the most bytes of each run of steps at its first step (the envelope, its peak included, in at most 2 * at_most
  points: a 10,000-step program drew 10,000)."""
  top = max(live_bytes, default=0) or 1
  def y(b: int) -> float: return round(40 - 38 * b / top, 2)
  if len(live_bytes) <= at_most: return " ".join(f"{i},{y(b)}" for i, b in enumerate(live_bytes))
  per = -(-len(live_bytes) // at_most)
  runs = ((i, live_bytes[i:i + per]) for i in range(0, len(live_bytes), per))
  return " ".join(f"{i},{y(min(run))} {i},{y(max(run))}" for i, run in runs)

def compile_summary(trace: TraceRecord) -> str:
  """The trace's compile time as the kernel page says it: "cached" where tinygrad's disk cache had every binary (no compiler ran),
  else the time of the compiles that ran and how many kernels were cached."""
  kernels = trace["kernels"]
  cached = sum(1 for k in kernels if k.get("compile_cached"))  # absent: not from tinygrad's disk cache
  total_s = sums["compile_s"] if (sums := totals_of(trace)) else None
  if kernels and cached == len(kernels): return "cached"
  return fmt_seconds(total_s) + (f" ({cached} of {len(kernels)} cached)" if cached else "")

def rendered_targets(trace: TraceRecord) -> list[str]:
  """Every target some kernel has a record of (the ones the trace asked for and the ones pages computed since), the host's first."""
  kernels = trace["kernels"]
  return list(dict.fromkeys([*(host_target(k) for k in kernels), *trace["variant"]["targets"], *recorded_targets(kernels)]))

def recorded_targets(kernels: list[KernelRecord]) -> list[str]:
  """The targets some kernel has a record of, in the order first met (a program's repeated kernels share their records' dict,
  explorer.store.pieces: each dict is walked once)."""
  seen, walked = dict[str, None](), set[int]()
  for k in kernels:
    if id(records := target_records(k)) not in walked:
      walked.add(id(records))
      seen.update(dict.fromkeys(records))
  return list(seen)

def clock_badge(t: Any, device: str, what: str = "") -> Markup:
  """The badge beside a measured time: its clock, with how it was measured (samples, cache, interval) and what the clock includes in
  its tooltip (explorer.clocks). what: what the time is ("each kernel alone", "the span"), said first in the tooltip."""
  if not t or isinstance(t, jinja2.Undefined): return Markup("")
  method = method_of(t, device)
  info = METHODS.get(method)
  tip = "; ".join(x for x in (what, how(t, device), info.summary if info else "") if x)
  return Markup('<span class="badge clock" data-clock="{}" title="{}">{}</span>').format(method, tip, info.label if info else method)

def preset_label(preset: str | None, algo: str | None) -> str:
  """A trace's preset as every list says it: its name, "custom" for a convolution of another shape, "–" for a program (none applies)."""
  return preset or ("–" if algo == "program" else "custom")

def clock_methods_json() -> Markup:
  """METHODS for the pages' scripts (static/clock_badge.js's clockBadge)."""
  return tojson_compact({k: {"label": m.label, "summary": m.summary} for k, m in METHODS.items()})

class _CompiledTemplates(jinja2.BytecodeCache):
  """Every environment of the process shares its templates' compiled code (Jinja checks each against its source's checksum): an app
  compiles its templates once, not once per app (a test suite makes hundreds; each spent about 1.5 s of CPU compiling them). It is
  kept on disk too, in this package's __pycache__ as Python keeps the package's own compiled code (the same place, the same trust: a
  file there is code), so that a new process reads it instead of compiling every template again (0.85 CPU s a server start). A file
  holds the template's source checksum and this Python's bytecode magic before the marshalled code (Jinja's own file cache pickles
  its header: nothing here is unpickled); one that does not match or does not load is compiled again. Where the directory cannot be
  written, the code is kept in memory only."""
  def __init__(self, directory: pathlib.Path) -> None:
    self._code: dict[str, bytes] = {}
    self._dir: pathlib.Path | None = None
    with contextlib.suppress(OSError):
      directory.mkdir(parents=True, exist_ok=True)
      if os.access(directory, os.W_OK): self._dir = directory

  @staticmethod
  def _header(bucket: jinja2.bccache.Bucket) -> bytes:
    return b"kernel-explorer template " + importlib.util.MAGIC_NUMBER.hex().encode() + b" " + bucket.checksum.encode() + b"\n"

  def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
    if (code := self._code.get(bucket.key)) is not None: bucket.bytecode_from_string(code)
    elif self._dir is not None:
      with contextlib.suppress(OSError, EOFError, ValueError, TypeError):  # missing, or not this source's code: compiled again
        data, header = (self._dir / bucket.key).read_bytes(), self._header(bucket)
        if data.startswith(header): bucket.code = marshal.loads(data[len(header):])

  def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
    self._code[bucket.key] = bucket.bytecode_to_string()
    if self._dir is None or bucket.code is None: return
    with contextlib.suppress(OSError), tempfile.NamedTemporaryFile(dir=self._dir, prefix=bucket.key, delete=False) as f:
      f.write(self._header(bucket) + marshal.dumps(bucket.code))
      f.close()
      os.replace(f.name, self._dir / bucket.key)  # whole or not at all: another process may be reading it

COMPILED = _CompiledTemplates(pathlib.Path(__file__).resolve().parent / "__pycache__" / "templates")

class PerIdentity:
  """What a template makes of an object, made once per distinct object (by identity) in one rendering: a program's repeated kernels
  share their provenance list (explorer.store.pieces), so a page of 200 of them draws a few cells, not 200."""
  def __init__(self) -> None: self._made: dict[int, tuple[Any, Any]] = {}
  def __call__(self, obj: Any, make: Callable[[Any], Any]) -> Any:
    if (got := self._made.get(id(obj))) is None: got = self._made[id(obj)] = (obj, make(obj))  # obj held: its id stays its own
    return got[1]

_DICT_ATTRIBUTES = frozenset(dir(dict))

class Environment(jinja2.Environment):
  """Jinja's environment, with `record.field` on a plain dict (what every page reads of a trace) looked up as the item straight away.
  Jinja tries the attribute first and catches the AttributeError, 0.7 us of each of the 70,000 lookups of a big program's first views
  (50 ms). The value is Jinja's: a dict's attributes are its class's, so a name that is none of them is never found as one."""
  def getattr(self, obj: Any, attribute: str) -> Any:
    if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
      try: return obj[attribute]
      except KeyError: return self.undefined(obj=obj, name=attribute)
    return super().getattr(obj, attribute)

def environment() -> jinja2.Environment:
  """The Jinja environment of explorer/templates with the formatting filters and globals every page and the export use."""
  env = Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)), autoescape=jinja2.select_autoescape(), trim_blocks=True,
                    lstrip_blocks=True, bytecode_cache=COMPILED)
  formats: dict[str, Callable[..., str]] = {"bytes": fmt_bytes, "seconds": fmt_seconds, "count": fmt_count, "flops": fmt_flops,
                                             "size": fmt_size, "ago": fmt_ago}
  env.filters.update({k: defined(f) for k, f in formats.items()})
  env.filters["tojson_compact"] = tojson_compact
  env.filters["compact_uop"] = compact_uop
  env.filters["opt_label"] = opt_label
  env.globals["beam_plot"] = beam_plot
  env.globals["stage_title"] = lambda stage: STAGE_TITLES.get(stage, stage)
  env.globals["preset_label"] = preset_label
  env.globals["hand_opt_pattern"] = HAND_OPT_RE.pattern  # the opts panel checks an opt as it is added, as the server will
  env.globals["noisy"] = noisy
  env.globals["per_identity"] = PerIdentity
  env.globals["stage_rows"] = stage_rows
  env.globals["largest_buffers"] = largest_buffers
  env.globals["memory_bars"] = memory_bars
  env.globals["memory_line"] = memory_line
  env.globals.update(compile_summary=compile_summary, rendered_targets=rendered_targets)
  env.globals.update(clock_badge=clock_badge, clock_how=how, ratio_words=ratio_words, clock_methods=METHODS, clock_methods_json=clock_methods_json)
  env.globals.update(gflops=gflops, gbps=gbps, kernel_time=kernel_time, fmt_rate=fmt_rate, target_label=target_label,
                     highlighted=highlighted, ran_on_parts=ran_on_parts, provenance_sites=provenance_sites)
  return env
