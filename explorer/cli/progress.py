"""Progress of the CLI's slow steps on stderr: rich progress bars on a terminal (one bar per trace or study, advancing as each stage
finishes), one plain line per event anywhere else (a log, CI, a test's captured stderr), nothing with --quiet."""
from __future__ import annotations
import sys
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING
from explorer.stages import (
  PARTIAL,
  Progress as Callback,  # rich's Progress is the bars
)

if TYPE_CHECKING:
  from rich.progress import Progress  # rich is imported only when bars are drawn: a command starts its work sooner

FINISHED = ("done", "error", "skipped")

class StepBars:
  def __init__(self, quiet: bool = False) -> None:
    self.quiet = quiet
    self.bars: Progress | None = None

  def __enter__(self) -> StepBars:
    if not self.quiet and sys.stderr.isatty():
      from rich.console import Console
      from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
      self.bars = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                           TextColumn("{task.fields[detail]}", style="dim"), console=Console(stderr=True))
      self.bars.start()
    return self

  def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
    if self.bars is not None: self.bars.stop()

  def bar(self, label: str, steps: Sequence[str]) -> Callback | None:
    """A progress callback (step, status, detail) for work whose steps are `steps`; None with --quiet."""
    if self.quiet: return None
    if self.bars is None:
      prefix = f"{label} " if label else ""
      def line(step: str, status: str, detail: str) -> None:
        if step != PARTIAL: print(f"  {prefix}{step:<13} {status} {detail}", file=sys.stderr, flush=True)
      return line
    bars, task = self.bars, self.bars.add_task(label or "trace", total=len(steps), detail="")
    def update(step: str, status: str, detail: str) -> None:
      if step == PARTIAL: return  # a trace's data for a page that shows it while it runs
      bars.update(task, description=f"{label} {step}".strip(), detail=detail[:80], advance=1 if status in FINISHED and step in steps else 0)
    return update
