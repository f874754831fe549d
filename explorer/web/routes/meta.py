"""What the server offers: its health, the presets, devices, targets and custom rewrites a trace may name, and the stylesheet of the
highlighted sources."""
from __future__ import annotations
import asyncio
import functools
import shutil
import sys
from typing import Any
from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse, Response
from explorer.spec import PRESETS
from explorer.store import tinygrad_version
from explorer.targets import TARGETS
from explorer.tracing import versions
from explorer.tracing.pipeline.catalogue import catalogue
from explorer.version import __version__
from explorer.web.http import deps
from explorer.web.http.deps import ServicesDep
from explorer.web.http.models import DevicesOffered, Health, TinygradVersion, Unopened, documented
from explorer.web.http.templates import TARGET_LABELS, pygments_css

router = APIRouter(prefix="/api", tags=["api"])
assets = APIRouter(include_in_schema=False)

@functools.cache
def has_dot() -> bool: return shutil.which("dot") is not None  # a PATH walk: once, not on every health check

@functools.cache
def tinygrad_installed() -> str: return tinygrad_version()  # package metadata read once, not on every health check

@router.get("/health", response_model=Health, response_model_exclude_none=True, summary="Server health",
            responses=documented({422: "held_since is not a time on time.monotonic's clock (a number, 0 or more)"},
                                 guards=(400, 403, 413, 414)))  # no token needed, never over the in-flight limit
async def health(request: Request, svc: ServicesDep, held_since: float | None = Query(None, ge=0)) -> dict[str, Any]:
  """Liveness and versions; the store's path only to those trusted with it (a loopback client of a token-free server, a token holder),
  and to them, with settings.loop_watch, `loop`: how long the event loop's steps held it (the longest since `held_since`, on
  time.monotonic's clock)."""
  out = {"status": "ok", "version": __version__, "tinygrad": tinygrad_installed(), "tinygrad_imported": "tinygrad" in sys.modules,
         "jobs_running": svc.jobs.running(), "dot": has_dot()}
  if not deps.trusted(request, svc.settings): return out
  if (watch := getattr(request.app.state, "loop_watch", None)) is not None: out["loop"] = watch.report(held_since)  # (it names code)
  return out | {"db": str(svc.store.path)}

@router.get("/presets", summary="Preset convolutions", responses=documented())
async def presets() -> dict[str, dict[str, Any]]:
  return {name: {**spec.to_dict(), "label": spec.label()} for name, spec in PRESETS.items()}

@router.get("/devices", summary="The devices a trace may name",
            responses=documented({503: "the worker that lists this host's devices failed, or the job queue does not answer (Retry-After)"}))
async def devices(svc: ServicesDep) -> DevicesOffered:
  """The compute devices this host opens, best first (`kernel-explorer devices` lists the same); a trace's variant.device must be one
  of them (an index may follow: CUDA:1). Devices that read or write files, open sockets or emulate (DISK, TINYFS, PYTHON, NULL) never are.
  With a job queue (settings.queue): the devices its registered workers offer; a trace may then name any compute device."""
  offered = await svc.devices.offered()
  return DevicesOffered(devices=offered, unopened=[Unopened(**u) for u in svc.devices.unopened])

@router.get("/versions", response_model=list[TinygradVersion], summary="The tinygrad versions a trace may run on", responses=documented())
async def tinygrad_versions() -> list[dict[str, Any]]:
  """Each version and where its environment stands (`kernel-explorer versions` lists the same; `--make VERSION` makes one)."""
  return [{k: v for k, v in e.view().items() if k != "path"} for e in await asyncio.to_thread(versions.environments)]

@router.get("/targets", summary="Render targets", responses=documented())
async def targets() -> list[dict[str, Any]]:
  return [{"name": t, "label": TARGET_LABELS.get(t, t)} for t in TARGETS]

@router.get("/rewrites", summary="Custom codegen rewrites a trace may add (variant.rewrites)", responses=documented())
async def rewrites() -> list[dict[str, str]]:
  """The catalogue: each rewrite's name, how a variant names it (usage), where in codegen it runs (point: "sink", the graph the
  linearizer is handed; "linear", the linearized order), what it does, and its PatternMatcher and functions as they stand in the
  explorer's source. A user's own rewrite file is the CLI's alone (`--rewrite-file`): this server never runs user code."""
  return catalogue()

PYGMENTS_CSS = pygments_css()

@assets.get("/assets/pygments.css")
async def pygments_stylesheet() -> Response:
  return PlainTextResponse(PYGMENTS_CSS, media_type="text/css", headers={"Cache-Control": "public, max-age=86400"})
