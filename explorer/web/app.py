"""The FastAPI app: JSON API under /api, server-rendered pages, vendored static assets and offline OpenAPI docs.

The server process never imports tinygrad: traces run in explorer.tracing.workers's processes, graphs expand in explorer.present.expand_worker's."""
from __future__ import annotations
import asyncio, collections, threading
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.gzip import GZipMiddleware
from starlette.routing import Match
from explorer.version import __version__
from explorer.tracing.workers import Limits  # imports no tinygrad
from explorer.settings import Settings
from explorer.spec import SpecError
from explorer.store import Store, StoreError
from explorer.web.http.access import install_token_check
from explorer.web.http.cache import ResponseCache
from explorer.queue.protocol import NEEDS_EXTRA
from explorer.web.http.deps import stored_request
from explorer.web.services.devices import DeviceCatalog, QueueDevices
from explorer.web.services.targets import TargetService
from explorer.web.services.diffs import DiffService
from explorer.web.services.graphs import GraphService
from explorer.web.services.traces import ClientBusy, JobManager, QueueFull, busy_answer
from explorer.web.services.studies import StudyService
from explorer.web.http.limits import install_limits, stream_paths
from explorer.web.services.provenance import provenance
from explorer.web.http.templates import STATIC_DIR, make_templates

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

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

def allowed_methods(app: FastAPI, path: str) -> list[str]:
  """The methods some route answers at this path. Starlette's 405 names only the first route whose path matched (GET /api/traces/{id}
  and DELETE /api/traces/{id} are two routes)."""
  def answers(method: str) -> bool:
    scope = {"type": "http", "method": method, "path": path, "root_path": "", "headers": [], "query_string": b""}
    return any(r.matches(dict(scope))[0] == Match.FULL for r in app.router.routes)
  return [m for m in METHODS if answers(m)]

def error_body(exc: StarletteHTTPException) -> dict:
  """{"detail"}, and every 422 also has "errors" (empty: the request was well-formed, the server refuses what it asks)."""
  return {"detail": exc.detail, "errors": []} if exc.status_code == 422 else {"detail": exc.detail}

def install_error_handlers(app: FastAPI) -> None:
  """Every error as its documented body (explorer.web.http.models: ErrorBody, and ValidationErrorBody for 422), or as the error page where
  a browser asks for a page; a 405 with the Allow header of every route at its path."""
  async def validation(request: Request, exc: RequestValidationError) -> Response:
    if wants_html(request):  # a mistyped page address (/t/x/k/abc): the error page, not a JSON body
      return await app.state.templates.render(request, "error.html", {"status": 422, "message": readable_errors(exc)}, status_code=422)
    # pydantic's type, loc and msg; not ctx and input: they may hold what JSON cannot encode (a non-JSON body arrives as bytes)
    errors = [{k: e[k] for k in ("type", "loc", "msg") if k in e} for e in exc.errors()]
    return JSONResponse({"detail": readable_errors(exc), "errors": errors}, 422)
  async def spec_error(request: Request, exc: SpecError) -> JSONResponse: return JSONResponse({"detail": str(exc), "errors": []}, 422)
  async def store_error(request: Request, exc: StoreError) -> JSONResponse: return JSONResponse({"detail": str(exc)}, 500)
  async def http_error(request: Request, exc: StarletteHTTPException):
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 405 and "Allow" in headers: headers["Allow"] = ", ".join(allowed_methods(app, request.url.path))
    if wants_html(request):
      ctx = {"status": exc.status_code, "message": exc.detail}
      resp = await app.state.templates.render(request, "error.html", ctx, status_code=exc.status_code)
      resp.headers.update(headers)
      return resp
    return JSONResponse(error_body(exc), exc.status_code, headers=headers or None)
  async def busy(request: Request, exc: QueueFull | ClientBusy) -> Response:
    status, after = busy_answer(exc)
    return await http_error(request, StarletteHTTPException(status, str(exc), headers={"Retry-After": after}))
  async def failed(request: Request, exc: Exception) -> Response:  # a bug: its one line, never a traceback (the log has it)
    return JSONResponse({"detail": f"the server failed: {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"}, 500)
  app.add_exception_handler(QueueFull, busy)  # type: ignore[arg-type]
  app.add_exception_handler(ClientBusy, busy)  # type: ignore[arg-type]
  app.add_exception_handler(Exception, failed)
  app.add_exception_handler(RequestValidationError, validation)  # type: ignore[arg-type]
  app.add_exception_handler(SpecError, spec_error)  # type: ignore[arg-type]
  app.add_exception_handler(StoreError, store_error)  # type: ignore[arg-type]
  app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
  document_errors(app)

