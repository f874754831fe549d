"""OpenAPI docs served from vendored swagger-ui (FastAPI's default loads it from a CDN, which breaks offline)."""
from __future__ import annotations
from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

SWAGGER = "/static/vendor/swagger-ui-5.35.0"
router = APIRouter(include_in_schema=False)

@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
  return get_swagger_ui_html(openapi_url=request.app.openapi_url, title="Kernel Explorer API", swagger_js_url=f"{SWAGGER}/swagger-ui-bundle.js",
                             swagger_css_url=f"{SWAGGER}/swagger-ui.css", swagger_favicon_url=f"{SWAGGER}/favicon-32x32.png")
