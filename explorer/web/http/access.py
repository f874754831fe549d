"""Who may use the server: the access token required beyond loopback, and who counts as trusted with server details."""
from __future__ import annotations
import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

LOOPBACK = ("127.0.0.1", "localhost", "::1")

def is_loopback(host: str) -> bool:
  if host.strip("[]") in LOOPBACK: return True
  try: return ipaddress.ip_address(host.strip("[]")).is_loopback
  except ValueError: return False

TOKEN_HEADER, TOKEN_COOKIE = "X-Access-Token", "ke_token"
TOKEN_FREE = ("/static/", "/api/health")
def has_token(request: Request, token: str) -> bool:
  given = request.headers.get(TOKEN_HEADER) or request.cookies.get(TOKEN_COOKIE) or ""
  return hmac.compare_digest(given.encode(), token.encode())

def install_token_check(app: FastAPI, token: str) -> None:
  """Every request but static assets and the health check needs the token: header, cookie, or ?token= once (which sets the cookie)."""
  @app.middleware("http")
  async def check_token(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    if request.url.path.startswith(TOKEN_FREE): return await call_next(request)
    if (query := request.query_params.get("token")) is not None and hmac.compare_digest(query.encode(), token.encode()):
      resp = RedirectResponse(str(request.url.remove_query_params("token")), status_code=303)
      resp.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
      return resp
    if not has_token(request, token):
      return JSONResponse({"detail": f"access token required: send the {TOKEN_HEADER} header, or open /?token=... once in the browser"}, 401)
    return await call_next(request)
