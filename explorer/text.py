"""Text for terminals and summaries, shared by the CLI and the analyses that print reports: SI units, milliseconds, tables
(rendered by rich, without colour or markup, so they read the same in a terminal, a log and a test)."""
from __future__ import annotations
import io
from typing import Sequence

def si(x: float | None, unit: str = "") -> str:
  if x is None: return "-"
  for p, s in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
    if abs(x) >= p: return f"{x/p:.2f}{s}{unit}"
  return f"{x:.0f}{unit}"

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
