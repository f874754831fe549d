"""Finished responses of stored traces, kept in memory: a stored trace never changes, so its pages and JSON are rendered (and
gzipped) once and then served as bytes. Pure ASGI, between the request limits (outside) and GZip (inside).

Only the views of a trace that depend on that trace alone are kept (CACHEABLE); anything dynamic on those pages (notes, the
compare-with menu, progress) is fetched by their scripts from URLs that are not kept, and a response that says Cache-Control: no-store
(a kernel page while a target is being computed for it) is never kept. A view is kept only when its trace was
stored before the request began, so a progress page that stands in for a running trace is never kept. A state-changing request
that names a trace (a note, a delete) drops that trace's entries first."""
from __future__ import annotations
import collections, re
from typing import Any, Callable
from explorer.web.http.limits import Receive, Scope, Send, UNSAFE_METHODS

Message = dict[str, Any]  # an ASGI message

CACHEABLE = re.compile(r"/t/(?P<a>[0-9a-f]{16})(/bufferize|/graph/tensor|/rangeify|/k/\d+)?"
                       r"|/api/traces/(?P<b>[0-9a-f]{16})(/raw|/kernels(/\d+)?|/bufferize|/rangeify|/graphs(/.+)?)?")
NAMES_TRACE = re.compile(r"/(?:t|traces|api/traces)/([0-9a-f]{16})(?:/|$)")

class ResponseCache:
  def __init__(self, app: Any, is_stored: Callable[[str], bool], state: Any = None, max_bytes: int = 64 << 20, max_entry_bytes: int = 8 << 20):
    self.app, self.is_stored, self.max_bytes, self.max_entry_bytes = app, is_stored, max_bytes, max_entry_bytes
    self.entries: collections.OrderedDict[tuple[str, bytes, bool], tuple[str, list[Message]]] = collections.OrderedDict()
    self.size = 0
    self.hits = self.misses = 0
    self.generation: dict[str, int] = {}  # per trace, bumped by forget
    if state is not None: state.response_cache = self  # the app's handle on it (tests read its counters)

  def forget(self, trace_id: str) -> None:
    """Drop the trace's entries; a response being rendered from it meanwhile is not kept either (its generation is past)."""
    self.generation[trace_id] = self.generation.get(trace_id, 0) + 1
    for key in [k for k, (tid, _) in self.entries.items() if tid == trace_id]: self._drop(key)

  def _drop(self, key: tuple[str, bytes, bool]) -> None:
    _, msgs = self.entries.pop(key)
    self.size -= sum(len(m.get("body", b"")) for m in msgs)

  async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
      await self.app(scope, receive, send)
      return
    path = scope["path"]
    if scope["method"] in UNSAFE_METHODS and (named := NAMES_TRACE.match(path)): self.forget(named.group(1))
    if scope["method"] != "GET" or not (m := CACHEABLE.fullmatch(path)):
      await self.app(scope, receive, send)
      return
    gzip = any(k == b"accept-encoding" and b"gzip" in v for k, v in scope["headers"])
    key, trace_id = (path, scope["query_string"], gzip), m.group("a") or m.group("b")
    if (hit := self.entries.get(key)) is not None:
      self.entries.move_to_end(key)
      self.hits += 1
      for msg in hit[1]: await send(msg)
      return
    self.misses += 1
    if not self.is_stored(trace_id):  # a progress page stands in: never kept
      await self.app(scope, receive, send)
      return
    msgs: list[Message] = []
    generation = self.generation.get(trace_id, 0)
    async def keep(msg: Message) -> None:
      msgs.append(msg)
      await send(msg)
    await self.app(scope, receive, keep)
    body = sum(len(m.get("body", b"")) for m in msgs)
    no_store = any(k.lower() == b"cache-control" and b"no-store" in v for k, v in msgs[0].get("headers", [])) if msgs else True
    fresh = self.generation.get(trace_id, 0) == generation
    if msgs and msgs[0].get("status") == 200 and fresh and not no_store and not msgs[-1].get("more_body") and body <= self.max_entry_bytes:
      self.entries[key] = (trace_id, msgs)
      self.size += body
      while self.size > self.max_bytes and self.entries: self._drop(next(iter(self.entries)))
