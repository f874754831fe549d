"""Request limits and safety headers in one pure-ASGI middleware:
- a body over max_body_bytes is refused with 413, by its Content-Length or, for a chunked body, as soon as the count passes it;
- a body is read whole (it is small: max_body_bytes) before the request counts as being served, within request_body_timeout_s of
  its head (408 and the connection closed past it): a client that sends part of a body and then nothing holds no request slot;
- a URL over MAX_URL_BYTES is refused with 414;
- past max_in_flight requests being served (/api/health and live progress streams aside) new ones get 503: requests are counted,
  not sockets, so idle connections lock nobody out (explorer.web.http.h11 closes them);
- live progress streams (server-sent events: the routes that answer text/event-stream) have their own caps, in all and per client
  address, so open streams cannot take the request slots either; past them a stream gets 503 and the page polls instead;
- a state-changing request (POST, PUT, PATCH, DELETE) from another site is refused with 403: its Origin (or Sec-Fetch-Site)
  must be this server, so a web page elsewhere cannot start traces or post notes through the user's browser; a GET that starts work
  is refused the same way by its route (explorer.web.http.work), unless a person followed a link to it;
- when the server listens on loopback only, the Host header must name loopback (403 otherwise): a DNS-rebinding page cannot
  reach it under a name of its own;
- every response says nosniff, no framing, and sends no referrer to other sites."""
from __future__ import annotations
import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit
from fastapi import APIRouter, FastAPI
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException

MAX_URL_BYTES = 8192
HEALTH_PATH = "/api/health"  # never counted against max_in_flight: a liveness check answers while the server is full
UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"), (b"referrer-policy", b"same-origin"),
                    (b"content-security-policy", b"frame-ancestors 'none'; object-src 'none'; base-uri 'self'; form-action 'self'")]

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

class BodyTooLarge(HTTPException):
  """Raised from inside receive(): FastAPI passes HTTPExceptions through body parsing, so the app's handler answers 413."""
  def __init__(self, limit: int):
    super().__init__(413, f"request body over the limit of {limit} bytes")

@dataclass
class LimitConfig:
  max_body_bytes: int
  max_in_flight: int = 0  # requests being served at once, /api/health and event streams aside; 0: no limit
  allowed_hosts: tuple[str, ...] | None = None  # None: any Host (set to the loopback names by `serve` on loopback)
  body_timeout_s: float = 10.0  # a body arrives whole within this of its head; 0: no deadline
  max_streams: int = 0  # event streams open at once; 0: no limit
  max_streams_per_client: int = 0
  stream_paths: re.Pattern[str] | None = None  # the paths that answer an event stream (install_limits reads them off the app's routes)
  own_caps_paths: re.Pattern[str] | None = None  # event streams capped by what they follow (a live class: its student cap), not here

  @property
  def max_receiving(self) -> int:
    """Requests whose bodies are still arriving: a body holds no request slot, but each holds up to max_body_bytes of memory."""
    return 4 * self.max_in_flight if self.max_in_flight else 0

def host_name(host: str) -> str:
  """The name part of a Host header or URL netloc, lowercase, without the port: "[::1]:8000" -> "[::1]", "a:80" -> "a"."""
  host = host.strip().lower()
  if host.startswith("["): return host[:host.index("]") + 1] if "]" in host else host
  return host.rsplit(":", 1)[0] if host.count(":") == 1 else host

def cross_site(headers: Headers) -> bool:
  """The request came from a page of another site: its browser says so (Sec-Fetch-Site), or its Origin is not this server."""
  origin, host = headers.get("origin"), headers.get("host", "")
  if headers.get("sec-fetch-site") == "cross-site": return True
  return origin is not None and (origin == "null" or urlsplit(origin).netloc.lower() != host.lower())

def followed_link(headers: Headers) -> bool:
  """A top-level navigation that a person started (a link clicked, an address typed), not one a page made on its own."""
  return headers.get("sec-fetch-mode") == "navigate" and headers.get("sec-fetch-user") == "?1"

