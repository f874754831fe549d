"""Worker processes forked from a template: a process that has imported tinygrad (its viewer included) and the explorer's tracing,
and made nothing with them, which forks one child per call. Each child starts where a fresh `python -c BOOT` worker
(explorer.tracing.workers.process) would once its imports are done, without paying them again (about 0.5 CPU s a worker), and then runs as
that worker does: a process group of its own, its limits entered first, its messages on the pipes its caller made.

A template belongs to the process that started it (its parent, which sends it work on a socket pair only the two hold) and to one
environment (tinygrad reads its settings when it is imported: a call with another environment gets another template). It dies with
its parent, and its children with it. It reaps its children and reports each one's exit status, so that the parent supervises a child
it did not start as it would its own (`TemplateChild`: pid, is_alive, join, kill, exitcode; killed through a pidfd, never a reused
pid)."""
from __future__ import annotations
import atexit
import concurrent.futures
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from contextlib import suppress
from typing import Any
from explorer.tracing.versions import TINYGRAD_VAR
from explorer.tracing.workers.boot import boot_code, start_python

# variables no import reads, which change from call to call: the worker's scratch directory (each child sets its own) and pytest's
VOLATILE = frozenset({"TMPDIR", "PYTEST_CURRENT_TEST"})
MAX_IDLE_TEMPLATES = 4  # per parent: an environment not asked for since is closed past this many
BOOT = boot_code("explorer.tracing.workers.template_process", "serve")  # the template's side

def supported() -> bool:
  return hasattr(os, "fork") and hasattr(socket, "send_fds") and hasattr(os, "pidfd_open") and sys.platform == "linux"

# ***** the parent's side *****

class TemplateChild:
  """A template's child as the parent's supervision sees it (explorer.tracing.workers.process.WorkerProcess's names)."""
  def __init__(self, pid: int) -> None:
    self.pid, self._exited, self._lock = pid, threading.Event(), threading.Lock()  # the lock: no signal on a pidfd closed meanwhile
    self.status: int | None = None
    try: self._pidfd: int | None = os.pidfd_open(pid)
    except OSError: self._pidfd = None  # gone already: its exit is on its way

  def exited(self, status: int) -> None:
    with self._lock:
      self.status = status
      self._exited.set()
      if self._pidfd is not None:
        with suppress(OSError): os.close(self._pidfd)
        self._pidfd = None

  def is_alive(self) -> bool: return not self._exited.is_set()
  def join(self, timeout: float | None = None) -> None: self._exited.wait(timeout)

  def kill(self) -> None:
    with self._lock:
      if self._pidfd is not None:
        with suppress(OSError): signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

  @property
  def exitcode(self) -> int | None:
    """As Popen.returncode: the exit code, or minus the signal that ended it (a template that died took it along with SIGKILL)."""
    return None if self.status is None else os.waitstatus_to_exitcode(self.status)

class Template:
  def __init__(self, env: dict[str, str]) -> None:
    self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try: self.proc = start_python(BOOT, (theirs.fileno(), os.getpid()), (theirs.fileno(),), env, tinygrad=env.get(TINYGRAD_VAR))
    except BaseException:
      self._sock.close()
      raise
    finally: theirs.close()
    self._lock, self._replies = threading.Lock(), _Replies()
    self._children: dict[int, TemplateChild] = {}
    self.children_cpu_s = 0.0  # of the children it reported: counted by children_cpu_s() until the template itself is reaped
    self._reader = threading.Thread(target=self._read, name="template-reader", daemon=True)
    self._reader.start()

  def alive(self) -> bool: return self.proc.poll() is None and self._reader.is_alive()
  def busy(self) -> bool: return bool(self._children)

  def fork(self, args: tuple[Any, ...], out: int, gate: int, tracker: int | None) -> TemplateChild:
    """A child running explorer.tracing.workers.process._child(*args) on copies of these fds (the caller closes its own). The arguments go
    down a pipe of the child's own, as a fresh worker's do (a trace's rewrite blobs can be megabytes)."""
    boot_r, boot_w = os.pipe()
    try:
      with self._lock:
        fds = [boot_r, out, gate, *(() if tracker is None else (tracker,))]
        try: socket.send_fds(self._sock, [b"fork" if tracker is None else b"fork+tracker"], fds)
        except OSError: raise OSError("the worker template is gone") from None
        child = self._replies.take()
    except BaseException:
      os.close(boot_w)
      raise
    finally: os.close(boot_r)
    if child is None:
      os.close(boot_w)
      raise OSError("the worker template is gone")
    with open(boot_w, "wb") as f, suppress(BrokenPipeError): pickle.dump(args, f)  # it died at once: its exit says why
    return child

  def _read(self) -> None:
    """The template's messages, in the order it sent them: a child's pid as it forks it, then its exit status once it has reaped it."""
    try:
      while msg := self._sock.recv(256):
        kind, pid, exit = pickle.loads(msg)  # our own template's pickle, never a client's bytes
        if kind == "pid": self._replies.put(self._children.setdefault(pid, TemplateChild(pid)))
        elif (child := self._children.pop(pid, None)) is not None:
          self.children_cpu_s += exit[1]
          _count(exit[1])
          child.exited(exit[0])
    except OSError: pass
    finally:
      self._replies.put(None)
      for child in list(self._children.values()): child.exited(signal.SIGKILL)  # the template died: its children with it (PR_SET_PDEATHSIG)
      self._children.clear()

  def close(self) -> None:
    with suppress(OSError): self._sock.shutdown(socket.SHUT_RDWR)
    with suppress(OSError): self._sock.close()
    with suppress(subprocess.TimeoutExpired): self.proc.wait(2)
    if self.proc.poll() is None: self.proc.kill()
    self.proc.wait()
    self._reader.join(2)
    _count(-self.children_cpu_s)  # reaped: its children's CPU is in this process's RUSAGE_CHILDREN now

