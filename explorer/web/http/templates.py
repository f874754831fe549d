"""The pages' templates for FastAPI: explorer.present.render's environment, rendered off the event loop."""
from __future__ import annotations
import asyncio
import gzip
from collections.abc import Callable
from typing import Any, TypeVar, cast
from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from explorer.present.render import (
  STATIC_DIR as STATIC_DIR,
  TARGET_LABELS as TARGET_LABELS,
  environment,
  lexer_for as lexer_for,
  pygments_css as pygments_css,
)

T = TypeVar("T")

OFF_LOOP = 2  # heavy work (a page's rendering, a program's view, an export) in threads at once; the rest waits its turn

class Templates(Jinja2Templates):
  _slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

  async def off_loop(self, fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) in a thread, OFF_LOOP at most at once: the event loop, which every other request (/api/health included) waits on,
    competes for the interpreter with two threads, not with ten searches of a big program."""
    loop = asyncio.get_running_loop()
    if self._slots is None or self._slots[0] is not loop: self._slots = (loop, asyncio.Semaphore(OFF_LOOP))
    async with self._slots[1]: return await asyncio.to_thread(fn, *args)

  async def render(self, request: Request, name: str, ctx: dict[str, Any], status_code: int = 200) -> HTMLResponse:
    """Render off the event loop (off_loop): a heavy page (highlighted sources, big tables) must not hold it; a big one is gzipped
    there too, where the client takes gzip (the GZip middleware compresses on the loop: a program's 500 KB overview, 10-30 ms a time,
    while eleven readers waited; it passes an encoded body on)."""
    template, gz = self.get_template(name), accepts_gzip(request)
    def make() -> tuple[bytes, dict[str, str]]: return gzipped_if(template.render({"request": request, **ctx}).encode(), gz, OFF_LOOP_PAGE_GZIP)
    body, headers = await self.off_loop(make)
    return HTMLResponse(body, status_code, headers=headers)

  def macro(self, template: str, name: str, *args: Any) -> Markup:
    """A macro of a template rendered on its own, in the caller's thread: what a page draws of a whole trace, drawn once per parse
    (TraceCache.derived) and put into each view of it, not drawn again by each."""
    return cast(Markup, getattr(self.env.get_template(template).module, name)(*args))

  def warm(self) -> None:
    """Compile every template now (call it in a thread at start): a fresh server's first trace page compiled its twenty templates
    as it rendered, 200 ms that a class asking for it at once all waited on."""
    for name in self.env.list_templates(filter_func=lambda n: n.endswith(".html")): self.env.get_template(name)

def make_templates() -> Templates: return Templates(env=environment())

OFF_LOOP_PAGE_GZIP = 64 << 10  # a rendered page past this is compressed in its rendering thread

GZIPPED = {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}  # a body gzipped here (the GZip middleware passes it on as it is)

def accepts_gzip(request: Request) -> bool: return "gzip" in request.headers.get("accept-encoding", "").lower()

def gzipped_if(body: bytes, gz: bool, at_least: int) -> tuple[bytes, dict[str, str]]:
  """(body, its headers): gzipped where the client takes gzip (gz) and it is at least `at_least` bytes, else as it is."""
  if not gz or len(body) < at_least: return body, {}
  return gzip.compress(body, compresslevel=6, mtime=0), dict(GZIPPED)
