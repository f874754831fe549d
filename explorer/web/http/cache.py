"""Finished responses of stored traces, kept in memory: a stored trace never changes, so its pages and JSON are rendered (and
gzipped) once and then served as bytes. Pure ASGI, between the request limits (outside) and GZip (inside).

Only the views of a trace (or of two: a diff, a built-in tour) that depend on those traces alone are kept (kept_traces); anything
dynamic on those pages (notes, the compare-with menu, progress) is fetched by their scripts from URLs that are not kept (a tour step
shows its notes and the hand schedules pinned to the tour in its page: a note or a pin is a request that names the trace; it quotes
the pair's interleaved timing: storing one drops the pair's entries), and a response that says Cache-Control: no-store (a kernel page
while a target is being computed for it, a tour's step that times the pair) is never kept. A view is kept only when its traces
were stored before the request began, so a progress page that stands in for a running trace is never kept. The key is the path and
the query parameters its route reads (FastAPI's declaration of them, learnt from the route that answered the first request of a path's
shape): `?_=N` or any other parameter the page ignores serves the same entry. Concurrent requests for one key render it once (ten
export loops of a big program cost one export), and one client renders at most RENDERS_PER_CLIENT views at once (its others wait
their turn here, costing nothing: ten searches of a big program from one client cannot crowd the event loop every other client
needs). A state-changing request that names a trace (a note, a delete, a diff's measurement) drops that trace's entries first, and so
does anything the server stores into a trace (explorer.web.app's forget)."""
from __future__ import annotations
import asyncio
import collections
import re
import urllib.parse
from collections.abc import Callable
from typing import Any
from explorer.web.http.limits import UNSAFE_METHODS, Receive, Scope, Send

Message = dict[str, Any]  # an ASGI message
RENDERS_PER_CLIENT = 2
Key = tuple[str, str, bool]

ID = r"[0-9a-f]{16}"
CACHEABLE = re.compile(rf"/t/(?P<a>{ID})(/bufferize|/graph/tensor|/rangeify|/source|/export\.json|/export\.html|/k/\d+|/tour)?"
                       rf"|/api/traces/(?P<b>{ID})(/raw|/kernels(/\d+)?|/bufferize|/rangeify|/repro\.py|/graphs(/.+)?)?"
                       rf"|(/api)?/diff/(?P<c>{ID})/(?P<d>{ID})(/graphs)?")
NAMES_TRACE = re.compile(rf"/(?:t|traces|api/traces)/({ID})(?:/|$)|(?:/api)?/diff/({ID})/({ID})(?:/|$)")
PAIR_TOUR = re.compile(r"/tours/[a-z0-9_-]{1,40}")  # a built-in tour of two traces, named by its query's a and b

def kept_traces(path: str, query: bytes) -> tuple[str, ...]:
  """The traces a view that may be kept depends on (one, or two), or () where it is not such a view."""
  if PAIR_TOUR.fullmatch(path):
    asked = dict(urllib.parse.parse_qsl(query.decode("latin-1")))
    pair = (asked.get("a", ""), asked.get("b", ""))
    return pair if all(re.fullmatch(ID, t) for t in pair) else ()
  return traces_named(path, CACHEABLE) if CACHEABLE.fullmatch(path) else ()

def traces_named(path: str, pattern: re.Pattern[str] = NAMES_TRACE) -> tuple[str, ...]:
  """The trace ids a path names (one, or a diff's two)."""
  m = pattern.match(path)
  return tuple(dict.fromkeys(g for g in m.groups() if g is not None and re.fullmatch(ID, g))) if m else ()

def shape(path: str) -> str:
  """A path with its trace ids and numbers left out: every path of one shape is answered by one route."""
  return re.sub(r"/\d+(?=/|$)", "/{n}", re.sub(ID, "{id}", path))

def query_names(dependant: Any) -> frozenset[str]:
  """The query parameters a FastAPI route (its dependant, and those it depends on) reads."""
  return frozenset(p.alias for p in dependant.query_params).union(*(query_names(d) for d in dependant.dependencies))

