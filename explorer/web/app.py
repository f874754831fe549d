"""The FastAPI app: JSON API under /api, server-rendered pages, vendored static assets and offline OpenAPI docs.

The server process never imports tinygrad: traces run in explorer.worker's processes, graphs expand in explorer.web.expand's."""
from __future__ import annotations
import asyncio, collections, hmac, threading
from contextlib import asynccontextmanager
from typing import AsyncIterator
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.gzip import GZipMiddleware
from explorer import __version__
from explorer.settings import Settings
from explorer.spec import SpecError
from explorer.store import Store, StoreError
from explorer.web.diffing import DiffService
from explorer.web.graphing import GraphService
from explorer.web.jobs import JobManager
from explorer.web.limits import install_limits
from explorer.web.provenance import provenance
from explorer.web.render import STATIC_DIR, make_templates

class TraceCache:
  """Parsed traces by id, most recent few: a cached trace page should not parse its JSON again."""
  def __init__(self, store: Store, size: int = 8):
    self.store, self.size = store, size
    self._items: collections.OrderedDict[str, dict] = collections.OrderedDict()
    self._lock = threading.Lock()

  def get(self, trace_id: str) -> dict | None:
    with self._lock:
      if trace_id in self._items:
        self._items.move_to_end(trace_id)
        return self._items[trace_id]
    trace = self.store.get_trace(trace_id)
    if trace is not None:
      with self._lock:
        self._items[trace_id] = trace
        while len(self._items) > self.size: self._items.popitem(last=False)
    return trace

  def forget(self, trace_id: str) -> None:
    with self._lock: self._items.pop(trace_id, None)

def readable_errors(exc: RequestValidationError) -> str:
  """pydantic's error list as one line: where, then what."""
  parts = []
  for e in exc.errors():
    loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("body", "query", "path"))
    parts.append(f"{loc}: {e.get('msg')}" if loc else str(e.get("msg")))
  return "; ".join(parts) or "invalid request"

def wants_html(request: Request) -> bool:
  return not request.url.path.startswith("/api/") and "text/html" in request.headers.get("accept", "text/html")

def install_error_handlers(app: FastAPI) -> None:
  async def validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    # without ctx and input: they may hold what JSON cannot encode (a non-JSON body arrives as bytes), and need not be echoed back
    return JSONResponse({"detail": readable_errors(exc), "errors": [{k: v for k, v in e.items() if k not in ("ctx", "input")} for e in exc.errors()]},
                        422)
  async def spec_error(request: Request, exc: SpecError) -> JSONResponse: return JSONResponse({"detail": str(exc)}, 422)
  async def store_error(request: Request, exc: StoreError) -> JSONResponse: return JSONResponse({"detail": str(exc)}, 500)
  async def http_error(request: Request, exc: StarletteHTTPException):
    if wants_html(request):
      ctx = {"status": exc.status_code, "message": exc.detail}
      return await app.state.templates.render(request, "error.html", ctx, status_code=exc.status_code)
    return JSONResponse({"detail": exc.detail}, exc.status_code, headers=getattr(exc, "headers", None))
  app.add_exception_handler(RequestValidationError, validation)  # type: ignore[arg-type]
  app.add_exception_handler(SpecError, spec_error)  # type: ignore[arg-type]
  app.add_exception_handler(StoreError, store_error)  # type: ignore[arg-type]
  app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]

TOKEN_HEADER, TOKEN_COOKIE = "X-Access-Token", "ke_token"
TOKEN_FREE = ("/static/", "/api/health")

def install_token_check(app: FastAPI, token: str) -> None:
  """Every request but static assets and the health check needs the token: header, cookie, or ?token= once (which sets the cookie)."""
  @app.middleware("http")
  async def check_token(request: Request, call_next):
    if request.url.path.startswith(TOKEN_FREE): return await call_next(request)
    given = request.headers.get(TOKEN_HEADER) or request.cookies.get(TOKEN_COOKIE) or ""
    if (query := request.query_params.get("token")) is not None and hmac.compare_digest(query.encode(), token.encode()):
      resp = RedirectResponse(str(request.url.remove_query_params("token")), status_code=303)
      resp.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
      return resp
    if not hmac.compare_digest(given.encode(), token.encode()):
      return JSONResponse({"detail": f"access token required: send the {TOKEN_HEADER} header, or open /?token=... once in the browser"}, 401)
    return await call_next(request)

def worker_limits(settings: Settings) -> object:
  from explorer.worker import Limits  # explorer.worker imports no tinygrad
  return Limits(memory_mb=int(settings.worker_memory_mb), max_output_mb=float(settings.max_output_mb))

def create_app(db_path: str | None = None, settings: Settings | None = None, runner=None, graph_workers: int = 1) -> FastAPI:
  """The app over one SQLite store. runner replaces explorer.worker.run_trace (tests use it to count or fake runs).
  With settings.token set (KERNEL_EXPLORER_TOKEN) every request needs it."""
  settings = settings or Settings.load()
  store = Store(db_path or settings.db)

  @asynccontextmanager
  async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    app.state.jobs.cancel_all()
    app.state.diffs.cancel_all()
    await asyncio.to_thread(app.state.graphs.close)

  app = FastAPI(title="Kernel Explorer", version=__version__, docs_url=None, redoc_url=None, lifespan=lifespan,
                description="Trace a convolution through tinygrad's pipeline: tensor graph, rangeify, kernel graph, codegen passes, "
                            "rendered source per target and measured timings. Every page has a JSON twin under /api.")
  app.state.settings = settings
  app.state.store = store
  app.state.traces = TraceCache(store)
  app.state.jobs = JobManager(store, parallel=settings.workers, timeout_s=float(settings.trace_timeout_s), runner=runner,
                              max_queue=int(settings.max_queue), limits=worker_limits(settings), queue_wait_s=float(settings.queue_wait_s))
  app.state.graphs = GraphService(store, node_limit=int(settings.graph_node_limit), dot_timeout_s=float(settings.dot_timeout_s),
                                  workers=graph_workers, expand_timeout_s=float(settings.graph_timeout_s), memory_mb=int(settings.worker_memory_mb),
                                  max_output_mb=float(settings.max_output_mb), max_waiting=int(settings.max_graph_queue),
                                  nice=int(settings.worker_nice))
  app.state.diffs = DiffService(store, node_limit=int(settings.graph_node_limit), dot_timeout_s=float(settings.dot_timeout_s),
                                timeout_s=float(settings.trace_timeout_s))
  app.state.templates = make_templates()
  app.state.templates.env.globals["provenance"] = provenance
  app.add_middleware(GZipMiddleware, minimum_size=4096)
  install_limits(app, int(settings.max_body_bytes))  # body and URL size, cross-site posts, Host on loopback, safety headers
  install_error_handlers(app)
  if settings.token: install_token_check(app, str(settings.token))
  app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
  from explorer.web.routes import api, docs, pages, roofline, tours
  app.include_router(api.router)
  app.include_router(pages.router)
  app.include_router(roofline.router)
  app.include_router(docs.router)
  tours.install(app)
  from explorer.web.routes import diff, library
  for r in (library.api, diff.api, library.router, diff.router): app.include_router(r)
  return app
