"""Studies: a seed document's experiment redone on this server's device, with intervals and a verdict per figure.
API: POST /api/studies (202: it runs; 409: one runs already), GET /api/studies/{id} (progress, then the result and the document's table),
GET /api/studies. Pages: /studies (form and list), /studies/{id} (progress, then tables and plots: the permalink), its export."""
from __future__ import annotations
import asyncio
import socket
from typing import Any
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from explorer.analysis.study import DEFAULT_PRESETS, tile_problem
from explorer.present.study import case_views, render_export
from explorer.spec import PRESETS, STUDY_CI_WIDTH, SpecError
from explorer.tinygrads import TRACEABLE
from explorer.tracing import versions
from explorer.web.http import deps
from explorer.web.http.deps import ServicesDep
from explorer.web.http.models import StudyRequest, StudyStatus, documented
from explorer.web.routes.common import attachment, page
from explorer.web.services.registry import Services
from explorer.web.services.remote import queue_answers
from explorer.web.services.studies import cases_of
from explorer.web.urls import study_url

api = APIRouter(prefix="/api", tags=["studies"])
router = APIRouter()
KINDS = {"constants": "seed 000, symbolic vs materialized Winograd constants", "fusion": "seed 003, staged vs fused vs single vs builtin Winograd"}

async def study_or_404(svc: Services, study_id: str) -> dict[str, Any]:
  if (status := await asyncio.to_thread(svc.studies.status, study_id)) is None: raise HTTPException(404, f"no study {study_id}")
  return status

@api.post("/studies", response_model=StudyStatus, status_code=202, summary="Start a study: every case traced, then timed interleaved",
          responses=documented({409: "a study is running already (the detail names it): one at a time, or they would time each other",
                                422: "a malformed request, a shape over this server's memory budget, or a device it does not offer",
                                503: "this host's devices could not be listed, or the job queue does not answer (Retry-After)"}))
async def start_study(body: StudyRequest, svc: ServicesDep) -> JSONResponse:
  """Returns at once; GET the returned url's API twin (/api/studies/{id}) for progress. Takes as long as its cases' traces plus up to
  budget_s of timing per case."""
  settings = svc.settings
  if body.device is not None: body = body.model_copy(update={"device": await deps.device_here(svc, body.device, "device")})
  specs = [s.to_spec() for s in body.specs]
  for s in specs: s.validate(memory_budget=int(settings.memory_budget_mb) << 20)
  if body.repeats > int(settings.max_repeats): raise SpecError(f"repeats: at most {settings.max_repeats} on this server")
  older = versions.older(body.tinygrad)
  params = {"repeats": body.repeats, "warmup": body.warmup, "tile": body.tile, "targets": tuple(body.targets), "device": body.device,
            "ci_width": body.ci_width, "budget_s": body.budget_s, **({"tinygrad": older} if older else {}),
            "timeout_s": float(settings.trace_timeout_s) + body.budget_s}  # per worker: a trace, or a case's timing with its budget
  await queue_answers(svc.studies.queue)
  cases = cases_of(body.kind, list(body.presets), specs)
  if (why := tile_problem(body.tile, cases)) is not None: raise SpecError(why)
  run = svc.studies.start(body.kind, cases, body.model_dump(mode="json"), params)  # StudyRunning: 409 (explorer.web.http.errors)
  return JSONResponse(run.view(), status_code=202)

@api.get("/studies/{study_id}", response_model=StudyStatus, summary="A study: its progress, then its result and the document's table",
         responses=documented({404: "no study with this id"}))
async def get_study(study_id: str, svc: ServicesDep) -> dict[str, Any]:
  return await study_or_404(svc, study_id)

@api.get("/studies", summary="Recent studies, newest first (without their results)", responses=documented({422: "limit out of range"}))
async def list_studies(svc: ServicesDep, limit: int = Query(50, ge=1, le=500)) -> list[dict[str, Any]]:
  rows = await asyncio.to_thread(svc.studies.recent, limit)
  return [{k: r[k] for k in ("id", "kind", "label", "status", "created", "finished", "error")} | {"url": study_url(r["id"])} for r in rows]

@router.get("/studies", response_class=HTMLResponse, include_in_schema=False)
async def studies_page(request: Request, svc: ServicesDep) -> HTMLResponse:
  studies = await asyncio.to_thread(svc.studies.recent, 50)
  return await page(request, "studies.html", studies=studies, running=svc.studies.running(), kinds=KINDS, defaults=DEFAULT_PRESETS,
                    presets={n: s.label() for n, s in PRESETS.items()}, device=None, ci_width=STUDY_CI_WIDTH, tinygrads=TRACEABLE)

@router.get("/studies/{study_id}", response_class=HTMLResponse, include_in_schema=False)
async def study_page(request: Request, study_id: str, svc: ServicesDep) -> HTMLResponse:
  s = await study_or_404(svc, study_id)
  cases = await asyncio.to_thread(case_views, s["result"]) if s.get("result") else []
  return await page(request, "study.html", s=s, cases=cases)

@router.get("/studies/{study_id}/export.html", include_in_schema=False)
async def study_export(study_id: str, svc: ServicesDep, download: bool = True) -> Response:
  """The finished study as ONE self-contained HTML file (inline CSS and SVG, no script): opens offline."""
  s = await study_or_404(svc, study_id)
  if s["status"] != "done": raise HTTPException(409, f"study {study_id} is {s['status']}: only a finished study can be exported")
  html = await asyncio.to_thread(render_export, s, f"the Kernel Explorer server on {socket.gethostname()}")
  return Response(html, media_type="text/html; charset=utf-8", headers=attachment(f"kernel-explorer-study-{study_id}.html", download))
