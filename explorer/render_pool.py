"""Render kernels for other targets in a second process while the trace process does host codegen.

The renders share nothing with the host pipeline but the kernel ASTs (UOps pickle by value), so on a 2-core machine they
overlap with scheduling, host codegen and the run instead of adding to them. The render process records no rewrites:
the explorer shows codegen passes for the host only.
"""
from __future__ import annotations
import multiprocessing as mp
import os
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any
from explorer import lifeline

def _init(parent_pid: int) -> None:
  lifeline.die_with_parent(parent_pid)  # the trace worker's group is killed whole; a worker that dies takes its renders along too
  lifeline.watch(parent_pid)
  os.environ["VIZ"] = "0"  # before tinygrad is imported in this process: no tracking
  import explorer.adapter  # noqa: F401 - pay tinygrad's import while the trace process schedules

def _render_target(asts: list[Any], target: str) -> list[tuple[str, str]]:
  """Per kernel: ("ok", source) | ("error", message)."""
  from explorer import adapter as tg
  renderer = tg.render_target(target)
  out = []
  for ast in asts:
    try: out.append(("ok", tg.program_facts(tg.codegen_deviceless(ast, renderer)).source))
    except Exception as e: out.append(("error", f"{type(e).__name__}: {e}"))
  return out

class RenderPool:
  """One process per target (up to `processes`): once host codegen is done, the renders share both cores."""
  def __init__(self, processes: int = 2) -> None:
    self.pool = ProcessPoolExecutor(processes, mp_context=mp.get_context("spawn"), initializer=_init, initargs=(os.getpid(),))
    for _ in range(processes): self.pool.submit(int)  # start the processes (and their imports) now

  def submit(self, asts: list[Any], targets: tuple[str, ...]) -> dict[str, Future]:
    return {t: self.pool.submit(_render_target, asts, t) for t in targets}

  def close(self) -> None: self.pool.shutdown(wait=True, cancel_futures=True)  # let the processes exit cleanly: nothing leaks