class _Replies:
  """The children the template reports forking, in order; None once it is gone (and for every later ask)."""
  def __init__(self) -> None:
    self._items: list[TemplateChild | None] = []
    self._ready = threading.Condition()
  def put(self, child: TemplateChild | None) -> None:
    with self._ready:
      self._items.append(child)
      self._ready.notify()
  def take(self) -> TemplateChild | None:
    with self._ready:
      self._ready.wait_for(lambda: bool(self._items))
      return self._items[0] if self._items[0] is None else self._items.pop(0)

_templates: dict[tuple[tuple[str, str], ...], Template] = {}
# a template dies with the thread that started it (PR_SET_PDEATHSIG follows the thread, not the process): this one lives as long as
# the process does, whichever thread asked first
_launcher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="template-launcher")
_templates_lock = threading.Lock()
_reaped_cpu, _reaped_lock = [0.0], threading.Lock()

def _count(cpu_s: float) -> None:
  with _reaped_lock: _reaped_cpu[0] += cpu_s

def children_cpu_s() -> float:
  """CPU seconds of this process's templates' children that have ended, while their template runs: a process's
  getrusage(RUSAGE_CHILDREN) has them once it has reaped the template they ran under (at its exit, close_all), and then this does not."""
  return _reaped_cpu[0]

def _forget_in_child() -> None:
  """A process forked from this one (a render pool's) does not share its templates: their sockets and threads are this one's."""
  global _templates_lock, _reaped_lock, _launcher
  _templates.clear()
  _templates_lock, _reaped_lock, _reaped_cpu[0] = threading.Lock(), threading.Lock(), 0.0
  _launcher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="template-launcher")
os.register_at_fork(after_in_child=_forget_in_child)

@atexit.register
def close_all() -> None:
  """Let every template go and reap it (with it, the CPU its children used lands in this process's RUSAGE_CHILDREN)."""
  with _templates_lock: templates = list(_templates.values()); _templates.clear()
  for t in templates: t.close()

def template_for(env: dict[str, str]) -> Template:
  """This process's template for a worker environment: os.environ with env over it, less what no import reads (VOLATILE). Past
  MAX_IDLE_TEMPLATES the least recently used idle ones go (a server's own environment outlives the rare ones: another tinygrad's)."""
  full = {k: v for k, v in {**os.environ, **env}.items() if k not in VOLATILE}
  key = tuple(sorted(full.items()))
  with _templates_lock:
    if (t := _templates.get(key)) is not None and t.alive():
      _templates[key] = _templates.pop(key)  # the most recently used last
      return t
    stale = [_templates.pop(key)] if t is not None else []
    stale += [_templates.pop(k) for k in [k for k, t in _templates.items() if not t.busy()][:max(0, len(_templates) - MAX_IDLE_TEMPLATES + 1)]]
    _templates[key] = t = _launcher.submit(Template, full).result()
  for old in stale: old.close()
  return t
