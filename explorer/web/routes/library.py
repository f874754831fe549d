"""The library of stored traces: /traces (search by label text, preset and variant fields, paginated; delete with a confirmation),
its JSON twin /api/library, DELETE /api/traces/{id}, and each trace's exports: /t/{id}/export.json and /t/{id}/export.html
(one self-contained file, explorer.present.export)."""
from __future__ import annotations
import asyncio
import math
import socket
import zlib
from collections.abc import Iterator
from typing import Any
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from pydantic import BaseModel
from explorer.analysis import roofline
from explorer.present import export
from explorer.present.graph_refs import GraphNotFound
from explorer.present.repro import repro_script
from explorer.schema import TraceRecord
from explorer.store import VARIANT_FILTERS
from explorer.web.http.deps import LightTrace, ServicesDep, StoredTrace, templates_of
from explorer.web.http.models import NOT_FOUND, documented
from explorer.web.http.templates import GZIPPED, accepts_gzip, gzipped_if
from explorer.web.http.work import Work
from explorer.web.routes.common import attachment, page as render
from explorer.web.services.graphs import GraphBusy, GraphUnavailable
from explorer.web.services.permit import WorkPermit
from explorer.web.services.registry import Services
from explorer.web.urls import library_url, trace_url

router = APIRouter(include_in_schema=False)
api = APIRouter(prefix="/api", tags=["library"])
FILTERS = ("preset", *VARIANT_FILTERS, "device", "status")
PER_PAGE = 25

class LibraryItem(BaseModel):
  id: str
  url: str
  label: str
  preset: str | None = None
  status: str
  created: float
  kernels: int | None = None
  time_s: float | None = None
  algo: str | None = None
  wino_impl: str | None = None
  tile: str | None = None
  staging: str | None = None
  consts: str | None = None
  opt: str | None = None
  targets: list[str] | None = None
  device: str | None = None
  tinygrad: str | None = None
  failures: int = 0

class LibraryPage(BaseModel):
  total: int
  page: int
  pages: int
  per_page: int
  items: list[LibraryItem]
  from_studies: int = 0  # traces made by finished studies left out (the page only; the API lists them)

class Deleted(BaseModel):
  id: str
  deleted: bool

def filters_of(request: Request) -> dict[str, str]:
  return {k: v.strip()[:64] for k in FILTERS if (v := request.query_params.get(k)) and v.strip()}

async def search(svc: Services, q: str | None, filters: dict[str, str], at: int, per_page: int, studies: bool = True) -> dict[str, Any]:
  """studies=False: without the traces finished studies made (`from_studies` counts them: their study pages list them)."""
  rows, total = await asyncio.to_thread(svc.store.search, text=q or None, limit=per_page, offset=(at - 1) * per_page, studies=studies, **filters)
  keys = set(LibraryItem.model_fields)
  items = [{k: v for k, v in {**r, "url": trace_url(r["id"])}.items() if k in keys} for r in rows]
  hidden = 0 if studies else len(await asyncio.to_thread(svc.store.study_traces))
  return {"total": total, "page": at, "pages": max(1, math.ceil(total / per_page)), "per_page": per_page, "items": items, "from_studies": hidden}

@api.get("/library", response_model=LibraryPage, summary="Stored traces: search and pages",
         responses=documented({422: "a query parameter out of its bounds"}))
async def library_json(request: Request, svc: ServicesDep, q: str | None = Query(None, max_length=200, description="text in the label or id"),
                       preset: str | None = Query(None, max_length=64, description="a preset name, or custom"),
                       algo: str | None = None, wino_impl: str | None = None, tile: str | None = None, staging: str | None = None,
                       consts: str | None = None, opt: str | None = Query(None, description="heuristic, none, beam (any width) or beam:N"),
                       device: str | None = None, status: str | None = None, page: int = Query(1, ge=1, le=100000),
                       per_page: int = Query(PER_PAGE, ge=1, le=200)) -> dict[str, Any]:
  """Newest first. Every filter is an exact match but q (a substring of the label or id) and opt=beam."""
  return await search(svc, q, filters_of(request), page, per_page)

