"""The pages' templates for FastAPI: explorer.present.render's environment, rendered off the event loop."""
from __future__ import annotations
import asyncio
from typing import Any, Callable, TypeVar
from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from explorer.present.render import STATIC_DIR as STATIC_DIR, TARGET_LABELS as TARGET_LABELS, environment
from explorer.present.render import lexer_for as lexer_for, pygments_css as pygments_css

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
    """Render off the event loop (off_loop): a heavy page (highlighted sources, big tables) must not hold it."""
    html = await self.off_loop(self.get_template(name).render, {"request": request, **ctx})
    return HTMLResponse(html, status_code)

  def warm(self) -> None:
    """Compile every template now (call it in a thread at start): a fresh server's first trace page compiled its twenty templates
    as it rendered, 200 ms that a class asking for it at once all waited on."""
    for name in self.env.list_templates(filter_func=lambda n: n.endswith(".html")): self.env.get_template(name)

def make_templates() -> Templates: return Templates(env=environment())