def refusal(scope: Scope, headers: Headers, config: LimitConfig) -> tuple[int, str] | None:
  """(status, reason) when the request is refused before the app sees it."""
  if len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") > MAX_URL_BYTES:
    return 414, f"URL over the limit of {MAX_URL_BYTES} bytes"
  host = headers.get("host", "")
  if config.allowed_hosts is not None and host_name(host) not in config.allowed_hosts:
    return 403, f"this server answers on loopback only, not to Host {host_name(host)[:100]!r}"
  if scope["method"] in UNSAFE_METHODS and cross_site(headers):
    return 403, "cross-site request refused: post from this server's own pages, or without an Origin header (API clients)"
  try: length = int(headers.get("content-length") or 0)
  except ValueError: return 400, "Content-Length is not a number"
  if length > config.max_body_bytes: return 413, f"request body over the limit of {config.max_body_bytes} bytes"
  return None

async def respond(send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
  body = json.dumps({"detail": detail}).encode()
  await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json"),
              (b"content-length", str(len(body)).encode()), (b"connection", b"close"), *(headers or [])]})
  await send({"type": "http.response.body", "body": body})

class ClientGone(Exception):
  """The client closed the connection before its body arrived."""

def has_body(scope: Scope, headers: Headers) -> bool:
  return headers.get("content-length", "0") not in ("", "0") or "chunked" in headers.get("transfer-encoding", "").lower()

async def read_body(receive: Receive, limit: int) -> bytes:
  """The whole request body (BodyTooLarge past limit bytes, ClientGone if the client left first)."""
  chunks, seen = [], 0
  while True:
    msg = await receive()
    if msg["type"] == "http.disconnect": raise ClientGone()
    chunk = msg.get("body", b"")
    if (seen := seen + len(chunk)) > limit: raise BodyTooLarge(limit)
    chunks.append(chunk)
    if not msg.get("more_body", False): return b"".join(chunks)

def replay(body: bytes, receive: Receive) -> Receive:
  """receive() for the app: the body read already, then whatever the connection says next (a disconnect)."""
  sent = False
  async def again() -> Message:
    nonlocal sent
    if sent: return await receive()
    sent = True
    return {"type": "http.request", "body": body, "more_body": False}
  return again

def scope_client(scope: Scope) -> str: return (scope.get("client") or ("?", 0))[0]  # ("?": none, over a unix socket or from a test)

class RequestLimits:
  def __init__(self, app: App, config: LimitConfig):
    self.app, self.config = app, config
    self.in_flight = self.receiving = self.streams = 0
    self.streams_of: dict[str, int] = {}

  async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http": return await self.app(scope, receive, send)
    started = False
    async def send_with_headers(msg: Message) -> None:
      nonlocal started
      if msg["type"] == "http.response.start":
        started = True
        msg = {**msg, "headers": [*msg.get("headers", []), *SECURITY_HEADERS]}
      await send(msg)
    headers, cfg = Headers(scope=scope), self.config
    if (why := refusal(scope, headers, cfg)) is not None: return await respond(send_with_headers, *why)
    if scope["path"] == HEALTH_PATH: return await self.app(scope, receive, send_with_headers)
    if cfg.own_caps_paths is not None and scope["method"] == "GET" and cfg.own_caps_paths.fullmatch(scope["path"]):
      return await self.app(scope, receive, send_with_headers)
    if cfg.stream_paths is not None and scope["method"] == "GET" and cfg.stream_paths.fullmatch(scope["path"]):
      return await self._stream(scope, receive, send_with_headers)
    if has_body(scope, headers):
      if (body := await self._body(receive, send_with_headers)) is None: return
      receive = replay(body, receive)
    if cfg.max_in_flight and self.in_flight >= cfg.max_in_flight:
      return await respond(send_with_headers, 503, f"the server is serving {self.in_flight} requests, its limit; try again shortly",
                           [(b"retry-after", b"5")])
    self.in_flight += 1
    try: await self._serve(scope, receive, send_with_headers, lambda: started)
    finally: self.in_flight -= 1

  async def _body(self, receive: Receive, send: Send) -> bytes | None:
    """The request's body, read before the request counts as served; None when it was answered instead (408, 413, 503) or the client left."""
    cfg = self.config
    if cfg.max_receiving and self.receiving >= cfg.max_receiving:
      await respond(send, 503, f"{self.receiving} requests are still sending their bodies, the limit; try again shortly", [(b"retry-after", b"5")])
      return None
    self.receiving += 1
    try: return await asyncio.wait_for(read_body(receive, cfg.max_body_bytes), cfg.body_timeout_s or None)
    except TimeoutError: await respond(send, 408, f"the request body did not arrive within {cfg.body_timeout_s:g} s of its head")
    except BodyTooLarge as e: await respond(send, 413, str(e.detail))
    except ClientGone: pass
    finally: self.receiving -= 1
    return None

  async def _stream(self, scope: Scope, receive: Receive, send: Send) -> None:
    """An event stream, counted against the stream caps (in all and per client address), not against max_in_flight."""
    cfg, client = self.config, scope_client(scope)
    if (cfg.max_streams and self.streams >= cfg.max_streams) or \
       (cfg.max_streams_per_client and self.streams_of.get(client, 0) >= cfg.max_streams_per_client):
      mine = self.streams_of.get(client, 0)
      return await respond(send, 503, f"{self.streams} live progress streams are open ({mine} of them this client's), the limit; "
                                      "the page follows its job by polling instead", [(b"retry-after", b"5")])
    self.streams += 1
    self.streams_of[client] = self.streams_of.get(client, 0) + 1
    try: await self.app(scope, receive, send)
    finally:
      self.streams -= 1
      if (left := self.streams_of[client] - 1): self.streams_of[client] = left
      else: del self.streams_of[client]

  async def _serve(self, scope: Scope, receive: Receive, send: Send, started: Callable[[], bool]) -> None:
    seen, limit = 0, self.config.max_body_bytes
    async def counted() -> Message:
      nonlocal seen
      msg = await receive()
      if msg["type"] == "http.request" and (seen := seen + len(msg.get("body", b""))) > limit: raise BodyTooLarge(limit)
      return msg
    try: await self.app(scope, counted, send)
    except BodyTooLarge as e:  # read outside FastAPI's body parsing, and not answered there
      if not started(): await respond(send, 413, str(e.detail))

