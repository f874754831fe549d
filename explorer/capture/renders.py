"""Render kernels for other targets in a second process while the trace process does host codegen.

The renders share nothing with the host pipeline but the kernel ASTs (UOps pickle by value), so on a 2-core machine they
overlap with scheduling, host codegen and the run instead of adding to them. The render process records no rewrites:
the explorer shows codegen passes for the host only.
"""
from __future__ import annotations
import os
from concurrent.futures import Future
from typing import Any
from explorer.capture.pool import WorkerPool

def _init() -> None:
  os.environ["VIZ"] = "0"  # before tinygrad is imported in this process: no tracking
  import explorer.capture.adapter  # noqa: F401 - pay tinygrad's import while the trace process schedules

def _render_target(asts: list[Any], target: str) -> list[tuple[str, str]]:
  """Per kernel: ("ok", source) | ("error", message)."""
  from explorer.capture import adapter as tg
  renderer = tg.render_target(target)
  out = []
  for ast in asts:
    try: out.append(("ok", tg.program_facts(tg.codegen_deviceless(ast, renderer)).source))
    except Exception as e: out.append(("error", f"{type(e).__name__}: {e}"))
  return out

class RenderPool:
  """One process per target (up to `processes`): once host codegen is done, the renders share both cores. They run inside the trace
  worker, under its limits: its data limit and priority are inherited, and its process group (and watchdog) bounds them."""
  def __init__(self, processes: int = 2) -> None:
    self.pool = WorkerPool(processes, initializer=_init).start()

  def submit(self, asts: list[Any], targets: tuple[str, ...]) -> dict[str, Future]:
    return {t: self.pool.submit(_render_target, asts, t) for t in targets}

  def close(self) -> None: self.pool.close(wait=True)  # let the processes exit cleanly: nothing leaks
