"""The tinygrads a trace may run on besides the server's own (explorer.tinygrads.TINYGRADS), each in an environment of its own: a venv under
the data directory with that tinygrad installed from its pinned, hash-checked lock (explorer/tracing/locks/) and the server's own
environment behind it for everything else (tinygrad depends on nothing; the explorer's worker needs numpy and the explorer itself).
A trace worker for that version runs that venv's interpreter; the server's process keeps importing only its own tinygrad, and this
module imports none. Where: KERNEL_EXPLORER_TINYGRADS (a directory), else $XDG_DATA_HOME/kernel-explorer/tinygrad."""
from __future__ import annotations
import dataclasses
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Callable
from typing import Any, Literal
from explorer.defaults import ENV_PREFIX
from explorer.spec import SpecError
from explorer.tinygrads import TINYGRAD, TINYGRADS, TRACEABLE, tinygrad_problem

DIR_VAR = ENV_PREFIX + "TINYGRADS"
TINYGRAD_VAR = ENV_PREFIX + "TINYGRAD"  # in a worker's environment: the tinygrad it runs (explorer.tracing.workers.process.call_in_worker)
LOCKS = pathlib.Path(__file__).parent / "locks"
STAMP = "kernel-explorer-lock.sha256"  # an environment's last file: the hash of the lock it was made from
BRIDGE = "kernel-explorer-server.pth"  # the server's environment behind the venv's own site-packages

State = Literal["server", "ready", "missing", "stale", "broken"]
STATES: dict[str, str] = {"server": "the server's own tinygrad", "ready": "made from its lock", "missing": "not made yet",
                          "stale": "made from another lock: make it again",
                          "broken": "half made, or a file of its tinygrad missing or changed: make it again"}

@dataclasses.dataclass(frozen=True)
class Environment:
  version: str
  state: State
  python: str | None  # the interpreter a worker for this version runs (None: none made)
  path: str | None = None  # the venv (None: the server's own)

  def view(self) -> dict[str, str | None]:
    return {"version": self.version, "state": self.state, "meaning": STATES[self.state], "path": self.path}

def directory() -> pathlib.Path:
  if where := os.environ.get(DIR_VAR, ""): return pathlib.Path(where)
  return pathlib.Path(os.environ.get("XDG_DATA_HOME") or pathlib.Path.home() / ".local" / "share") / "kernel-explorer" / "tinygrad"

def lock(version: str) -> pathlib.Path: return LOCKS / f"tinygrad-{version}.txt"

def lock_hash(version: str) -> str: return hashlib.sha256(lock(version).read_bytes()).hexdigest()

def _checked(version: str) -> None:
  if (problem := tinygrad_problem(version)) is not None: raise SpecError(problem)

def environment(version: str) -> Environment:
  """Where `version` stands, from its files alone (cheap: a page lists them all)."""
  _checked(version)
  if version == TINYGRAD: return Environment(version, "server", sys.executable)
  venv = directory() / version
  python = venv / "bin" / "python"
  if not venv.exists(): return Environment(version, "missing", None, str(venv))
  try: stamp = (venv / STAMP).read_text().strip()
  except OSError: return Environment(version, "broken", None, str(venv))
  if not python.exists() or damaged(venv, version) is not None: return Environment(version, "broken", None, str(venv))
  return Environment(version, "ready" if stamp == lock_hash(version) else "stale", str(python), str(venv))

def damaged(venv: pathlib.Path, version: str) -> str | None:
  """The first file of the venv's tinygrad that is missing or of another size than its install recorded (None: every one is as
  installed; a few hundred stats). A worker of a venv missing one would import the server's tinygrad in its place."""
  site = pathlib.Path(site_packages(venv))
  try: record = (site / f"tinygrad-{version}.dist-info" / "RECORD").read_text()
  except OSError: return f"tinygrad-{version}.dist-info/RECORD"
  for line in record.splitlines():
    path, _, rest = line.partition(",")
    size = rest.rpartition(",")[2]
    if not size.isdigit() or path.startswith("..") or "__pycache__" in path: continue  # (the RECORD has no size; bytecode is remade)
    try:
      if (site / path).stat().st_size != int(size): return path
    except OSError: return path
  return None

def environments() -> list[Environment]: return [environment(v) for v in TINYGRADS]

class EnvironmentFailed(OSError):
  """A version's environment could not be made (the step and what its command said, in a line or two), or is not there to run."""

def site_packages(venv: str | os.PathLike[str]) -> str:
  """A venv's site-packages (made by this interpreter's base: the same layout)."""
  return sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})

