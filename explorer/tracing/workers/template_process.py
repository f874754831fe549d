"""The template's side of explorer.tracing.workers.template (its parent's side is there): a process started as `python -c BOOT` that imports
tinygrad and the tracing engine, makes nothing with them, and forks a child per request of its parent. The request comes on a socket
pair only the two hold, with the child's pipes (its arguments', its messages', its timing gate's, the resource tracker's); the
template answers with the child's pid, reaps it when it ends (and, as a subreaper, whatever a killed worker left) and reports its exit
status and CPU seconds. The child runs explorer.tracing.workers.process' _child, as a worker started afresh does."""
from __future__ import annotations
import ctypes
import gc
import os
import pickle
import select
import signal
import socket
from contextlib import suppress
from typing import Any

PR_SET_CHILD_SUBREAPER = 36
_FDS = 4  # a child's fds, in order: its arguments' pipe, the pipe its messages go out on, the one its gate opens on, the resource tracker's (if any)

def serve(f: Any) -> None:
  """The template's life (its BOOT line calls this): import, then fork a child per request until the parent goes."""
  sock_fd, parent_pid = pickle.load(f)  # our parent's own pickle
  f.close()
  from explorer.tracing.workers import lifeline
  lifeline.die_with_parent(parent_pid)
  lifeline.watch(parent_pid)
  # what a killed worker leaves (its render processes, a compiler) comes to us, and is reaped, rather than to init as zombies
  with suppress(OSError, AttributeError): ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
  sock = socket.socket(fileno=sock_fd)
  # tinygrad, numpy and the tracing engine, as a trace worker imports them; and tinygrad's viewer, which every worker that rebuilds
  # graphs from a rewrite blob imports (another target's records, a graph, a diff, an export): half a second of each such first
  # view, 8 MiB shared by every child
  import explorer.tracing.pipeline.trace  # noqa: F401
  import explorer.tracing.tg.viewer  # noqa: F401
  import explorer.tracing.workers.process  # noqa: F401
  gc.freeze()  # what the imports made, out of every child's collections: a collection would touch, and so copy, each page of it
  wake_r, wake_w = os.pipe()
  os.set_blocking(wake_w, False)
  signal.set_wakeup_fd(wake_w)
  signal.signal(signal.SIGCHLD, lambda *_: None)
  def send(kind: str, pid: int, status: Any) -> None:
    try: sock.send(pickle.dumps((kind, pid, status)))
    except OSError: os._exit(0)  # the parent is gone, or closed us: our children go with us
  while True:
    ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
    if wake_r in ready:
      with suppress(BlockingIOError, InterruptedError): os.read(wake_r, 512)
      _reap(send)
    if sock.fileno() in ready:
      try: msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, _FDS)
      except OSError: os._exit(0)
      if not msg: os._exit(0)  # the parent is gone, or closed us: our children go with us
      pid = os.fork()  # our parent's request, on a socket pair only it holds
      if pid == 0: _run_child(sock, wake_r, wake_w, fds[0], fds[1], fds[2], fds[3] if msg == b"fork+tracker" else None)
      for fd in fds: os.close(fd)
      send("pid", pid, None)

def _reap(send: Any) -> None:
  while True:
    try: pid, status, usage = os.wait4(-1, os.WNOHANG)
    except ChildProcessError: return
    if pid == 0: return
    send("exit", pid, (status, usage.ru_utime + usage.ru_stime))

def _run_child(sock: socket.socket, wake_r: int, wake_w: int, boot: int, out: int, gate: int, tracker: int | None) -> None:
  try:
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    sock.close()
    os.close(wake_r); os.close(wake_w)
    from multiprocessing import resource_tracker
    from multiprocessing.connection import Connection
    from explorer.tracing.workers.process import _child
    if tracker is not None: resource_tracker._resource_tracker._fd = tracker  # type: ignore[attr-defined]
    with os.fdopen(boot, "rb") as f: fn_path, kwargs, env, limits, deadline = pickle.load(f)  # our parent's own pickle
    _child(fn_path, kwargs, env, limits, Connection(out, readable=False), Connection(gate, writable=False), os.getppid(), deadline)
  finally: os._exit(1)
