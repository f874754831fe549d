"""Numbers and text, one home for how the explorer writes them: SI prefixes, bytes, seconds, counts, FLOPs, rates and ages (the pages'
filters, the CLI's and the reports'), an error's one line, and tables for terminals and summaries (rendered by rich, without colour
or markup, so they read the same in a terminal, a log and a test)."""
from __future__ import annotations
import io
import math
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any
from explorer.clocks import how

def one_line(e: BaseException) -> str:
  """An error as a page or a terminal shows it: its first line, never a traceback; a SQLite error's with its extended code where
  it has one (SQLITE_IOERR_SHMSIZE says what "disk I/O error" does not)."""
  line = (str(e).strip().splitlines() or [type(e).__name__])[0]
  name = getattr(e, "sqlite_errorname", None)
  return f"{line} ({name})" if isinstance(name, str) and "_" in name.removeprefix("SQLITE_") else line

def si(x: float | None, unit: str = "") -> str:
  if x is None: return "-"
  for p, s in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
    if abs(x) >= p: return f"{x/p:.2f}{s}{unit}"
  return f"{x:.0f}{unit}"

def fmt_seconds(s: float | None) -> str:
  if s is None: return "–"
  if s < 1e-3: return f"{s*1e6:.1f} µs"
  if s < 1: return f"{s*1e3:.2f} ms"
  return f"{s:.2f} s"

def fmt_bytes(n: float | None) -> str:
  """Bytes in binary units, as every page and every command writes them: 896 B, 144.0 KiB, 1.2 MiB."""
  if n is None: return "–"
  for unit in ("B", "KiB", "MiB", "GiB"):
    if abs(n) < 1024 or unit == "GiB": return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
    n /= 1024
  return f"{n:.1f} GiB"

def ms(t: dict[str, float] | None) -> str:
  """A timing record's median in milliseconds."""
  return "-" if not t else f"{t['median']*1e3:.3f}"

def fmt_count(n: Any) -> str: return "–" if n is None else f"{n:,}"