def interpreter(version: str | None) -> tuple[str, list[str]]:
  """The interpreter a worker for tinygrad `version` runs (None: the server's own) and the sys.path it boots with: this one's, after
  that version's venv's site-packages (its tinygrad first). EnvironmentFailed where that environment is not ready."""
  if version is None or version == TINYGRAD: return sys.executable, list(sys.path)
  env = environment(version)
  if env.state != "ready" or env.python is None or env.path is None:
    raise EnvironmentFailed(f"tinygrad {version}'s environment is {env.state} ({STATES[env.state]}): kernel-explorer versions --make {version}")
  return env.python, [site_packages(env.path), *sys.path]

def _run(step: str, cmd: list[str], timeout_s: float, plain: bool = False) -> str:
  """cmd's output; plain: without tinygrad's tracking in its environment (a tracking tinygrad prints its statistics as it exits)."""
  env = {k: v for k, v in os.environ.items() if k not in ("TRACK_MATCH_STATS", "VIZ")} if plain else None
  try: done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
  except (OSError, subprocess.TimeoutExpired) as e: raise EnvironmentFailed(f"{step}: {e}") from None
  if done.returncode != 0:
    said = [line for line in (done.stderr or done.stdout).splitlines() if line.strip() and "is ignored" not in line]
    raise EnvironmentFailed(f"{step} failed (exit {done.returncode}): {' / '.join(said[-3:])[:600]}")
  return done.stdout

def make(version: str, say: Callable[[str], None] = lambda _: None, timeout_s: float = 600) -> Environment:
  """Make `version`'s environment from its lock (again, where one is there: stale or broken), in a directory beside it first and
  moved into place once it imports that tinygrad and the explorer: a reader never sees one half made."""
  _checked(version)
  if version == TINYGRAD: return environment(version)
  home = directory()
  home.mkdir(parents=True, exist_ok=True)
  making = home / f".{version}.making-{os.getpid()}"
  shutil.rmtree(making, ignore_errors=True)
  try:
    say(f"tinygrad {version}: a venv at {home / version}")
    _run("creating the venv", [sys.executable, "-m", "venv", "--without-pip", str(making)], timeout_s)
    python = str(making / "bin" / "python")
    site = _run("finding its site-packages", [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], timeout_s).strip()
    say(f"tinygrad {version}: installing it from {lock(version).name} (hash-checked)")
    _run("installing tinygrad", [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--require-hashes",
                                 "--only-binary=:all:", "--target", site, "-r", str(lock(version))], timeout_s)
    (pathlib.Path(site) / BRIDGE).write_text(f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})\n")
    say(f"tinygrad {version}: checking that it imports")
    check = "import importlib.metadata as m, tinygrad, explorer.spec; print(m.version('tinygrad'), tinygrad.__file__)"
    got = (_run("importing it", [python, "-c", check], timeout_s, plain=True).strip().splitlines() or [""])[-1].split()
    if len(got) != 2 or got[0] != version or not got[1].startswith(site):
      raise EnvironmentFailed(f"importing it: the venv imports tinygrad {' from '.join(got)}, not {version} from {site}")
    (making / STAMP).write_text(lock_hash(version) + "\n")
    shutil.rmtree(home / version, ignore_errors=True)
    making.rename(home / version)
  finally: shutil.rmtree(making, ignore_errors=True)
  say(f"tinygrad {version}: ready")
  return environment(version)

_making = threading.Lock()  # one make at a time in this process (another process makes its own beside it, and the last one's is kept)

def ready(version: str | None, say: Callable[[str], None] = lambda _: None) -> None:
  """`version`'s environment made where it is not ready (a trace asking for it first makes it, saying so); EnvironmentFailed where it
  cannot be."""
  if version is None or environment(version).state in ("server", "ready"): return
  with _making:
    if environment(version).state != "ready": make(version, say)

def older(version: Any) -> str | None:
  """`version` where it is an older tinygrad the explorer traces on (its work runs in that tinygrad's environment); None: the
  server's own, none named, or one the explorer does not trace on."""
  return version if version in TRACEABLE and version != TINYGRAD else None

def recorded(trace: Any) -> str | None:
  """The older tinygrad that recorded a trace (its env.tinygrad), in whose environment a worker reading the trace's rewrite blob or a
  kernel's AST runs; None: the server's own, or one the explorer does not trace on (read here, as before)."""
  return older((trace.get("env") or {}).get("tinygrad") if isinstance(trace, dict) else None)

def imported(progress: Callable[[str, str, str], None]) -> dict[str, str]:
  """What a worker would import (call_in_worker("explorer.tracing.versions:imported", {}, tinygrad=V)): its tinygrad's version and where
  from (found, not imported), and its interpreter."""
  import importlib.metadata
  import importlib.util
  spec = importlib.util.find_spec("tinygrad")
  return {"tinygrad": importlib.metadata.version("tinygrad"), "from": (spec.origin or "") if spec else "", "python": sys.executable}
