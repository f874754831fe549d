"""A Python process started as `python -c BOOT`, what it runs pickled down a pipe of its own: its parent's sys.path (after another
tinygrad's, where it runs one: explorer.tracing.versions), then its arguments. Nothing else can write to that pipe, so what it
unpickles is its parent's own (never a client's). A worker (explorer.tracing.workers.process) and a worker template
(explorer.tracing.workers.template) start this way."""
from __future__ import annotations
import os
import pickle
import subprocess
from contextlib import suppress
from typing import Any
from explorer.tracing.versions import interpreter

def boot_code(module: str, fn: str) -> str:
  """The `-c` code that reads sys.path from the pipe, imports `module` and calls `fn` with the pipe, open at its arguments."""
  return f"import os, pickle, sys; f = os.fdopen({{fd}}, 'rb'); sys.path[:] = pickle.load(f); from {module} import {fn}; {fn}(f)"

def start_python(boot: str, args: tuple[Any, ...], pass_fds: tuple[int, ...] = (), env: dict[str, str] | None = None,
                 tinygrad: str | None = None) -> subprocess.Popen[bytes]:
  """`python -c boot` ({fd} in it: the pipe's read end), keeping `pass_fds` open in it, with sys.path and `args` sent down the pipe;
  tinygrad: another version's interpreter and path (explorer.tracing.versions.interpreter; EnvironmentFailed where it is not made)."""
  python, path = interpreter(tinygrad)
  boot_r, boot_w = os.pipe()
  try:
    popen = subprocess.Popen([python, *subprocess._args_from_interpreter_flags(), "-c", boot.format(fd=boot_r)],  # type: ignore[attr-defined]
                             stdin=subprocess.DEVNULL, pass_fds=(boot_r, *pass_fds), env=env)
  except BaseException:
    os.close(boot_w)
    raise
  finally:
    os.close(boot_r)
  with open(boot_w, "wb") as f, suppress(BrokenPipeError):  # it died at once: its exit says why
    pickle.dump(path, f)
    pickle.dump(args, f)
  return popen
