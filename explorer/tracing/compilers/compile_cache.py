"""Compile facts kept on disk, as Compiler Explorer keeps its compilations: the same kernel source compiled for the same target and arch
by the same compilers (each tool's path, size and modification time) through the same explorer code gives the same facts, so a kernel
seen again (another trace of the same convolution, a hand schedule's original, a page opened twice) costs a file read instead of nvcc,
ptxas and two nvdisasm runs (nvdisasm alone spends about 0.7 CPU s on any sm_90 cubin, however small).

Where: KERNEL_EXPLORER_COMPILE_CACHE (a directory; "off" keeps nothing), else $XDG_CACHE_HOME/kernel-explorer/compile. Only facts
that say what a compiler made are kept (never a failure, a time-out or a tool that could not run: those are computed each time). A
file read back is untrusted: it is used only where it reads as CompileFacts (explorer.schema), else computed and written again. The
cache never fails a compile: a directory that cannot be read or written is a miss."""
from __future__ import annotations
import functools
import hashlib
import json
import os
import pathlib
import tempfile
from typing import Any
from explorer.schema import record_adapters
from explorer.settings import ENV_PREFIX

CACHE_VAR = ENV_PREFIX + "COMPILE_CACHE"
MAX_ENTRIES = 4096  # past it, the least recently used quarter goes
FORMAT = 1          # bump when the key's fields change

def directory() -> pathlib.Path | None:
  """The cache's directory, None when it is off."""
  if (where := os.environ.get(CACHE_VAR, "")) == "off": return None
  if where: return pathlib.Path(where)
  return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "kernel-explorer" / "compile"

def identity(path: str | os.PathLike[str] | None) -> list[Any] | None:
  """A tool or library as the key names it: its path, size and modification time (another build of it is another key)."""
  if path is None: return None
  try: st = os.stat(path)
  except OSError: return [str(path)]
  return [str(path), st.st_size, st.st_mtime_ns]

@functools.cache
def _code_hash() -> str:
  """The explorer code that turns a compiler's output into facts (toolchain.py, nvdisasm.py): an edit to either is another key."""
  h = hashlib.sha256()
  for name in ("toolchain.py", "nvdisasm.py"): h.update((pathlib.Path(__file__).parent / name).read_bytes())
  return h.hexdigest()

def key(**inputs: Any) -> str:
  """The file name of the facts that `inputs` (JSON data: the source, target, arch, the tools' identities...) decide."""
  return hashlib.sha256(json.dumps({"format": FORMAT, "code": _code_hash(), **inputs}, sort_keys=True).encode()).hexdigest()

def get(name: str) -> dict[str, Any] | None:
  """The facts kept under `name`, where they read as CompileFacts; None otherwise (absent, unreadable, or not facts)."""
  if (d := directory()) is None: return None
  path = d / f"{name}.json"
  try:
    facts = record_adapters()["facts"].validate_python(json.loads(path.read_bytes()))
    os.utime(path)  # recently used: kept when the cache is pruned
  except (OSError, ValueError): return None  # pydantic's ValidationError and JSON's errors are ValueErrors
  return dict(facts)

def cacheable(facts: dict[str, Any]) -> bool:
  """Facts that say what a compiler made; not a failure (it may be a time-out), nor SASS missing because nvdisasm failed."""
  return facts.get("ok") is True and (facts.get("sass") is not None or not facts.get("sass_note") or facts["sass_note"].startswith("no nvdisasm"))

def put(name: str, facts: dict[str, Any]) -> None:
  """Keep `facts` under `name` (written whole, then renamed into place: a reader in another process never sees half a file)."""
  if (d := directory()) is None or not cacheable(facts): return
  tmp = None
  try:
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
    with os.fdopen(fd, "w") as f: json.dump(facts, f)
    os.replace(tmp, d / f"{name}.json")
    tmp = None
    _prune(d)
  except OSError: pass
  finally:
    if tmp is not None: pathlib.Path(tmp).unlink(missing_ok=True)

def _prune(d: pathlib.Path) -> None:
  entries = list(d.glob("*.json"))
  if len(entries) <= MAX_ENTRIES: return
  def used(p: pathlib.Path) -> float:
    try: return p.stat().st_mtime
    except OSError: return 0.0
  for p in sorted(entries, key=used)[:len(entries) - MAX_ENTRIES * 3 // 4]: p.unlink(missing_ok=True)
