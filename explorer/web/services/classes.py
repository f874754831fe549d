"""Live classes: a teacher's browser (the presenter, holding the class's key) drives its students' browsers. What the presenter shows
now is the class's state: the page's address (a page's state lives in its URL: the tour step, the kernel, the target tab, the pass and
match) and a small view beside it (what the URL does not hold: a graph's selected node, pan and zoom, a pinned source line, the
opened panels; static/live_class.js names them). Each move
is stored (explorer.store.classes), so a student who reconnects, or every student after a server restart, lands on it; each student
follows over one event stream and says whether it follows or explores (and on which page), so the presenter sees the counts. The
presenter may ask the class a question (a number, a choice, a node of a graph); each student answers once (a new answer replaces
its last), the distribution fills in on every screen, and the presenter reveals the answer. Only the key moves the class, asks or
reveals; a student sends nothing but its presence and its answers. Bounded: a class holds at most max_students streams, at most
max_classes are live at once, and a class nobody moved for idle_s ends."""
from __future__ import annotations
import asyncio
import collections
import hashlib
import hmac
import math
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from explorer.store import Store
from explorer.store.classes import ClassRow
from explorer.web.services.lifecycle import Busy

MAX_URL = 2000  # characters of a page's address a state may hold
MAX_VIEW_KEYS, MAX_VIEW_KEY, MAX_VIEW_TEXT = 16, 40, 200  # the view beside it: a few names, each a number, a flag or a short text
MAX_PAGE = 200  # characters of a student's page, as its presence names it
STUDENT_RE = re.compile(r"[A-Za-z0-9_-]{8,32}")  # a student's id: made by its browser, one per tab
PAGES_SHOWN = 5  # the pages most students explore, as the presenter's counts name them
KINDS = ("number", "choice", "node")  # what a question asks for: a number typed, one of its choices, a node of the page's graph clicked
QUESTION_ID_RE = re.compile(r"[a-z0-9-]{1,40}")
NODE_RE = re.compile(r"[0-9]{1,9}")  # a node as a graph names it: its trace number
MAX_PROMPT, MAX_CHOICES, MAX_CHOICE = 300, 8, 80
ANSWERS_SHOWN = 20  # the most given answers a distribution lists

class ClassNotFound(LookupError):
  """No class of this id, or it ended."""

class NotPresenter(PermissionError):
  """The request does not hold the class's presenter key: only the presenter moves or ends it."""

class BadMove(ValueError):
  """A state that is not one a page can be in: an address off this server, or a view that is not a small JSON object."""

class NoOpenQuestion(LookupError):
  """An answer to a question the class is not asking now (another one replaced it, or its answer was revealed)."""

class ClassFull(Busy):
  """The class has max_students students following, or max_classes classes are live."""

def key_hash(key: str) -> str: return hashlib.sha256(key.encode()).hexdigest()

def checked_state(state: Any) -> dict[str, Any]:
  """A presenter's state as data: {url: a path on this server (with its query), view: a small JSON object}; BadMove otherwise."""
  if not isinstance(state, dict) or set(state) - {"url", "view"}: raise BadMove("a state is {url, view}")
  url, view = state.get("url"), state.get("view") or {}
  if not isinstance(url, str) or not url.startswith("/") or url.startswith("//") or len(url) > MAX_URL or any(ord(c) < 32 for c in url):
    raise BadMove(f"url must be a path on this server, at most {MAX_URL} characters (/t/ID/tour?step=...)")
  if not isinstance(view, dict) or len(view) > MAX_VIEW_KEYS or not all(isinstance(k, str) and 0 < len(k) <= MAX_VIEW_KEY and view_value(v)
                                                                       for k, v in view.items()):
    raise BadMove(f"view must be a JSON object of at most {MAX_VIEW_KEYS} names of 1-{MAX_VIEW_KEY} characters, each a number, true, "
                  f"false, null or text of at most {MAX_VIEW_TEXT} characters")
  return {"url": url, "view": view}

def view_value(v: Any) -> bool:
  if isinstance(v, str): return len(v) <= MAX_VIEW_TEXT
  return v is None or isinstance(v, bool) or (isinstance(v, int | float) and math.isfinite(v))

