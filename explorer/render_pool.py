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

def _init() -> None:
  os.environ["VIZ"] = "0"  # before tinygrad is imported in this process: no tracking
  import explorer.adapter  # noqa: F401 - pay tinygrad's import while the trace process schedules

def _render_all(asts: list[Any], targets: tuple[str, ...]) -> list[dict[str, tuple[str, str]]]:
  """Per kernel: target -> ("ok", source) | ("error", message)."""
  from explorer import adapter as tg
  out: list[dict[str, tuple[str, str]]] = [{} for _ in asts]
  for t in targets:
    renderer = tg.render_target(t)
    for i, ast in enumerate(asts):
      try: out[i][t] = ("ok", tg.program_facts(tg.codegen_deviceless(ast, renderer)).source)
      except Exception as e: out[i][t] = ("error", f"{type(e).__name__}: {e}")
  return out

class RenderPool:
  def __init__(self) -> None:
    self.pool = ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"), initializer=_init)
    self.pool.submit(int)  # start the process (and its imports) now

  def submit(self, asts: list[Any], targets: tuple[str, ...]) -> Future: return self.pool.submit(_render_all, asts, targets)

  def close(self) -> None: self.pool.shutdown(wait=False, cancel_futures=True)
