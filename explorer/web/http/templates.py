"""The pages' templates for FastAPI: explorer.present.render's environment, rendered off the event loop."""
from __future__ import annotations
import asyncio
from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from explorer.present.render import STATIC_DIR as STATIC_DIR, TARGET_LABELS as TARGET_LABELS, environment
from explorer.present.render import lexer_for as lexer_for, pygments_css as pygments_css

class Templates(Jinja2Templates):
  async def render(self, request: Request, name: str, ctx: dict, status_code: int = 200) -> HTMLResponse:
    """Render in a thread: a heavy page (highlighted sources, big tables) must not hold the event loop that every other request,
    /api/health included, is waiting on."""
    html = await asyncio.to_thread(self.get_template(name).render, {"request": request, **ctx})
    return HTMLResponse(html, status_code)

def make_templates() -> Templates: return Templates(env=environment())