def checked_question(q: Any) -> dict[str, Any]:
  """A question as data: {id, kind, prompt, choices (a choice's)}; BadMove otherwise. Its answer is not in it: the presenter reveals it."""
  if not isinstance(q, dict) or set(q) - {"id", "kind", "prompt", "choices"}: raise BadMove("a question is {id, kind, prompt, choices}")
  qid, kind, prompt, choices = q.get("id"), q.get("kind"), q.get("prompt"), q.get("choices") or []
  if not isinstance(qid, str) or not QUESTION_ID_RE.fullmatch(qid): raise BadMove("a question's id is 1-40 of a-z, 0-9 and -")
  if kind not in KINDS: raise BadMove(f"a question's kind is one of {', '.join(KINDS)}")
  if not isinstance(prompt, str) or not 0 < len(prompt) <= MAX_PROMPT: raise BadMove(f"a question's prompt is 1-{MAX_PROMPT} characters")
  if not isinstance(choices, list) or len(choices) > MAX_CHOICES or not all(isinstance(c, str) and 0 < len(c) <= MAX_CHOICE for c in choices) \
     or len(set(choices)) != len(choices) or (kind == "choice") != bool(choices) or (kind == "choice" and len(choices) < 2):
    raise BadMove(f"a choice question has 2-{MAX_CHOICES} different choices of at most {MAX_CHOICE} characters; other kinds none")
  return {"id": qid, "kind": kind, "prompt": prompt, "choices": choices}

def checked_answer(question: dict[str, Any], answer: Any) -> str:
  """An answer as the question takes it, in one spelling (a number: 12, not 12.0 or 1.2e1); BadMove where it is none of its kind."""
  if not isinstance(answer, str) or not 0 < len(answer) <= 32: raise BadMove("an answer is 1-32 characters")
  if question["kind"] == "choice":
    if answer not in question["choices"]: raise BadMove(f"the answer is one of: {', '.join(question['choices'])}")
    return answer
  if question["kind"] == "node":
    if not NODE_RE.fullmatch(answer): raise BadMove("the answer is a node of the graph (its number)")
    return str(int(answer))
  try: x = float(answer)
  except ValueError: raise BadMove("the answer is a number") from None
  if not math.isfinite(x): raise BadMove("the answer is a finite number")
  return str(int(x)) if x == int(x) and abs(x) < 1e15 else f"{x:g}"

def restored_poll(poll: Any) -> dict[str, Any] | None:
  """A stored poll read back as data (none where it is not one: a damaged row asks nothing)."""
  try:
    question = checked_question(poll["question"])
    answers = {s: checked_answer(question, a) for s, a in poll["answers"].items() if STUDENT_RE.fullmatch(s)}
    revealed = None if poll["revealed"] is None else checked_answer(question, poll["revealed"])
  except (BadMove, KeyError, TypeError, AttributeError): return None
  return {"question": question, "answers": answers, "revealed": revealed}

@dataclass
class Student:
  streams: int = 0  # a tab duplicated keeps its id: each of its streams counts, the student once
  following: bool = True
  page: str = ""

@dataclass
class LiveClass:
  """A class in memory while it is live: its stored row's state, and who follows it now (its students' streams)."""
  id: str
  key_hash: str
  state: dict[str, Any]
  seq: int
  updated: float
  poll: dict[str, Any] | None = None  # {question, answers: {student: answer}, revealed}: what the class is asked now
  ended: bool = False
  students: dict[str, Student] = field(default_factory=dict)
  changed: asyncio.Event = field(default_factory=asyncio.Event)  # set (and replaced) at each move, presence change and end

  def notify(self) -> None:
    fired, self.changed = self.changed, asyncio.Event()
    fired.set()

  def counts(self) -> dict[str, Any]:
    """How many follow and how many explore, and the pages most of those exploring are on."""
    exploring = [s.page for s in self.students.values() if not s.following]
    pages = collections.Counter(exploring).most_common(PAGES_SHOWN)
    return {"following": len(self.students) - len(exploring), "exploring": len(exploring), "pages": [{"page": p, "students": n} for p, n in pages]}

  def asked(self) -> dict[str, Any] | None:
    """The question with its answers' distribution (how many students gave each, most first), never who gave which."""
    if (p := self.poll) is None: return None
    given = collections.Counter(p["answers"].values()).most_common(ANSWERS_SHOWN)
    return {"question": p["question"], "answers": [{"answer": a, "students": n} for a, n in given], "total": len(p["answers"]),
            "revealed": p["revealed"]}

  def view(self) -> dict[str, Any]:
    return {"id": self.id, "state": self.state, "seq": self.seq, "ended": self.ended, "counts": self.counts(), "poll": self.asked()}