OWN_CAPS_TAG = "classes"  # a live class's streams: one per student, capped by the class (a classroom shares one address), not per client

def stream_paths(routers: tuple[APIRouter, ...], own_caps: bool = False) -> re.Pattern[str] | None:
  """The paths of the routes that answer an event stream (response_class EventSourceResponse), as one pattern, read off the routers
  an app includes as they are: the app's own view of them (fastapi.routing.iter_route_contexts) builds every route's context, about
  0.4 s of CPU per app, which a request builds only for the routes it passes. own_caps: those tagged OWN_CAPS_TAG, else the others."""
  from fastapi.routing import APIRoute
  from sse_starlette import EventSourceResponse
  found = [re.sub(r"\(\?P<\w+>", "(?:", r.path_regex.pattern.removeprefix("^").removesuffix("$")) for router in routers for r in router.routes
           if isinstance(r, APIRoute) and r.response_class is EventSourceResponse and (OWN_CAPS_TAG in r.tags) == own_caps]
  return re.compile("|".join(f"(?:{p})" for p in found)) if found else None

def install_limits(app: FastAPI, settings: Any) -> LimitConfig:
  """Adds the middleware (outermost but for what is added later); app.state.request_limits is its config (its stream paths are read
  off the routes when the app starts)."""
  config = LimitConfig(int(settings.max_body_bytes), int(settings.max_connections), body_timeout_s=float(settings.request_body_timeout_s),
                       max_streams=int(settings.max_streams), max_streams_per_client=int(settings.max_streams_per_client))
  app.add_middleware(RequestLimits, config=config)
  app.state.request_limits = config
  return config

def restrict_to_loopback(app: FastAPI, bound: str = "127.0.0.1") -> None:
  """Called by `serve` when it listens on loopback: only requests whose Host header names loopback (or the address bound) are answered."""
  app.state.request_limits.allowed_hosts = (*LOOPBACK_HOSTS, host_name(bound if ":" not in bound else f"[{bound.strip('[]')}]"))

class RedactToken(logging.Filter):
  """The access log shows `?token=...` (the link that sets the cookie) as `?token=***`: the token stays out of log files."""
  def filter(self, record: logging.LogRecord) -> bool:
    if isinstance(record.args, tuple) and any(isinstance(a, str) and "token=" in a for a in record.args):
      record.args = tuple(TOKEN_IN_QUERY.sub(r"\1***", a) if isinstance(a, str) else a for a in record.args)
    return True

TOKEN_IN_QUERY = re.compile(r"([?&]token=)[^&\s]*")

def redact_access_log() -> None:
  log = logging.getLogger("uvicorn.access")
  if not any(isinstance(f, RedactToken) for f in log.filters): log.addFilter(RedactToken())
