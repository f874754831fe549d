"""Every error as the client asked for it: the documented JSON body (explorer.web.http.models: ErrorBody, and ValidationErrorBody for
422), or the error page where a browser asks for a page. The services raise their own exceptions and know nothing of HTTP; this is the
one place that says what status each one is:
  Busy (no room for the work now)                  its status (503, or 429 for one client's share) with Retry-After
  GraphNotFound (the reference names no graph)     404
  ClassNotFound (no live class of that id)         404
  NotPresenter (a move without the class's key)    403
  BadMove (a class state no page can be in)        422
  NoOpenQuestion (an answer to what is not asked)  409
  GraphUnavailable, EnrichmentUnavailable, StudyRunning  409: it exists, or could, but not now or not here
  SpecError (a request the server refuses)         422
  the store's disk full (SQLite's SQLITE_FULL)     507: nothing of the request was kept; reads go on
  the store read-only or locked                    503 with Retry-After
  StoreError, any other exception                  500, one line: never a traceback (the log has it)"""
from __future__ import annotations
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from explorer.present.graph_refs import GraphNotFound
from explorer.spec import SpecError
from explorer.store import StoreError
from explorer.text import one_line
from explorer.web.http.templates import Templates
from explorer.web.services.classes import BadMove, ClassNotFound, NoOpenQuestion, NotPresenter
from explorer.web.services.enrichments import EnrichmentUnavailable
from explorer.web.services.graphs import GraphUnavailable
from explorer.web.services.lifecycle import Busy
from explorer.web.services.studies import StudyRunning

STATUS_OF: dict[type[Exception], int] = {GraphNotFound: 404, GraphUnavailable: 409, EnrichmentUnavailable: 409, StudyRunning: 409,
                                         ClassNotFound: 404, NotPresenter: 403, BadMove: 422, NoOpenQuestion: 409}
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

def readable_errors(exc: RequestValidationError) -> str:
  """pydantic's error list as one line: where, then what."""
  parts = []
  for e in exc.errors():
    loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("body", "query", "path"))
    parts.append(f"{loc}: {e.get('msg')}" if loc else str(e.get("msg")))
  return "; ".join(parts) or "invalid request"

def wants_html(request: Request) -> bool:
  """A page's address answers its errors as a page, unless the client asks for JSON and not HTML; the API's, as JSON."""
  if request.url.path.startswith("/api/"): return False
  accept = request.headers.get("accept", "")
  return "text/html" in accept or "application/json" not in accept

def allowed_methods(app: FastAPI, path: str) -> list[str]:
  """The methods some route answers at this path. Starlette's 405 names only the first route whose path matched (GET /api/traces/{id}
  and DELETE /api/traces/{id} are two routes)."""
  def answers(method: str) -> bool:
    scope = {"type": "http", "method": method, "path": path, "root_path": "", "headers": [], "query_string": b""}
    return any(r.matches(dict(scope))[0] == Match.FULL for r in app.router.routes)
  return [m for m in METHODS if answers(m)]

def error_body(exc: StarletteHTTPException) -> dict[str, Any]:
  """{"detail"}, and every 422 also has "errors" (empty: the request was well-formed, the server refuses what it asks)."""
  return {"detail": exc.detail, "errors": []} if exc.status_code == 422 else {"detail": exc.detail}

def as_http(exc: Exception) -> StarletteHTTPException:
  """A service's exception as the HTTP error it is answered with."""
  if isinstance(exc, Busy): return StarletteHTTPException(exc.status, str(exc), headers={"Retry-After": str(exc.retry_after_s)})
  status = next(s for kind, s in STATUS_OF.items() if isinstance(exc, kind))
  return StarletteHTTPException(status, str(exc))

def store_refused(exc: sqlite3.OperationalError) -> StarletteHTTPException:
  """The store refusing a write, as the status that says why: its disk full (507), or read-only or locked (503, try again)."""
  said = one_line(exc)[:200]
  if "full" in said:
    return StarletteHTTPException(507, f"the store's disk is full ({said}): nothing of this request was kept; stored traces still answer")
  if "readonly" in said or "read-only" in said or "locked" in said:
    return as_http(StoreUnwritable(f"the store cannot be written now ({said}); stored traces still answer"))
  return StarletteHTTPException(500, f"the store failed: {said}")

class StoreUnwritable(Busy):
  """The store is read-only or locked by another writer: 503, try again in a minute."""
  retry_after_s = 60

def install_error_handlers(app: FastAPI, templates: Templates) -> None:
  async def page(request: Request, status: int, message: str) -> Response:
    return await templates.render(request, "error.html", {"status": status, "message": message}, status_code=status)
  async def validation(request: Request, exc: RequestValidationError) -> Response:
    if wants_html(request): return await page(request, 422, readable_errors(exc))  # a mistyped page address (/t/x/k/abc)
    # pydantic's type, loc and msg; not ctx and input: they may hold what JSON cannot encode (a non-JSON body arrives as bytes)
    errors = [{k: e[k] for k in ("type", "loc", "msg") if k in e} for e in exc.errors()]
    return JSONResponse({"detail": readable_errors(exc), "errors": errors}, 422)
  async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 405 and "Allow" in headers: headers["Allow"] = ", ".join(allowed_methods(app, request.url.path))
    if wants_html(request):
      resp = await page(request, exc.status_code, str(exc.detail))
      resp.headers.update(headers)
      return resp
    return JSONResponse(error_body(exc), exc.status_code, headers=headers or None)
  async def service_error(request: Request, exc: Exception) -> Response: return await http_error(request, as_http(exc))
  async def refused(request: Request, exc: SpecError) -> Response: return await http_error(request, StarletteHTTPException(422, str(exc)))
  async def failed(request: Request, exc: Exception) -> Response:  # a bug, or the store failing
    return await http_error(request, StarletteHTTPException(500, f"the server failed: {type(exc).__name__}: {one_line(exc)[:300]}"))
  async def store_error(request: Request, exc: StoreError) -> Response: return await http_error(request, StarletteHTTPException(500, str(exc)))
  async def store_write(request: Request, exc: sqlite3.OperationalError) -> Response: return await http_error(request, store_refused(exc))
  handlers: dict[type[Exception], Callable[[Request, Any], Awaitable[Response]]] = {
    Busy: service_error, **dict.fromkeys(STATUS_OF, service_error), SpecError: refused, StoreError: store_error,
    sqlite3.OperationalError: store_write,
    RequestValidationError: validation, StarletteHTTPException: http_error, Exception: failed}
  for kind, handler in handlers.items(): app.add_exception_handler(kind, handler)
  document_errors(app)

def document_errors(app: FastAPI) -> None:
  """The schema lists what each operation declares (explorer.web.http.models.documented): FastAPI's own 422 (HTTPValidationError, a body
  this app never sends) goes, from operations that declare none too (their parameters cannot fail validation: plain strings)."""
  generate = app.openapi
  def openapi() -> dict[str, Any]:
    schema = generate()
    for ops in schema.get("paths", {}).values():
      for op in ops.values():
        body = op.get("responses", {}).get("422", {}).get("content", {}).get("application/json", {}).get("schema", {})
        if body.get("$ref", "").endswith("/HTTPValidationError"): del op["responses"]["422"]
    for name in ("HTTPValidationError", "ValidationError"): schema.get("components", {}).get("schemas", {}).pop(name, None)
    return schema
  app.openapi = openapi  # type: ignore[method-assign]