class ResponseCache:
  def __init__(self, app: Any, stored_at: Callable[[str], float | None], state: Any = None, max_bytes: int = 64 << 20,
               max_entry_bytes: int = 8 << 20):
    """stored_at: when a trace was stored, None where it is not (explorer.store's): an entry serves while its traces are the rows it
    was rendered from (another process may store a trace again under its id: a capture from a notebook)."""
    self.app, self.stored_at, self.max_bytes, self.max_entry_bytes = app, stored_at, max_bytes, max_entry_bytes
    self.entries: collections.OrderedDict[Key, tuple[tuple[str, ...], list[Message], list[float | None]]] = collections.OrderedDict()
    self.size = 0
    self.hits = self.misses = 0
    self.generation: dict[str, int] = {}  # per trace, bumped by forget
    self._params: dict[str, frozenset[str]] = {}  # a path's shape -> the query parameters its route reads
    self._rendering: dict[Key, asyncio.Event] = {}  # keys being rendered now: the same request meanwhile waits for that one
    self._renders: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = {}  # each client's views being rendered
    if state is not None: state.response_cache = self  # the app's handle on it (tests read its counters)

  def forget(self, trace_id: str) -> None:
    """Drop the trace's entries; a response being rendered from it meanwhile is not kept either (its generation is past)."""
    self.generation[trace_id] = self.generation.get(trace_id, 0) + 1
    for key in [k for k, (ids, _, _) in self.entries.items() if trace_id in ids]: self._drop(key)

  def _drop(self, key: Key) -> None:
    _, msgs, _ = self.entries.pop(key)
    self.size -= sum(len(m.get("body", b"")) for m in msgs)

  def _render_slot(self, scope: Scope) -> asyncio.Semaphore:
    """This client's turn to render a view (RENDERS_PER_CLIENT at once)."""
    client, loop = (scope.get("client") or ("", 0))[0], asyncio.get_running_loop()
    if (got := self._renders.get(client)) is None or got[0] is not loop:
      if len(self._renders) > 4096: self._renders.clear()  # a render under way keeps its own slot
      got = self._renders[client] = (loop, asyncio.Semaphore(RENDERS_PER_CLIENT))
    return got[1]

  def query_key(self, scope: Scope) -> str | None:
    """The query parameters the path's route reads, in order; None until a request of the path's shape has shown its route."""
    if (names := self._params.get(shape(scope["path"]))) is None: return None
    pairs = urllib.parse.parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
    return urllib.parse.urlencode(sorted((k, v) for k, v in pairs if k in names))

  def learn(self, scope: Scope) -> str | None:
    """After a request was answered: its route's query parameters, kept for its path's shape; its key's query, or None."""
    if (dependant := getattr(scope.get("route"), "dependant", None)) is None: return None
    self._params[shape(scope["path"])] = query_names(dependant)
    return self.query_key(scope)

  async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
      await self.app(scope, receive, send)
      return
    path = scope["path"]
    if scope["method"] in UNSAFE_METHODS:
      for trace_id in traces_named(path): self.forget(trace_id)
    if scope["method"] != "GET" or not (ids := kept_traces(path, scope["query_string"])):
      await self.app(scope, receive, send)
      return
    gzip = any(k == b"accept-encoding" and b"gzip" in v for k, v in scope["headers"])
    query = self.query_key(scope)
    if query is not None and (rendering := self._rendering.get((path, query, gzip))) is not None: await rendering.wait()
    stored = [self.stored_at(t) for t in ids]
    if query is not None and (hit := self.entries.get(key := (path, query, gzip))) is not None:
      if hit[2] == stored:
        self.entries.move_to_end(key)
        self.hits += 1
        for msg in hit[1]: await send(msg)
        return
      self._drop(key)  # its trace was stored again since
    self.misses += 1
    if any(t is None for t in stored):  # a progress page stands in: never kept
      await self.app(scope, receive, send)
      return
    msgs: list[Message] = []
    generations = [self.generation.get(t, 0) for t in ids]
    kept = [0]  # the body's bytes so far; past max_entry_bytes (a streamed export) nothing more is held, nor kept
    async def keep(msg: Message) -> None:
      if kept[0] <= self.max_entry_bytes:
        kept[0] += len(msg.get("body", b""))
        msgs.append(msg)
      await send(msg)
    rendering_key = (path, query, gzip) if query is not None else None
    done = self._rendering.setdefault(rendering_key, asyncio.Event()) if rendering_key is not None else None
    try:
      if "/graphs" in path: await self.app(scope, receive, keep)  # a graph waits on a graph worker, not on this process: no turn taken
      else:
        async with self._render_slot(scope): await self.app(scope, receive, keep)
    finally:
      if rendering_key is not None and done is not None and self._rendering.get(rendering_key) is done:
        done.set()
        del self._rendering[rendering_key]
    if query is None and (query := self.learn(scope)) is None: return
    key = (path, query, gzip)
    body = kept[0]
    no_store = any(k.lower() == b"cache-control" and b"no-store" in v for k, v in msgs[0].get("headers", [])) if msgs else True
    fresh = [self.generation.get(t, 0) for t in ids] == generations and [self.stored_at(t) for t in ids] == stored
    if msgs and msgs[0].get("status") == 200 and fresh and not no_store and not msgs[-1].get("more_body") and body <= self.max_entry_bytes:
      self.entries[key] = (ids, msgs, stored)
      self.size += body
      while self.size > self.max_bytes and self.entries: self._drop(next(iter(self.entries)))
