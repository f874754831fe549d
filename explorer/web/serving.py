"""Serving the app: uvicorn on a host and port, loopback-only unless an access token is set, with the request limits and the start-up
message; `kernel-explorer serve` calls `serve`."""
from __future__ import annotations
import contextlib
import errno
import hashlib
import json
import os
import pathlib
import signal
import socket
import sys
from typing import Any

def runtime_dir() -> pathlib.Path:
  """Where a server says what it serves, and t.open() keeps the pids of the servers it started."""
  return pathlib.Path(os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp")

def served_record(db: str | os.PathLike[str]) -> pathlib.Path:
  """The file a server over this store keeps while it serves: its port and pid (the store named by its resolved path)."""
  return runtime_dir() / f"kernel-explorer-serving-{hashlib.sha256(str(pathlib.Path(db).resolve()).encode()).hexdigest()[:16]}.json"

def serving(db: str | os.PathLike[str]) -> int | None:
  """The loopback port of a live server over this store that needs no token, as its record says (read as data: a record that does
  not parse, or whose process is gone, is none); the caller checks that it answers."""
  try: got = json.loads(served_record(db).read_text())
  except (OSError, ValueError): return None
  if not isinstance(got, dict) or not isinstance(port := got.get("port"), int) or not isinstance(pid := got.get("pid"), int): return None
  if got.get("local") is not True or not 0 < port < 65536 or pid <= 0 or not os.path.exists(f"/proc/{pid}"): return None
  return port

def port_taken(host: str, port: int) -> str | None:
  """Why the server cannot listen on host:port (one line, with what to do), or None: said before the app starts, not as uvicorn's
  traceback after it. tinygrad's own viewer (VIZ=1) serves on port 8000 too."""
  family = socket.AF_INET6 if ":" in host else socket.AF_INET
  with socket.socket(family, socket.SOCK_STREAM) as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try: s.bind((host, port))
    except OSError as e:
      if e.errno != errno.EADDRINUSE: return None  # uvicorn says what else went wrong
      viz = " (tinygrad's VIZ=1 viewer serves there too)" if port == 8000 else ""
      return f"kernel-explorer: {host}:{port} is in use{viz}: serve on another port (make serve PORT=8001, or --port 8001)"
  return None

def startup_message(host: str, port: int, settings: Any, store: str = "") -> str:
  shown = f"[{host}]" if ":" in host else host
  if settings.token:
    access = (f"every request needs the access token (KERNEL_EXPLORER_TOKEN): the X-Access-Token header or the ke_token cookie; "
              f"in a browser open http://{shown}:{port}/?token=... once")
  else: access = "loopback only, no access token (to listen beyond loopback, set KERNEL_EXPLORER_TOKEN)"
  limits = (f"limits: {settings.workers} trace workers, {settings.max_queue} queued, {settings.trace_timeout_s:.0f}s and "
            f"{settings.worker_memory_mb} MiB per worker, {settings.max_body_bytes} byte bodies (kernel-explorer serve --help lists them all)")
  if settings.queue:
    from explorer.queue.protocol import safe_url
    limits = (f"jobs run on the workers of the job queue at {safe_url(settings.queue)} (kernel-explorer worker); "
              f"{settings.max_queue} may wait, {settings.trace_timeout_s:.0f}s each")
  stored = f"\nkernel-explorer: traces are stored in {store} (--db or KERNEL_EXPLORER_DB serves another)" if store else ""
  return f"kernel-explorer: serving on http://{shown}:{port}; {access}\nkernel-explorer: {limits}{stored}"

def _stopped(signum: int, frame: Any) -> None: raise SystemExit(128 + signum)  # (as a process ended by the signal reports it)

def serve(host: str = "127.0.0.1", port: int = 8000, db_path: str | None = None, **overrides: Any) -> None:
  """Run the web server (uvicorn) until interrupted. Listening beyond loopback needs an access token (KERNEL_EXPLORER_TOKEN).
  overrides: settings by name (the CLI's flags), exported as KERNEL_EXPLORER_* too, so that every worker's defaults agree."""
  import uvicorn
  from explorer.settings import ENV_PREFIX, Settings
  from explorer.web.http.access import is_loopback
  settings = Settings.load(**overrides)
  if not is_loopback(host) and not settings.token:
    raise SystemExit(f"kernel-explorer: listening on {host} (beyond loopback) needs an access token: set KERNEL_EXPLORER_TOKEN")
  if (taken := port_taken(host, port)) is not None: raise SystemExit(taken)
  os.environ.update({ENV_PREFIX + name.upper(): str(v) for name, v in overrides.items() if v is not None})
  from explorer.tracing.workers.process import stop_all
  from explorer.web.app import create_app as _create_app
  from explorer.web.http.h11 import protocol_with
  from explorer.web.http.limits import redact_access_log, restrict_to_loopback
  app = _create_app(db_path, settings=settings)
  sys.setswitchinterval(float(settings.switch_interval_ms) / 1e3)  # the loop's waits behind rendering threads: docs/results.md
  if is_loopback(host): restrict_to_loopback(app, host)  # DNS rebinding: a page elsewhere cannot reach us under its own name
  print(startup_message(host, port, settings, str(app.state.services.store.path)), file=sys.stderr, flush=True)
  redact_access_log()
  # keep-alive beyond uvicorn's 5 s: on a busy loop a client's next request could meet a connection closed as idle.
  # No limit_concurrency: uvicorn counts idle sockets in it; requests in flight are limited by explorer.web.http.limits instead.
  # proxy headers only from the proxies the operator lists: uvicorn's default trusts them from loopback (and FORWARDED_ALLOW_IPS)
  proxies = settings.proxies
  record = served_record(app.state.services.store.path)
  local = is_loopback(host) and not settings.token  # t.open() can show it a page
  with contextlib.suppress(OSError):  # (unwritten: t.open() then starts a server of its own)
    record.write_text(json.dumps({"port": port, "pid": os.getpid(), "local": local, "db": str(app.state.services.store.path)}))
  # uvicorn stops on SIGTERM, then raises it again under the handler it found: ours, so that what follows the run runs too (the
  # default's would end the process there, leaving the measurements to die with it and this store's record behind)
  signal.signal(signal.SIGTERM, _stopped)
  try: uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=3, timeout_keep_alive=30,
                   http=protocol_with(float(settings.request_head_timeout_s)), proxy_headers=bool(proxies), forwarded_allow_ips=proxies or [])
  finally:
    stop_all()  # diff measurements and probes still running (trace jobs were stopped by the app's shutdown)
    with contextlib.suppress(OSError, ValueError):  # (another server's since: left)
      if json.loads(record.read_text()).get("pid") == os.getpid(): record.unlink()