@api.delete("/traces/{trace_id}", response_model=Deleted, summary="Delete a stored trace (with its cached graphs, diffs and annotations)",
            responses=documented({404: "no trace with this id", 409: "the trace is still queued or running"}))
async def delete_trace_json(trace_id: str, svc: ServicesDep) -> dict[str, Any]:
  return await delete(svc, trace_id)

async def delete(svc: Services, trace_id: str) -> dict[str, Any]:
  job = svc.jobs.get(trace_id)
  if job is not None and job.active: raise HTTPException(409, f"trace {trace_id} is still {job.status}")
  gone = await asyncio.to_thread(svc.store.delete_trace, trace_id)
  svc.forget(trace_id)
  if not gone: raise HTTPException(404, f"no trace {trace_id}")
  svc.jobs.forget(trace_id)  # the finished job's status goes with its trace (GET .../status: 404)
  return {"id": trace_id, "deleted": True}

# ***** pages *****

def page_links(request: Request, page: int, pages: int) -> dict[str, str | None]:
  def at(n: int) -> str: return str(request.url.include_query_params(page=n).remove_query_params("deleted"))
  return {"prev": at(page - 1) if page > 1 else None, "next": at(page + 1) if page < pages else None}

@router.get("/traces", response_class=HTMLResponse)
async def library_page(request: Request, svc: ServicesDep, q: str | None = Query(None, max_length=200), page: int = Query(1, ge=1, le=100000),
                       deleted: str | None = Query(None, max_length=64), studies: bool = False) -> HTMLResponse:
  """studies: also the traces studies made (by default each study's page holds its own)."""
  filters = filters_of(request)
  res = await search(svc, q, filters, page, PER_PAGE, studies)
  facets = await asyncio.to_thread(svc.store.facets)
  return await render(request, "library.html", res=res, q=q or "", filters=filters, facets=facets, names=FILTERS,
                      links=page_links(request, res["page"], res["pages"]), deleted=deleted, studies=studies)

@router.get("/traces/{trace_id}/delete", response_class=HTMLResponse)
async def confirm_delete(request: Request, trace_id: str, trace: StoredTrace, svc: ServicesDep) -> HTMLResponse:
  notes = await asyncio.to_thread(export.annotations_of, svc.store, trace_id)
  return await render(request, "library_delete.html", trace=trace, trace_id=trace_id, n_notes=len(notes))

@router.post("/traces/{trace_id}/delete")
async def delete_page(request: Request, trace_id: str, svc: ServicesDep) -> Response:
  form = (await request.body()).decode(errors="replace")
  if "confirm=yes" not in form.split("&"): raise HTTPException(422, "confirm the deletion: the form sends confirm=yes")
  await delete(svc, trace_id)
  return RedirectResponse(library_url(deleted=trace_id), status_code=303)

# ***** exports *****

@router.get("/t/{trace_id}/export.json")
async def export_json(request: Request, trace_id: str, trace: LightTrace, svc: ServicesDep, download: bool = True) -> Response:
  """The trace as stored with its annotations, streamed: its kernels read whole a chunk at a time from the store, encoded and gzipped
  (where the client takes gzip) off the event loop, one piece at a time (a 10,000-kernel program's was 2 GB of server memory whole)."""
  notes = await asyncio.to_thread(export.annotations_of, svc.store, trace_id)
  pieces = export.export_json_pieces(trace, svc.store.whole_kernels(trace_id), notes)
  headers = attachment(f"kernel-explorer-{trace_id}.json", download)
  if not accepts_gzip(request): return StreamingResponse(pieces, media_type="application/json", headers=headers)
  return StreamingResponse(gzip_stream(pieces), media_type="application/json", headers={**headers, **GZIPPED})

