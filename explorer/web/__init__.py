"""The Kernel Explorer web app. Imports stay lazy: graph worker processes import explorer.web.expand without loading FastAPI."""
from __future__ import annotations
from typing import TYPE_CHECKING
if TYPE_CHECKING:
  from fastapi import FastAPI

def create_app(db_path: str | None = None) -> FastAPI:
  from explorer.web.app import create_app as _create_app
  return _create_app(db_path)

LOOPBACK = ("127.0.0.1", "localhost", "::1")

def serve(host: str = "127.0.0.1", port: int = 8000, db_path: str | None = None) -> None:
  """Run the web server (uvicorn) until interrupted. Listening beyond loopback needs an access token (KERNEL_EXPLORER_TOKEN)."""
  import uvicorn
  from explorer.settings import Settings
  settings = Settings.load()
  if host not in LOOPBACK and not settings.token:
    raise SystemExit(f"kernel-explorer: listening on {host} (beyond loopback) needs an access token: set KERNEL_EXPLORER_TOKEN")
  from explorer.web.app import create_app as _create_app
  uvicorn.run(_create_app(db_path, settings=settings), host=host, port=port, log_level="info", timeout_graceful_shutdown=3)