class ClassService:
  def __init__(self, store: Store, max_students: int = 300, max_classes: int = 16, idle_s: float = 4 * 3600.0):
    self.store, self.max_students, self.max_classes, self.idle_s = store, max_students, max_classes, idle_s
    self.live: dict[str, LiveClass] = {}

  def create(self, url: str) -> tuple[LiveClass, str]:
    """A class starting on the page at `url`, and its presenter key (said once: the store keeps its hash)."""
    state = checked_state({"url": url, "view": {}})
    if len([c for c in self.live.values() if not self._idle(c)]) >= self.max_classes:
      raise ClassFull(f"{self.max_classes} classes are live, the most this server holds; end one or try later", retry_after_s=60)
    key = secrets.token_urlsafe(24)
    row = self.store.add_class(secrets.token_urlsafe(6), key_hash(key), state)
    return self._held(row), key

  def get(self, class_id: str) -> LiveClass:
    """The live class (read from the store on first use: a server restarted holds what was stored); ClassNotFound where none is live."""
    live = self.live.get(class_id)
    if live is None and (row := self.store.class_row(class_id)) is not None and row.ended is None: live = self._held(row)
    if live is None or live.ended: raise ClassNotFound(f"no live class {class_id[:40]!r}: it ended, or never started")
    if self._idle(live):
      self._end(live)
      raise ClassNotFound(f"class {class_id} ended: nobody moved it for {self.idle_s / 3600:g} h")
    return live

  def move(self, class_id: str, key: str | None, state: Any) -> LiveClass:
    """The presenter shows `state` now: stored, then told to every student."""
    live = self._presented(class_id, key)
    live.state, live.seq, live.updated = checked_state(state), live.seq + 1, time.time()
    self.store.put_class_state(live.id, live.state, live.seq)
    live.notify()
    return live

  def end(self, class_id: str, key: str | None) -> None:
    self._end(self._presented(class_id, key))

  def ask(self, class_id: str, key: str | None, question: Any) -> LiveClass:
    """The presenter asks the class `question` (the one asked before, and its answers, go)."""
    live = self._presented(class_id, key)
    live.poll = {"question": checked_question(question), "answers": {}, "revealed": None}
    return self._polled(live)

  def answer(self, class_id: str, student: str, question_id: str, answer: Any) -> None:
    """A student's answer to the open question (its last one replaced); NoOpenQuestion once revealed or for another question."""
    live = self.get(class_id)
    if not STUDENT_RE.fullmatch(student): raise BadMove("student must be 8-32 letters, digits, - or _ (its browser makes one)")
    if (p := live.poll) is None or p["question"]["id"] != question_id or p["revealed"] is not None:
      raise NoOpenQuestion(f"class {class_id} is not asking {question_id[:40]!r} now")
    if student not in live.students:  # answers come from the class's students: at most max_students of them
      raise NoOpenQuestion(f"student {student} does not follow class {class_id}: its event stream is not open")
    p["answers"][student] = checked_answer(p["question"], answer)
    self._polled(live)

  def reveal(self, class_id: str, key: str | None, answer: Any) -> LiveClass:
    """The presenter reveals the answer: every screen shows it beside the class's."""
    live = self._presented(class_id, key)
    if (p := live.poll) is None: raise NoOpenQuestion(f"class {class_id} asks nothing to reveal")
    p["revealed"] = checked_answer(p["question"], answer)
    return self._polled(live)

  def _polled(self, live: LiveClass) -> LiveClass:
    self.store.put_class_poll(live.id, live.poll)
    live.notify()
    return live

  def join(self, class_id: str, student: str, following: bool = True, page: str = "") -> LiveClass:
    """A student's stream opened, following the class or exploring on `page`; ClassFull past max_students."""
    live = self.get(class_id)
    if not STUDENT_RE.fullmatch(student): raise BadMove("student must be 8-32 letters, digits, - or _ (its browser makes one)")
    if student not in live.students and len(live.students) >= self.max_students:
      raise ClassFull(f"class {class_id} has {self.max_students} students, the most it holds", retry_after_s=30)
    s = live.students.setdefault(student, Student())
    s.streams, s.following, s.page = s.streams + 1, following, page[:MAX_PAGE]
    live.notify()
    return live

  def leave(self, live: LiveClass, student: str) -> None:
    if (s := live.students.get(student)) is None: return
    s.streams -= 1
    if s.streams <= 0: del live.students[student]
    live.notify()

  def presence(self, class_id: str, student: str, following: bool, page: str) -> None:
    """A student follows the class, or explores on `page` (a student without an open stream is not counted)."""
    live = self.get(class_id)
    if (s := live.students.get(student)) is None: return
    s.following, s.page = bool(following), page[:MAX_PAGE]
    live.notify()

  def _presented(self, class_id: str, key: str | None) -> LiveClass:
    live = self.get(class_id)
    if key is None or not hmac.compare_digest(key_hash(key), live.key_hash):
      raise NotPresenter("only the class's presenter moves it: its browser holds the key (X-Presenter-Key)")
    return live

  def _held(self, row: ClassRow) -> LiveClass:
    live = self.live[row.id] = LiveClass(row.id, row.key_hash, row.state, row.seq, row.updated, restored_poll(row.poll))
    return live

  def _idle(self, live: LiveClass) -> bool: return time.time() - live.updated > self.idle_s

  def _end(self, live: LiveClass) -> None:
    live.ended = True
    self.store.end_class(live.id)
    self.live.pop(live.id, None)
    live.notify()
