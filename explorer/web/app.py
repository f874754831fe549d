"""The FastAPI app: JSON API under /api, server-rendered pages, vendored static assets and offline OpenAPI docs.

The server process never imports tinygrad: traces run in worker processes (explorer.tracing.workers), graphs expand in
explorer.present.expand_worker's."""
from __future__ import annotations
import asyncio
import threading
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any, cast
import anyio.to_thread
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.middleware.gzip import GZipMiddleware
from explorer.queue.protocol import NEEDS_EXTRA
from explorer.schema import TraceRecord, record_adapters
from explorer.settings import Settings
from explorer.stages import ENRICH_ANALYSIS
from explorer.store import Store, collector
from explorer.tracing.workers.process import Limits  # imports no tinygrad
from explorer.version import __version__
from explorer.web.http.access import install_token_check
from explorer.web.http.cache import ResponseCache
from explorer.web.http.deps import stored_request
from explorer.web.http.errors import install_error_handlers
from explorer.web.http.limits import install_limits, stream_paths
from explorer.web.http.loopwatch import LoopWatch
from explorer.web.http.templates import STATIC_DIR, make_templates
from explorer.web.routes import classes, diff, docs, graphs, home, kernels, library, meta, opts, roofline, schedule, studies, timeline, tours, traces
from explorer.web.services.classes import ClassService
from explorer.web.services.devices import DeviceCatalog, QueueDevices
from explorer.web.services.diffs import DiffService
from explorer.web.services.enrichments import EnrichmentService
from explorer.web.services.graphs import GraphService
from explorer.web.services.probes import Probes
from explorer.web.services.provenance import provenance
from explorer.web.services.registry import Services, TraceCache
from explorer.web.services.studies import StudyService
from explorer.web.services.traces import JobManager

ROUTERS = (meta.router, meta.assets, home.router, traces.api, traces.router, kernels.api, kernels.router, opts.api, opts.router,
           schedule.api, schedule.router, graphs.api, roofline.router, timeline.router, docs.router, tours.router, library.api, diff.api,
           studies.api, library.router, diff.router, studies.router, classes.api, classes.router)

def _queue_client(settings: Settings) -> Any:
  try:
    from explorer.queue.client import QueueClient
  except ImportError: raise ValueError(NEEDS_EXTRA) from None
  return QueueClient(str(settings.queue), secret=settings.queue_secret, max_result_bytes=int(settings.max_output_mb) << 20)

def routes_made(routes: Iterable[Any]) -> None:
  """FastAPI makes an included router's route models on the first request that reaches it, on the event loop (150 ms of a fresh
  server's first views): made here, in a thread at start. Not through the OpenAPI schema, which makes them too but parses builtins'
  signatures with the ast module, which CPython 3.11.7 cannot run in two threads at once ("AST constructor recursion depth mismatch")."""
  for route in routes:
    if (candidates := getattr(route, "effective_candidates", None)) is not None: routes_made(candidates())

def make_services(settings: Settings, store: Store, runner: Any = None, graph_workers: int = 1, devices: DeviceCatalog | None = None,
                  study_runner: Any = None) -> Services:
  """Every stateful part of the app, from its settings."""
  queue = _queue_client(settings) if settings.queue else None
  limits, timeout_s = Limits.from_settings(settings), float(settings.trace_timeout_s)
  # with a job queue this server only follows jobs: the queue's workers are the limit, and max_queue bounds what waits there
  parallel = settings.workers if queue is None else int(settings.max_queue) + 1
  def changed(trace_id: str, merge: Any = None) -> None: svc.forget(trace_id, merge)  # a target, an enrichment or a study stored into a trace
  traces = TraceCache(store, freeze_over=int(settings.freeze_parsed_mb) << 20)
  enrichments = EnrichmentService(store, limits, on_stored=changed, read=traces.with_kernels, background_workers=int(settings.background_workers),
                                  max_waiting=int(settings.max_waiting_page_work), per_client=int(settings.max_page_work_per_client),
                                  opts_waiting=int(settings.max_waiting_work), opts_per_client=int(settings.max_work_per_client))
  traces.busy = lambda: bool(enrichments.tasks.active() or enrichments.background.active() or enrichments.opts_tasks.active())
  def stored(trace_id: str, trace: dict[str, Any]) -> None:
    """In the background, at a lower priority: a stored trace's records get their analyses, then its first kernels their records on
    the targets rendered ahead (settings.render_ahead), so that a page's first view of them is read, not computed."""
    fresh = cast(TraceRecord, trace)  # as this version's engine wrote it: the current schema
    for target in dict.fromkeys(t for k in fresh["kernels"] for t in k.get("targets", {})):
      enrichments.start_background(trace_id, ENRICH_ANALYSIS, target, enrichments.missing(fresh, ENRICH_ANALYSIS, target))
    enrichments.render_ahead(trace_id, fresh, settings.ahead_targets, int(settings.render_ahead_kernels))
  svc = Services(
    settings=settings, store=store, traces=traces,
    jobs=JobManager(store, parallel=parallel, timeout_s=timeout_s, runner=runner, max_queue=int(settings.max_queue), limits=limits,
                    queue_wait_s=float(settings.queue_wait_s), queue=queue, max_per_client=int(settings.max_jobs_per_client),
                    on_stored=stored, beside=settings.beside_targets),
    graphs=GraphService(store, node_limit=int(settings.graph_node_limit), dot_timeout_s=float(settings.dot_timeout_s), workers=graph_workers,
                        expand_timeout_s=float(settings.graph_timeout_s), memory_mb=int(settings.worker_memory_mb),
                        max_output_mb=float(settings.max_output_mb), max_waiting=int(settings.max_graph_queue), nice=int(settings.worker_nice)),
    diffs=DiffService(store, node_limit=int(settings.graph_node_limit), dot_timeout_s=float(settings.dot_timeout_s), timeout_s=timeout_s,
                      queue=queue, with_facts=enrichments.with_facts, max_waiting=int(settings.max_waiting_work),
                      per_client=int(settings.max_work_per_client), kernel=traces.kernel),
    enrichments=enrichments,
    studies=StudyService(store, on_stored=changed, runner=study_runner, queue=queue),
    devices=devices or (QueueDevices(queue) if queue is not None else DeviceCatalog(timeout_s=min(120.0, timeout_s))),
    probes=Probes(timeout_s),
    classes=ClassService(store, max_students=int(settings.class_max_students), max_classes=int(settings.max_classes),
                         idle_s=float(settings.class_idle_hours) * 3600))
  return svc