def document_errors(app: FastAPI) -> None:
  """The schema lists what each operation declares (explorer.web.http.models.documented): FastAPI's own 422 (HTTPValidationError, a body
  this app never sends) goes, from operations that declare none too (their parameters cannot fail validation: plain strings)."""
  generate = app.openapi
  def openapi() -> dict:
    schema = generate()
    for ops in schema.get("paths", {}).values():
      for op in ops.values():
        body = op.get("responses", {}).get("422", {}).get("content", {}).get("application/json", {}).get("schema", {})
        if body.get("$ref", "").endswith("/HTTPValidationError"): del op["responses"]["422"]
    for name in ("HTTPValidationError", "ValidationError"): schema.get("components", {}).get("schemas", {}).pop(name, None)
    return schema
  app.openapi = openapi  # type: ignore[method-assign]

def forget_trace(app: FastAPI, trace_id: str) -> None:
  """A stored trace changed (a target was added to it): what was parsed or rendered from it before is dropped."""
  app.state.traces.forget(trace_id)
  if (cache := getattr(app.state, "response_cache", None)) is not None: cache.forget(trace_id)

def _queue_client(settings: Settings) -> Any:
  try: from explorer.queue.client import QueueClient
  except ImportError: raise ValueError(NEEDS_EXTRA) from None
  return QueueClient(str(settings.queue), secret=settings.queue_secret, max_result_bytes=int(settings.max_output_mb) << 20)

def create_app(db_path: str | None = None, settings: Settings | None = None, runner=None, graph_workers: int = 1,
               devices: DeviceCatalog | None = None, study_runner=None) -> FastAPI:
  """The app over one SQLite store. runner replaces explorer.tracing.run.run_trace, study_runner explorer.analysis.study.run_studies
  (tests use them to count or fake runs).
  With settings.token set (KERNEL_EXPLORER_TOKEN) every request needs it."""
  settings = settings or Settings.load()
  store = Store(db_path or settings.db)

  @asynccontextmanager
  async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.jobs.resume_queued(stored_request)  # with a job queue: what it still runs for this server's earlier life
    app.state.studies.resume_queued()
    yield
    app.state.jobs.shutdown()  # unfinished jobs marked interrupted, their workers' groups killed
    app.state.studies.shutdown()
    app.state.diffs.cancel_all()
    app.state.targets.cancel_all()
    await asyncio.to_thread(app.state.graphs.close)

  app = FastAPI(title="Kernel Explorer", version=__version__, docs_url=None, redoc_url=None, lifespan=lifespan,
                description="Trace a convolution through tinygrad's pipeline: tensor graph, rangeify, kernel graph, codegen passes, "
                            "rendered source per target and measured timings. Every page has a JSON twin under /api.")
  app.state.settings = settings
  app.state.store = store
  app.state.traces = TraceCache(store)
  queue = _queue_client(settings) if settings.queue else None
  # with a job queue this server only follows jobs: the queue's workers are the limit, and max_queue bounds what waits there
  parallel = settings.workers if queue is None else int(settings.max_queue) + 1
  app.state.jobs = JobManager(store, parallel=parallel, timeout_s=float(settings.trace_timeout_s), runner=runner, max_queue=int(settings.max_queue),
                              limits=Limits.from_settings(settings), queue_wait_s=float(settings.queue_wait_s), queue=queue,
                              max_per_client=int(settings.max_jobs_per_client))
  app.state.graphs = GraphService(store, node_limit=int(settings.graph_node_limit), dot_timeout_s=float(settings.dot_timeout_s),
                                  workers=graph_workers, expand_timeout_s=float(settings.graph_timeout_s), memory_mb=int(settings.worker_memory_mb),
                                  max_output_mb=float(settings.max_output_mb), max_waiting=int(settings.max_graph_queue),
                                  nice=int(settings.worker_nice))
  app.state.diffs = DiffService(store, node_limit=int(settings.graph_node_limit), dot_timeout_s=float(settings.dot_timeout_s),
                                timeout_s=float(settings.trace_timeout_s), queue=queue)
  app.state.targets = TargetService(store, Limits.from_settings(settings), on_stored=lambda trace_id: forget_trace(app, trace_id))
  app.state.studies = StudyService(store, on_stored=lambda trace_id: forget_trace(app, trace_id), runner=study_runner, queue=queue)
  app.state.devices = devices or (QueueDevices(queue) if queue is not None else DeviceCatalog(timeout_s=min(120.0, float(settings.trace_timeout_s))))
  app.state.templates = make_templates()
  app.state.templates.env.globals["provenance"] = provenance
  app.add_middleware(GZipMiddleware, minimum_size=4096)
  app.add_middleware(ResponseCache, is_stored=store.has_trace, state=app.state)  # outside GZip: kept gzipped
  # body and URL size, requests in flight, cross-site posts, Host on loopback, safety headers
  install_limits(app, settings)
  install_error_handlers(app)
  if settings.token: install_token_check(app, str(settings.token))
  app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
  from explorer.web.routes import api, docs, pages, roofline, tours
  app.include_router(api.router)
  app.include_router(pages.router)
  app.include_router(roofline.router)
  app.include_router(docs.router)
  tours.install(app)
  from explorer.web.routes import diff, library, studies
  for r in (library.api, diff.api, studies.api, library.router, diff.router, studies.router): app.include_router(r)
  app.state.request_limits.stream_paths = stream_paths(app)
  return app
