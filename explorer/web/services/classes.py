"""Live classes: a teacher's browser (the presenter, holding the class's key) drives its students' browsers. What the presenter shows
now is the class's state: the page's address (a page's state lives in its URL: the tour step, the kernel, the target tab, the pass and
match, the selected node) and a small view beside it (what the URL does not hold: a graph's pan and zoom, an opened panel). Each move
is stored (explorer.store.classes), so a student who reconnects, or every student after a server restart, lands on it; each student
follows over one event stream and says whether it follows or explores (and on which page), so the presenter sees the counts. Only
the key moves the class; a student sends nothing but its presence. Bounded: a class holds at most max_students streams, at most
max_classes are live at once, and a class nobody moved for idle_s ends."""
from __future__ import annotations
import asyncio
import collections
import hashlib
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from explorer.store import Store
from explorer.store.classes import ClassRow
from explorer.web.services.lifecycle import Busy

MAX_URL = 2000  # characters of a page's address a state may hold
MAX_VIEW_BYTES = 4096  # the view beside it, as JSON
MAX_PAGE = 200  # characters of a student's page, as its presence names it
STUDENT_RE = re.compile(r"[A-Za-z0-9_-]{8,32}")  # a student's id: made by its browser, one per tab
PAGES_SHOWN = 5  # the pages most students explore, as the presenter's counts name them

class ClassNotFound(LookupError):
  """No class of this id, or it ended."""

class NotPresenter(PermissionError):
  """The request does not hold the class's presenter key: only the presenter moves or ends it."""

class BadMove(ValueError):
  """A state that is not one a page can be in: an address off this server, or a view that is not a small JSON object."""

class ClassFull(Busy):
  """The class has max_students students following, or max_classes classes are live."""

def key_hash(key: str) -> str: return hashlib.sha256(key.encode()).hexdigest()

def checked_state(state: Any) -> dict[str, Any]:
  """A presenter's state as data: {url: a path on this server (with its query), view: a small JSON object}; BadMove otherwise."""
  if not isinstance(state, dict) or set(state) - {"url", "view"}: raise BadMove("a state is {url, view}")
  url, view = state.get("url"), state.get("view") or {}
  if not isinstance(url, str) or not url.startswith("/") or url.startswith("//") or len(url) > MAX_URL or any(ord(c) < 32 for c in url):
    raise BadMove(f"url must be a path on this server, at most {MAX_URL} characters (/t/ID/tour?step=...)")
  if not isinstance(view, dict) or len(json.dumps(view)) > MAX_VIEW_BYTES:
    raise BadMove(f"view must be a JSON object of at most {MAX_VIEW_BYTES} bytes")
  return {"url": url, "view": view}

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

  def view(self) -> dict[str, Any]:
    return {"id": self.id, "state": self.state, "seq": self.seq, "ended": self.ended, "counts": self.counts()}

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

  def join(self, class_id: str, student: str) -> LiveClass:
    """A student's stream opened (following); ClassFull past max_students."""
    live = self.get(class_id)
    if not STUDENT_RE.fullmatch(student): raise BadMove("student must be 8-32 letters, digits, - or _ (its browser makes one)")
    if student not in live.students and len(live.students) >= self.max_students:
      raise ClassFull(f"class {class_id} has {self.max_students} students, the most it holds", retry_after_s=30)
    live.students.setdefault(student, Student()).streams += 1
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
    live = self.live[row.id] = LiveClass(row.id, row.key_hash, row.state, row.seq, row.updated)
    return live

  def _idle(self, live: LiveClass) -> bool: return time.time() - live.updated > self.idle_s

  def _end(self, live: LiveClass) -> None:
    live.ended = True
    self.store.end_class(live.id)
    self.live.pop(live.id, None)
    live.notify()
