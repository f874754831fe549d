"""Live classes: a teacher starts one from any page (POST /api/classes: its id, join URL and presenter key), its students open the
join URL (/c/{id}) and follow over an event stream (GET /api/classes/{id}/events); the presenter's moves (PUT .../state, with the
key) reach every student's browser, which says whether it follows or explores (POST .../presence). explorer.web.services.classes
keeps the classes; static/live_class.js is both sides in the browser."""
from __future__ import annotations
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import HTMLResponse
from sse_starlette import EventSourceResponse, ServerSentEvent
from explorer.web.http.deps import ServicesDep
from explorer.web.http.limits import OWN_CAPS_TAG
from explorer.web.http.models import ClassAnswer, ClassQuestion, ClassReveal, ClassStart, ClassStarted, ClassState, ClassView, Presence, documented
from explorer.web.routes.common import page
from explorer.web.services.classes import LiveClass
from explorer.web.urls import class_url

api = APIRouter(prefix="/api", tags=["classes"])
router = APIRouter()
NO_CLASS = {404: "no live class with this id (it ended, or never started)"}
PresenterKey = Annotated[str | None, Header(alias="X-Presenter-Key", max_length=64)]  # what moves a class: its browser keeps it
KEY = "only the class's presenter moves or ends it: X-Presenter-Key is missing or not the class's"

def class_view(live: LiveClass) -> dict[str, Any]: return {**live.view(), "join_url": class_url(live.id)}

@api.post("/classes", response_model=ClassStarted, status_code=201, summary="Start a live class on a page",
          responses=documented({422: "url is not a path on this server", 503: "max_classes classes are live (Retry-After)"}))
async def start_class(body: ClassStart, svc: ServicesDep) -> dict[str, Any]:
  """Its presenter key is in this answer only: the teacher's browser keeps it (the pages do, in localStorage)."""
  live, key = svc.classes.create(body.url)
  return {**class_view(live), "presenter_key": key}

@api.get("/classes/{class_id}", response_model=ClassView, summary="A live class: what its presenter shows and who follows",
         responses=documented(NO_CLASS))
async def get_class(class_id: str, svc: ServicesDep) -> dict[str, Any]:
  return class_view(svc.classes.get(class_id))

@api.put("/classes/{class_id}/state", response_model=ClassView, summary="Move the class: every student's browser follows",
         responses=documented({**NO_CLASS, 403: KEY, 422: "a state that is not {url, view} with url a path on this server"}))
async def move_class(class_id: str, body: ClassState, svc: ServicesDep, presenter_key: PresenterKey = None) -> dict[str, Any]:
  return class_view(svc.classes.move(class_id, presenter_key, body.model_dump()))

@api.delete("/classes/{class_id}", status_code=204, summary="End the class",
            responses=documented({**NO_CLASS, 403: KEY, 422: "X-Presenter-Key over 64 characters"}))
async def end_class(class_id: str, svc: ServicesDep, presenter_key: PresenterKey = None) -> Response:
  svc.classes.end(class_id, presenter_key)
  return Response(status_code=204)

@api.post("/classes/{class_id}/presence", status_code=204, summary="A student follows, or explores on a page",
          responses=documented({**NO_CLASS, 422: "a malformed presence"}))
async def presence(class_id: str, body: Presence, svc: ServicesDep) -> Response:
  svc.classes.presence(class_id, body.student, body.following, body.page)
  return Response(status_code=204)

@api.put("/classes/{class_id}/question", response_model=ClassView, summary="Ask the class a question (the one before goes)",
         responses=documented({**NO_CLASS, 403: KEY, 422: "a malformed question"}))
async def ask_class(class_id: str, body: ClassQuestion, svc: ServicesDep, presenter_key: PresenterKey = None) -> dict[str, Any]:
  return class_view(svc.classes.ask(class_id, presenter_key, body.model_dump()))

@api.post("/classes/{class_id}/answers", status_code=204, summary="A student answers the question asked",
          responses=documented({**NO_CLASS, 409: "the class is not asking this question now (replaced, or revealed), or the student does not "
                                "follow the class (its event stream is not open)", 422: "an answer that is none of the question's kind"}))
async def answer_class(class_id: str, body: ClassAnswer, svc: ServicesDep) -> Response:
  svc.classes.answer(class_id, body.student, body.question, body.answer)
  return Response(status_code=204)

@api.post("/classes/{class_id}/reveal", response_model=ClassView, summary="Reveal the answer: every screen shows it beside the class's",
          responses=documented({**NO_CLASS, 403: KEY, 409: "the class asks nothing", 422: "an answer that is none of the question's kind"}))
async def reveal_answer(class_id: str, body: ClassReveal, svc: ServicesDep, presenter_key: PresenterKey = None) -> dict[str, Any]:
  return class_view(svc.classes.reveal(class_id, presenter_key, body.answer))

def sse(event: str, data: Any) -> ServerSentEvent: return ServerSentEvent(json.dumps(data), event=event)

@api.get("/classes/{class_id}/events", tags=[OWN_CAPS_TAG], summary="Follow a class: its moves as server-sent events",
         response_class=EventSourceResponse, responses={200: {"content": {"text/event-stream": {}}}, **documented({
           **NO_CLASS, 422: "student is not 8-32 letters, digits, - or _", 503: "the class has class_max_students students (Retry-After)"})})
async def class_events(class_id: str, svc: ServicesDep, student: str = Query(pattern=r"^[A-Za-z0-9_-]{8,32}$"), following: bool = True,
                       page: str = Query("", max_length=200)) -> EventSourceResponse:
  """Events: `state` ({state, seq}: first, then after each move), `counts` (who follows and who explores, as it changes), `poll`
  (the question asked, its answers' distribution, the answer once revealed), `ended` (last). A student's stream counts it in the
  class while open, following or exploring on `page` (its presence says when that changes); a comment every 10 s keeps idle
  connections open."""
  live = svc.classes.join(class_id, student, following, page)
  async def stream() -> AsyncIterator[ServerSentEvent]:
    seq, counts, poll = -1, None, None
    try:
      while True:
        waiter = live.changed
        if live.ended:
          yield sse("ended", {"id": live.id})
          return
        if live.seq != seq:
          seq = live.seq
          yield sse("state", {"state": live.state, "seq": seq})
        if (now := live.counts()) != counts:
          counts = now
          yield sse("counts", now)
        if (asked := live.asked()) != poll:
          poll = asked
          yield sse("poll", asked)
        await waiter.wait()
    finally: svc.classes.leave(live, student)
  return EventSourceResponse(stream(), ping=10, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

@router.get("/c/{class_id}", response_class=HTMLResponse, include_in_schema=False)
async def join_page(request: Request, class_id: str, svc: ServicesDep) -> HTMLResponse:
  """The join URL: the page says what it joins, and its script follows the class from there (to the presenter's page)."""
  live = svc.classes.get(class_id)  # on the loop, as every call of the classes is: they share its events
  return await page(request, "class_join.html", live=class_view(live))
