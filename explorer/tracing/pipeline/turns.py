"""Two tinygrads timed against each other on one device: each side's variant in a worker of its own environment (explorer.tracing.
versions), the two taking turns, one repeat at a time, A B B A... as time_interleaved orders the variants it runs in one worker, so
drift on a shared machine hits both alike. This process holds the device's lock for the whole measurement and says whose turn it is
over a socket only it and its two workers know (explorer.tracing.pipeline.timing.time_in_turns is the workers' side); each answer is a line of
JSON, read as data. No tinygrad here: the server calls it."""
from __future__ import annotations
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any
from explorer.clocks import timed
from explorer.tracing.workers.devicelock import HeldLocks
from explorer.tracing.workers.process import WorkerFailed, WorkerTimedOut, call_in_worker

Progress = Callable[[str, str, str], None]

def _order(repeat: int) -> tuple[int, int]: return (0, 1) if repeat % 2 == 0 else (1, 0)  # counterbalanced, as timing._order

def _sample(line: str) -> tuple[float, float]:
  """A turn's answer, {"alone": the kernels' sum, "span": the schedule's}, in seconds; WorkerFailed where it is not that."""
  got = json.loads(line)
  def seconds(x: Any) -> float:
    if isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0: return float(x)
    raise WorkerFailed(f"a worker answered its turn with {line[:80]!r}")
  if not isinstance(got, dict): raise WorkerFailed(f"a worker answered its turn with {line[:80]!r}")
  return seconds(got.get("alone")), seconds(got.get("span"))

def time_across(spec: dict[str, Any], variants: list[dict[str, Any]], tinygrads: list[str | None], device: str, warmup: int, repeats: int,
                timeout_s: float, progress: Progress | None = None) -> list[dict[str, Any]]:
  """What timing.time_interleaved returns for two variants (each one's kernels' sums per repeat and spans, by its clock), each side
  run by its tinygrad (None: the server's own). WorkerFailed, one line, where a side fails or the two cannot take turns."""
  say = progress or (lambda stage, status, detail: None)
  deadline = time.monotonic() + timeout_s
  with tempfile.TemporaryDirectory(prefix="kernel-explorer-turns-") as tmp, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
    path = os.path.join(tmp, "turns")
    server.bind(path)
    server.listen(2)
    results: list[Any] = [None, None]
    def side(i: int) -> None:
      try: results[i] = call_in_worker("explorer.tracing.pipeline.timing:time_in_turns", {"spec": spec, "variant": variants[i], "socket_path": path,
                                       "side": i}, say, timeout_s=timeout_s, env={"VIZ": "0"}, tinygrad=tinygrads[i])[0]
      except WorkerFailed as e: results[i] = e
    workers = [threading.Thread(target=side, args=(i,), daemon=True, name=f"turns-{i}") for i in (0, 1)]
    for w in workers: w.start()
    held, conns = HeldLocks(), dict[int, tuple[socket.socket, Any]]()
    try:
      while len(conns) < 2:  # each side connects once its variant is compiled
        server.settimeout(max(0.1, min(1.0, deadline - time.monotonic())))
        try: conn, _ = server.accept()
        except TimeoutError:
          if failed := next((r for r in results if isinstance(r, WorkerFailed)), None): raise failed from None
          if time.monotonic() > deadline: raise WorkerTimedOut(f"the two sides were not both ready within {timeout_s:.0f}s") from None
          continue
        conn.settimeout(max(1.0, deadline - time.monotonic()))
        reader = conn.makefile("r")
        hello = json.loads(reader.readline() or "null")
        if not isinstance(hello, dict) or hello.get("side") not in (0, 1) or hello["side"] in conns: raise WorkerFailed("a worker said no side")
        conns[hello["side"]] = (conn, reader)
      say("timing", "start", f"waiting for the {device} device")
      if (busy := held.acquire(device, deadline)) is not None: raise WorkerTimedOut(f"the {busy} device did not come free within {timeout_s:.0f}s")
      totals: list[list[float]] = [[], []]
      spans: list[list[float]] = [[], []]
      every = max(1, (warmup + repeats) // 10)  # about ten progress reports, outside the turns
      for r in range(warmup + repeats):
        if r % every == 0: say("timing", "running", f"{'warmup' if r < warmup else 'repeat'} {r + 1} of {warmup + repeats}")
        for i in _order(r):
          conn, reader = conns[i]
          conn.sendall(b"sample\n")
          alone, span = _sample(reader.readline() or "null")
          if r >= warmup: totals[i].append(alone); spans[i].append(span)
      for conn, _ in conns.values(): conn.sendall(b"end\n")
    except (OSError, ValueError, WorkerFailed) as e:
      for conn, _ in conns.values(): conn.close()  # the other side's wait for a turn ends with it
      for w in workers: w.join(5)
      if failed := next((r for r in results if isinstance(r, WorkerFailed)), None): raise failed from None  # the side's own words
      raise e if isinstance(e, WorkerFailed) else WorkerFailed(f"the two sides could not take turns: {e}") from None
    finally:
      held.release()
      for conn, _ in conns.values(): conn.close()
    for w in workers: w.join(max(1.0, deadline - time.monotonic()))
  if failed := next((r for r in results if isinstance(r, WorkerFailed)), None): raise failed
  if any(not isinstance(r, dict) for r in results): raise WorkerFailed("a side did not answer its end")
  say("timing", "done", f"{warmup} warmup + {repeats} repeats, the two tinygrads in turns")
  sampling = {"repeats": repeats, "ended": "repeats", "target_width": None, "budget_s": None}
  return [{**{k: r[k] for k in ("replay", "method", "notice", "device", "compiler", "fallback", "tinygrad")},
           "total_s": timed(xs, r["method"], r["l2"]), "samples": xs, "span_s": timed(ss, r["method"], r["l2"]), "span_samples": ss,
           "sampling": sampling, "compile_samples": []} for r, xs, ss in zip(results, totals, spans, strict=False)]
