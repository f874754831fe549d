"""Where a stored trace came from, against what this server runs: its tinygrad version (known without importing tinygrad) and its
default device (asked once of tinygrad in a worker process, in the background; DEV when set)."""
from __future__ import annotations
import os
import socket
import threading
from typing import TYPE_CHECKING, Any
from explorer.store import tinygrad_version
from explorer.tinygrads import NOT_IN_TINYGRAD, ONLY_IN_TINYGRAD
from explorer.tracing import versions

if TYPE_CHECKING:
  from explorer.schema import TraceRecord

_lock = threading.Lock()
_device: dict[str, Any] | None = None  # the worker's answer, once it came ({"device": None} if it failed)
_asked = False

def _learn() -> None:
  global _device
  from explorer.tracing.workers.process import call_in_worker  # imports no tinygrad; the worker does
  try: info, _ = call_in_worker("explorer.tracing.pipeline.probe:describe", {}, timeout_s=120.0, env={"VIZ": "0"})
  except Exception: info = None
  with _lock: _device = info if isinstance(info, dict) else {"device": None}

def server_device(wait_s: float = 0.0) -> str | None:
  """This server's default device; None while it is not known yet (the first call starts finding out)."""
  global _asked
  if os.environ.get("DEV"): return os.environ["DEV"]
  with _lock:
    if _device is not None: return _device.get("device")
    start, _asked = not _asked, True
  if start: threading.Thread(target=_learn, daemon=True, name="server-device").start()
  if wait_s > 0:
    for _ in range(int(wait_s * 10)):
      with _lock:
        if _device is not None: return _device.get("device")
      threading.Event().wait(0.1)
  return None

def _base(device: str | None) -> str: return (device or "").split(":")[0].upper()

def provenance(trace: TraceRecord) -> dict[str, Any] | None:
  """A banner's content when the trace was recorded with another tinygrad or on another device than this server's; else None."""
  env = trace.get("env") or {}
  here_tg, here_dev = tinygrad_version(), server_device()
  differs = []
  if env.get("tinygrad") and env["tinygrad"] != here_tg: differs.append("tinygrad")
  if here_dev and env.get("device") and _base(env["device"]) != _base(here_dev): differs.append("device")
  if not differs: return None
  older = versions.older(env.get("tinygrad")) is not None  # traced here, in that tinygrad's environment
  return {"differs": differs, "tinygrad": env.get("tinygrad"), "device": env.get("device"), "host": env.get("host"), "created": env.get("created"),
          "here_tinygrad": here_tg, "here_device": here_dev, "here_host": socket.gethostname(), "environment": older,
          "not_in": NOT_IN_TINYGRAD.get(env.get("tinygrad") or "", ()) if older else (),
          "only_in": ONLY_IN_TINYGRAD.get(env.get("tinygrad") or "", ()) if older else ()}
