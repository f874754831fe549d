"""The cyclic garbage collector and parsed traces. A big program's parse makes millions of containers that all live on: each full
collection its allocations trigger meanwhile walks the whole growing heap, and so does every full collection after it, holding every
thread (a server's event loop included) 70-110 ms each time. So a parse runs with the collector paused (nothing it makes is garbage),
and a server freezes what a big parse made (gc.freeze: kept out of every later collection's walk; still freed by reference counting
when the trace is dropped), having collected what was already garbage first; it thaws everything when it stops. What is frozen and
later becomes cyclic garbage waits for the thaw: a process that runs many servers (the tests) freezes nothing."""
from __future__ import annotations
import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_paused, _was_enabled, _freeze, _frozen = 0, True, False, False

@contextmanager
def collector_paused(freeze: bool = False) -> Iterator[None]:
  """gc disabled from the first of overlapping parses (any thread) to the end of the last, then as it was before; freeze: what is alive
  then is frozen (what was garbage collected first, here)."""
  global _paused, _was_enabled, _freeze, _frozen
  if freeze: gc.collect()
  with _lock:
    if _paused == 0: _was_enabled = gc.isenabled(); gc.disable()
    _paused, _freeze = _paused + 1, _freeze or freeze
  try: yield
  finally:
    with _lock:
      _paused -= 1
      if _paused == 0:
        if _freeze: gc.freeze()
        _frozen, _freeze = _frozen or _freeze, False
        if _was_enabled: gc.enable()

def settle() -> None:
  """What a server made to start (its modules, classes and app: alive for good) collected and frozen: the collection before a big
  parse then walks only what was made since (50 ms -> a few)."""
  global _frozen
  with _lock:
    gc.collect()
    gc.freeze()
    _frozen = True

def thaw() -> None:
  """Everything frozen back in the collector's care (a server stopping: what became garbage since is collected again)."""
  global _frozen
  with _lock:
    if _frozen: gc.unfreeze()
    _frozen = False
