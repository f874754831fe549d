"""Request limits and safety headers in one pure-ASGI middleware (bodies are counted as they stream, never buffered here):
- a body over max_body_bytes is refused with 413, by its Content-Length or, for a chunked body, as soon as the count passes it;
- a URL over MAX_URL_BYTES is refused with 414;
- past max_in_flight requests being served (event streams included, /api/health aside) new ones get 503: requests are counted,
  not sockets, so idle connections lock nobody out (explorer.web.protocol closes them);
- a state-changing request (POST, PUT, PATCH, DELETE) from another site is refused with 403: its Origin (or Sec-Fetch-Site)
  must be this server, so a web page elsewhere cannot start traces or post notes through the user's browser; so is a GET from
  another site that starts work (WORK_PATHS), unless a person followed a link to it;
- when the server listens on loopback only, the Host header must name loopback (403 otherwise): a DNS-rebinding page cannot
  reach it under a name of its own;
- every response says nosniff, no framing, and sends no referrer to other sites."""
from __future__ import annotations
import json, logging, re
from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit
from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException

MAX_URL_BYTES = 8192
HEALTH_PATH = "/api/health"  # never counted against max_in_flight: a liveness check answers while the server is full
UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
# GETs that start work (graph expansion and layout, diffs, exports): refused cross-site like unsafe methods, unless a person followed a
# link (a top-level navigation the user started): a page elsewhere cannot make a visitor's browser load them by the hundred
WORK_PATHS = re.compile(r"/api/traces/[^/]+/graphs/.|/(api/)?diff/[^/]+/[^/]+|/t/[^/]+/export\.html$")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"), (b"referrer-policy", b"same-origin"),
                    (b"content-security-policy", b"frame-ancestors 'none'; object-src 'none'; base-uri 'self'; form-action 'self'")]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]

class BodyTooLarge(HTTPException):
  """Raised from inside receive(): FastAPI passes HTTPExceptions through body parsing, so the app's handler answers 413."""
  def __init__(self, limit: int):
    super().__init__(413, f"request body over the limit of {limit} bytes")

@dataclass
class LimitConfig:
  max_body_bytes: int
  max_in_flight: int = 0  # requests being served at once (event streams included), /api/health aside; 0: no limit
  allowed_hosts: tuple[str, ...] | None = None  # None: any Host (set to the loopback names by `serve` on loopback)

def host_name(host: str) -> str:
  """The name part of a Host header or URL netloc, lowercase, without the port: "[::1]:8000" -> "[::1]", "a:80" -> "a"."""
  host = host.strip().lower()
  if host.startswith("["): return host[:host.index("]") + 1] if "]" in host else host
  return host.rsplit(":", 1)[0] if host.count(":") == 1 else host

def refusal(scope: Scope, headers: Headers, config: LimitConfig) -> tuple[int, str] | None:
  """(status, reason) when the request is refused before the app sees it."""
  if len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") > MAX_URL_BYTES:
    return 414, f"URL over the limit of {MAX_URL_BYTES} bytes"
  host = headers.get("host", "")
  if config.allowed_hosts is not None and host_name(host) not in config.allowed_hosts:
    return 403, f"this server answers on loopback only, not to Host {host_name(host)[:100]!r}"
  origin, site = headers.get("origin"), headers.get("sec-fetch-site")
  cross_site = site == "cross-site" or (origin is not None and (origin == "null" or urlsplit(origin).netloc.lower() != host.lower()))
  if scope["method"] in UNSAFE_METHODS and cross_site:
    return 403, "cross-site request refused: post from this server's own pages, or without an Origin header (API clients)"
  if cross_site and WORK_PATHS.match(scope["path"]) and not (headers.get("sec-fetch-mode") == "navigate" and headers.get("sec-fetch-user") == "?1"):
    return 403, "cross-site request refused: this URL starts work (graph layout, a diff, an export); open it from this server's pages"
  try: length = int(headers.get("content-length") or 0)
  except ValueError: return 400, "Content-Length is not a number"
  if length > config.max_body_bytes: return 413, f"request body over the limit of {config.max_body_bytes} bytes"
  return None

async def respond(send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
  body = json.dumps({"detail": detail}).encode()
  await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json"),
              (b"content-length", str(len(body)).encode()), (b"connection", b"close"), *(headers or [])]})
  await send({"type": "http.response.body", "body": body})

class RequestLimits:
  def __init__(self, app: Any, config: LimitConfig):
    self.app, self.config = app, config
    self.in_flight = 0

  async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http": return await self.app(scope, receive, send)
    started = False
    async def send_with_headers(msg: dict) -> None:
      nonlocal started
      if msg["type"] == "http.response.start":
        started = True
        msg = {**msg, "headers": [*msg.get("headers", []), *SECURITY_HEADERS]}
      await send(msg)
    if (why := refusal(scope, Headers(scope=scope), self.config)) is not None: return await respond(send_with_headers, *why)
    if scope["path"] == HEALTH_PATH: return await self._serve(scope, receive, send_with_headers, lambda: started)
    if self.config.max_in_flight and self.in_flight >= self.config.max_in_flight:
      return await respond(send_with_headers, 503, f"the server is serving {self.in_flight} requests, its limit; try again shortly",
                           [(b"retry-after", b"5")])
    self.in_flight += 1
    try: await self._serve(scope, receive, send_with_headers, lambda: started)
    finally: self.in_flight -= 1

  async def _serve(self, scope: Scope, receive: Receive, send: Send, started: Callable[[], bool]) -> None:
    seen, limit = 0, self.config.max_body_bytes
    async def counted() -> dict:
      nonlocal seen
      msg = await receive()
      if msg["type"] == "http.request" and (seen := seen + len(msg.get("body", b""))) > limit: raise BodyTooLarge(limit)
      return msg
    try: await self.app(scope, counted, send)
    except BodyTooLarge as e:  # read outside FastAPI's body parsing, and not answered there
      if not started(): await respond(send, 413, str(e.detail))

def install_limits(app: FastAPI, max_body_bytes: int, max_in_flight: int = 0) -> LimitConfig:
  """Adds the middleware (outermost but for what is added later); app.state.request_limits is its config."""
  config = LimitConfig(max_body_bytes, max_in_flight)
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