def gzip_stream(pieces: Iterator[bytes]) -> Iterator[bytes]:
  """The pieces as one gzip stream (level 1: a big program's export is hundreds of MB of JSON, compressed as fast as it is made)."""
  z = zlib.compressobj(1, zlib.DEFLATED, 31)
  for piece in pieces:
    if out := z.compress(piece): yield out
  yield z.flush()

BIG_BODY = 1 << 20  # an export past this is gzipped off the event loop (GZipMiddleware would compress it on the loop: seconds for 30 MB)

async def compressed(request: Request, body: str, media_type: str, headers: dict[str, str]) -> Response:
  """The body, gzipped off the event loop where it is big and the client takes gzip (the middleware passes an encoded body on)."""
  data, encoded = await templates_of(request).off_loop(gzipped_if, body.encode(), accepts_gzip(request), BIG_BODY)
  return Response(data, media_type=media_type, headers={**headers, **encoded})

async def graph_block(svc: Services, trace_id: str, trace: TraceRecord, ref: str, permit: WorkPermit) -> dict[str, Any]:
  """One export graph through the server's GraphService: its cache, its node limit, its layout."""
  try:
    view = await svc.graphs.view(trace_id, trace, ref, permit=permit)
    if view.get("partial"):  # over the node limit: the file draws it whole, as the page does
      whole = await svc.graphs.view(trace_id, trace, ref, permit=permit, whole=True)
      return dict(export.whole_block(ref, whole["title"], whole, whole.get("legend") or []))
    svg = await svc.graphs.svg(trace_id, trace, ref, False, trace_url(trace_id), permit=permit)
  except (GraphNotFound, GraphUnavailable, GraphBusy, KeyError, TypeError) as e:  # an export never fails over one graph (a failed trace lacks some)
    return {"ref": ref, "title": ref, "svg": None, "notes": [], "error": str(e), "shown_nodes": 0, "total_nodes": 0}
  return {"ref": ref, "title": view["title"], "svg": svg, "notes": view.get("notes", []), "error": None, "shown_nodes": view["shown_nodes"],
          "total_nodes": view["total_nodes"], "legend": view.get("legend") or [], "rejected": len(view.get("violations") or [])}

@api.get("/traces/{trace_id}/repro.py", tags=["traces"], response_class=Response,
            summary="A standalone Python script that reproduces the trace with tinygrad alone (DEBUG=2 prints each kernel)",
            responses={200: {"content": {"text/x-python": {}}}, **documented(NOT_FOUND)})
async def repro(trace_id: str, trace: StoredTrace) -> Response:
  return Response(repro_script(trace, trace_id), media_type="text/x-python; charset=utf-8", headers=attachment(f"repro-{trace_id}.py", True))

@router.get("/t/{trace_id}/export.html")
async def export_html(request: Request, trace_id: str, trace: LightTrace, svc: ServicesDep, work: Work, download: bool = True) -> Response:
  """The trace as ONE self-contained HTML file: inline CSS, JS and SVG, no reference to this server, opens offline. Read light, with
  the kernels that get a section (explorer.present.export.sections_of: a big program's distinct ones, at most MAX_SECTIONS) whole."""
  blocks: dict[str, Any] = {}
  permit = work.permit()
  for ref in export.graph_refs(trace): blocks[ref] = await graph_block(svc, trace_id, trace, ref, permit)
  notes = await asyncio.to_thread(export.annotations_of, svc.store, trace_id)
  roof = await asyncio.to_thread(roofline.export_block, trace)
  sections = await asyncio.to_thread(lambda: [svc.traces.kernel(trace_id, trace, i) for i in export.sections_of(trace)[0]])
  html = await templates_of(request).off_loop(export.render_html, trace, trace_id, blocks, notes,
                                              f"the Kernel Explorer server on {socket.gethostname()}", roof, sections)
  return await compressed(request, html, "text/html; charset=utf-8", attachment(f"kernel-explorer-{trace_id}.html", download))