def fmt_flops(n: float | None) -> str:
  if n is None: return "–"
  for unit, div in (("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
    if n >= div: return f"{n/div:.2f} {unit}"
  return f"{n:.0f} FLOP"

def fmt_rate(n: float | None, unit: str) -> str: return "–" if n is None else f"{n:.2f} {unit}" if n < 100 else f"{n:.0f} {unit}"

def fmt_size(xs: list[int | str] | None) -> str: return "–" if not xs else "×".join(str(x) for x in xs)

def fmt_ago(ts: float | None) -> str:
  if ts is None: return "–"
  d = max(0.0, time.time() - ts)
  for unit, s in (("d", 86400), ("h", 3600), ("min", 60)):
    if d >= s: return f"{d // s:.0f} {unit} ago"
  return "just now"

def si_prefix(x: float) -> str:
  """x with an SI prefix and the space before the unit the caller writes after it: 1.23 G(FLOPs)."""
  for p, s in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
    if abs(x) >= p: return f"{x/p:.2f} {s}"
  return f"{x:.0f} "

def fmt_ms(x: float | None) -> str:
  """4 significant digits, never an exponent: 0.1217 ms, 368.4 ms, 39530 ms."""
  return "-" if x is None or not math.isfinite(x) else f"{x * 1e3:.4g} ms" if x < 10 else f"{x * 1e3:.0f} ms"

def fmt_tick_time(t: float) -> str:
  """A chart's tick: 3 significant digits, in us below a millisecond, else in ms."""
  return f"{t * 1e6:.3g} us" if t < 1e-3 else f"{t * 1e3:.3g} ms"

def fmt_fixed(x: float | None, scale: float = 1.0, digits: int = 1) -> str:
  """x / scale with a fixed number of digits (a table's column), "-" for none."""
  return "-" if x is None else f"{x / scale:.{digits}f}"

def fmt_signed(x: float | None, fmt: Any = str) -> str:
  """A change with its sign (+3, -2, 0), each side written by fmt."""
  if x is None: return "-"
  return ("+" if x > 0 else "") + fmt(x) if x else "0"

def table(headers: Sequence[str], rows: Sequence[Sequence[object]], text_columns: int = 1) -> str:
  """The first text_columns left-aligned, the rest (numbers) right-aligned; cells are plain text (a kernel name or an opt list is never
  read as markup)."""
  from rich import box  # here: a command imports rich only once it prints a table
  from rich.console import Console
  from rich.table import Table
  from rich.text import Text
  t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
  for i, h in enumerate(headers): t.add_column(h, justify="left" if i < text_columns else "right", no_wrap=True)
  for r in rows: t.add_row(*(Text(str(c)) for c in r))
  out = io.StringIO()
  Console(file=out, width=100_000, color_system=None, force_terminal=False).print(t)
  return "\n".join(line.rstrip() for line in out.getvalue().splitlines() if line.strip())

# ***** a trace in the terminal *****

def trace_summary(trace: Mapping[str, Any]) -> str:
  """A trace as the terminal shows it (`kernel-explorer trace`, `print(t)`): its kernel table, totals, STAGE counts, check and notes."""
  out = [f"{trace['label']}   device={trace['env']['device']} tinygrad={trace['env']['tinygrad']}"]
  if trace["status"] != "ok" and (failures := trace["failures"]):
    more = f" (and {len(failures) - 1} more, listed at the end)" if len(failures) > 1 else ""
    out.append(f"PARTIAL TRACE: stage {failures[0]['stage']} failed: {failures[0]['error']}{more}; what the stages before it recorded follows")
  out += [f"note: {n}" for n in trace["notes"]]
  def compiled(k: dict[str, Any]) -> str: return "cached" if k.get("compile_cached") else f"{k['compile_s']*1e3:.1f}"
  if trace.get("realizes"):  # a program: where each kernel came from, and which realize ran it
    rows = [(k["index"], k.get("realize", 0), k["name"], provenance_text(k.get("provenance") or []), k["linear_uops"], si(k["flops"]),
             si(k["bytes"], "B"), compiled(k), ms(k["time_s"])) for k in trace["kernels"]]
    out.append(table(("#", "realize", "kernel", "provenance", "uops", "FLOPs", "bytes", "compile ms", "alone ms"), rows, text_columns=4))
    for r in trace["realizes"]:
      if reps := r.get("repeats"):
        out.append(f"realize {r['index']} ran {len(reps)} more times, the same kernels (a loop's later steps): median "
                   f"{statistics.median(x['seconds'] for x in reps) * 1e3:.2f} ms each, as realize ran them")
    for j in trace.get("jits") or []:
      a, b = j["realizes"] or (0, 0)
      of = "untraced" if not j["realizes"] else f"realize {a}'s" if b - a == 1 else f"realizes {a}-{b - 1}'s"
      values = sorted({f"{k}={v}" for run in j["runs"] for k, v in (run.get("variables") or {}).items()})
      out.append(f"TinyJit {j['index'] + 1}: {len(j['kernels'])} kernels ({of}) run {len(j['runs'])} times as its captured schedule, median "
                 f"{statistics.median(x['seconds'] for x in j['runs']) * 1e3:.2f} ms" + (f"; {', '.join(values[:8])}" if values else ""))
  else:
    rows = [(k["name"], k["role"], k["ast_uops"], k["linear_uops"], si(k["flops"]), si(k["bytes"], "B"), compiled(k), ms(k["time_s"]))  # type: ignore[misc]
            for k in trace["kernels"]]
    out.append(table(("kernel", "role", "ast uops", "uops", "FLOPs", "bytes", "compile ms", "alone ms"), rows))
  t, sc = trace["totals"], (trace.get("scheduler") or {}).get("stage_counts")
  out.append(f"{t.get('kernels', 0)} kernels, {t.get('copies', 0)} copies, {t.get('buffers', 0)} buffers, {si(t.get('flops'))} FLOPs "
             f"(tinygrad's Estimates on the host's programs)")
  if (tm := trace.get("timing")) and tm.get("total_s"):
    device = trace["env"]["device"]
    out.append(f"time: the kernels each alone, summed {ms(tm['total_s'])} ms ({how(tm['total_s'], device)})")
    if tm.get("span_s"):
      out.append(f"time: the schedule replayed back to back (its span, {tm.get('replay', 'launches')}) {ms(tm['span_s'])} ms, "
                 f"{(tm['span_s']['median'] - tm['total_s']['median']) * 1e3:.3f} ms between kernels")
    if tm.get("notice"): out.append(f"clock: {tm['notice']}")
  if sc: out.append(f"STAGE (bufferize): {sc['created']} created, {sc['fused']} inlined (removed), {sc['kept']} kept as buffers; "
                    f"{sc['realized']} realized stores")
  if (e := trace.get("error")) is not None: out.append(f"max abs error {e['max_abs']:.3g} (rel {e['max_rel']:.3g}) vs float64 numpy")
  if (own := trace.get("tinygrad_seconds")) is not None and (secs := trace.get("stage_seconds")):
    out.append(f"stages took {sum(secs.values()):.2f}s, tinygrad's own calls {sum(own.values()):.2f}s of them (" +
               ", ".join(f"{s} {own.get(s, 0.0):.2f}/{v:.2f}" for s, v in secs.items()) + ")")
  out += [f"{k['name']}: {n}" for k in trace["kernels"] for n in k.get("notes", [])]
  out += [f"{t} compile facts: " + ", ".join(facts) for t, facts in compile_facts(trace).items()]
  out += [f"FAILED in {f['stage']}: {f['error']}" for f in trace["failures"]]
  return "\n".join(out)

def provenance_sites(entries: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
  """A kernel's provenance grouped by the model's line, in source order: [("model.py:14", ["conv2d", "relu bw"]), ...]; an entry
  inferred from data flow "~"-marked where the kernel has entries of its own too (provenance_text marks a wholly inferred one)."""
  groups: dict[tuple[str, int], list[str]] = {}
  all_inferred = all(e.get("inferred") for e in entries)
  for e in sorted(entries, key=lambda e: (e.get("file") or "", e.get("line") or 0)):
    site = (os.path.basename(e["file"]) if e.get("file") else "?", e.get("line") or 0)
    fn = ("~" if e.get("inferred") and not all_inferred else "") + e["fn"] + (" bw" if e.get("backward") else "")
    if (node := e.get("onnx")) is not None: fn += f" [ONNX {node['op']} {node['name'] or '#' + str(node['index'])}]"
    if fn not in (fns := groups.setdefault(site, [])): fns.append(fn)
  return [(f"{f}:{n}" if n else f, fns) for (f, n), fns in groups.items()]

def provenance_text(entries: Sequence[dict[str, Any]]) -> str:
  """One line: "conv2d, relu <- model.py:14; linear <- model.py:16"; "~" first where it was inferred from data flow."""
  text = "; ".join(f"{', '.join(fns)} <- {site}" for site, fns in provenance_sites(entries))
  return f"~ {text}" if entries and all(e.get("inferred") for e in entries) else text

def compile_facts(trace: Mapping[str, Any]) -> dict[str, list[str]]:
  """Per target, each kernel's compile facts where they were computed (registers, or what the compiler said)."""
  out: dict[str, list[str]] = {}
  for k in trace["kernels"]:
    for t, rec in (k.get("targets") or {}).items():
      if (c := rec.get("compile")) is None: continue
      said = f"{c['registers']} registers" if c.get("registers") is not None else "ok" if c.get("ok") else (c.get("message") or "").split(":")[0]
      out.setdefault(t, []).append(f"{rec['name']} {said}")
  return out

# ***** commands *****