def create_app(db_path: str | None = None, settings: Settings | None = None, runner: Any = None, graph_workers: int = 1,
               devices: DeviceCatalog | None = None, study_runner: Any = None) -> FastAPI:
  """The app over one SQLite store. runner replaces explorer.tracing.pipeline.run.run_trace, study_runner explorer.analysis.study.run_studies
  (tests use them to count or fake runs).
  With settings.token set (KERNEL_EXPLORER_TOKEN) every request needs it."""
  settings = settings or Settings.load()
  store = Store(db_path or settings.db)
  svc = make_services(settings, store, runner, graph_workers, devices, study_runner)

  @asynccontextmanager
  async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    svc.jobs.resume_queued(stored_request)  # with a job queue: what it still runs for this server's earlier life
    svc.studies.resume_queued()
    if svc.traces.freeze_over: collector.settle()
    def warm() -> None:  # what the first pages would otherwise make as they go
      templates.warm()
      routes_made(app.router.routes)
      record_adapters()  # what an enrichment merged into a parse is checked with
    threading.Thread(target=svc.jobs.learn_default_device, name="default-device", daemon=True).start()
    # before the first request, not beside it (0.3 s of the interpreter that eleven first views of a big program waited on), in AnyIO's
    # worker threads, which GZip compresses a big body in: their backend imported now, not on the loop in a first page's answer
    await anyio.to_thread.run_sync(warm)
    app.state.loop_watch = watch = LoopWatch() if settings.loop_watch else None
    if watch is not None: watch.install()
    try: yield
    finally:
      if watch is not None: watch.uninstall()  # (another app of this process may watch its own loop next)
    svc.jobs.shutdown()  # unfinished jobs marked interrupted, their workers' groups killed
    svc.studies.shutdown()
    svc.diffs.cancel_all()
    svc.enrichments.cancel_all()
    svc.traces.close()
    svc.probes.cancel_all()
    await asyncio.to_thread(svc.graphs.close)
    collector.thaw()  # what it froze of the traces it parsed

  app = FastAPI(title="Kernel Explorer", version=__version__, docs_url=None, redoc_url=None, lifespan=lifespan,
                description="Trace a convolution through tinygrad's pipeline: tensor graph, rangeify, kernel graph, codegen passes, "
                            "rendered source per target and measured timings. Every page has a JSON twin under /api.")
  app.state.services = svc
  app.state.templates = templates = make_templates()
  templates.env.globals.update(provenance=provenance, **tours.TEMPLATE_GLOBALS)
  app.add_middleware(GZipMiddleware, minimum_size=4096, compresslevel=6)  # on the event loop: 6 is a third of 9's time, a few % bigger
  app.add_middleware(ResponseCache, stored_at=store.stored_at, state=app.state)  # outside GZip: kept gzipped
  def forget(trace_id: str, merge: Any = None) -> None:
    """A stored trace changed (a target was added to it: merge puts it into the parsed trace) or went: what was rendered from it before
    is dropped, and the parsed trace too where no merge says how it changed."""
    if merge is not None:
      svc.traces.update(trace_id, merge)
      svc.traces.stale_document(trace_id)
    else: svc.traces.forget(trace_id)
    if (cache := getattr(app.state, "response_cache", None)) is not None: cache.forget(trace_id)
  svc.forget = forget
  def measured(a: str, b: str) -> None:  # a pair timed interleaved: the views that quote it (a built-in tour's steps) are rendered again
    if (cache := getattr(app.state, "response_cache", None)) is not None:
      for trace_id in (a, b): cache.forget(trace_id)
  svc.diffs.on_measured = measured
  # body and URL size, requests in flight, cross-site posts, Host on loopback, safety headers
  install_limits(app, settings)
  install_error_handlers(app, templates)
  if settings.token: install_token_check(app, str(settings.token))
  app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
  for router in ROUTERS: app.include_router(router)
  app.state.request_limits.stream_paths = stream_paths(ROUTERS)
  app.state.request_limits.own_caps_paths = stream_paths(ROUTERS, own_caps=True)
  return app
