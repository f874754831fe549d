"""The home page: the trace form (its POST starts a trace and follows it) and the recent traces."""
from __future__ import annotations
import asyncio
import re
import urllib.parse
from typing import Any
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from explorer.spec import ALGOS, CONSTS, DTYPES, PRESETS, REWRITES, STAGINGS, TILES, WINO_IMPLS, SpecError, Variant
from explorer.targets import TARGETS
from explorer.tinygrads import TINYGRAD, TINYGRADS, TRACEABLE
from explorer.tracing import versions
from explorer.web.http import deps
from explorer.web.http.deps import ServicesDep
from explorer.web.http.models import TraceRequest
from explorer.web.routes.common import page
from explorer.web.services.lifecycle import Busy

router = APIRouter(include_in_schema=False)

FORM_DEFAULTS = {**PRESETS["small"].to_dict(), **{k: v for k, v in Variant().to_dict().items() if k not in ("notes", "device", "rewrite_file")},
                 "preset": "small", "padding": "", "beam": 2, "peel": 2}

def home_context(recent: list[dict[str, Any]], values: dict[str, Any] | None = None, error: str | None = None) -> dict[str, Any]:
  return {"presets": {n: {**s.to_dict(), "label": s.label()} for n, s in PRESETS.items()}, "targets": TARGETS, "algos": ALGOS,
          "wino_impls": WINO_IMPLS, "tiles": TILES, "stagings": STAGINGS, "consts_options": CONSTS, "dtypes": list(DTYPES), "recent": recent,
          "values": values or FORM_DEFAULTS, "error": error, "rewrite_catalogue": REWRITES, "tinygrads": TINYGRADS, "traceable": TRACEABLE}

@router.get("/", response_class=HTMLResponse)
async def home(request: Request, svc: ServicesDep) -> HTMLResponse:
  recent = await asyncio.to_thread(svc.store.recent, 30)
  return await page(request, "home.html", **home_context(recent))

SPEC_FIELDS = ("batch", "cin", "cout", "height", "width", "kernel", "stride", "padding", "groups")

def form_to_request(form: dict[str, list[str]]) -> tuple[dict[str, Any], TraceRequest]:
  """The home form's fields (application/x-www-form-urlencoded) as a TraceRequest; values echo back into the form on error.
  A preset name wins over the shape fields; preset=custom uses the fields."""
  one = {k: v[-1].strip() for k, v in form.items()}
  values = {**FORM_DEFAULTS, **one, "targets": form.get("targets", []), "fallback": "fallback" in one, "time": "time" in one,
            "rewrites": form.get("rewrites", [])}
  spec: dict[str, Any] = {k: one[k] for k in SPEC_FIELDS if one.get(k, "") != ""}
  spec["dtype"] = one.get("dtype", "float32")
  opt = one.get("opt", "heuristic")
  if opt == "beam": opt = f"beam:{one.get('beam', '').strip() or '2'}"
  variant = {"algo": one.get("algo", "direct"), "wino_impl": one.get("wino_impl", "builtin"), "tile": one.get("tile", "F(4,3)"),
             "staging": one.get("staging", "staged"), "consts": one.get("consts", "symbolic"), "opt": opt, "targets": form.get("targets", []),
             "warmup": one.get("warmup", "2"), "repeats": one.get("repeats", "10"), "fallback": values["fallback"], "time": values["time"],
             "rewrites": [f"peel:{one.get('peel', '').strip() or '2'}" if r == "peel" else r for r in form.get("rewrites", [])],
             "tinygrad": one.get("tinygrad") or None}
  if (preset := one.get("preset", "custom")) in PRESETS: return values, TraceRequest.model_validate({"preset": preset, "variant": variant})
  return values, TraceRequest.model_validate({"spec": spec, "variant": variant})

FIELD_WORDS = {"batch": "The batch size", "cin": "The input channels", "cout": "The output channels", "height": "The input height",
               "width": "The input width", "kernel": "The kernel size", "stride": "The stride", "padding": "The padding", "groups": "The groups",
               "warmup": "The warm-up runs", "repeats": "The timed repeats", "opt": "The BEAM width", "tile": "The Winograd tile"}

def validation_message(e: ValidationError) -> tuple[str, list[str]]:
  """The form's errors in words, each saying which field, what limit and what was given; and the form fields to mark."""
  parts, fields = [], []
  for err in e.errors():
    field = next((str(x) for x in reversed(err.get("loc", ())) if isinstance(x, str) and x not in ("spec", "variant")), "")
    words, ctx, given = FIELD_WORDS.get(field, field or "A field"), err.get("ctx") or {}, err.get("input")
    if err.get("type") == "less_than_equal": parts.append(f"{words} is {given}: this server takes at most {ctx.get('le')}.")
    elif err.get("type") == "greater_than_equal": parts.append(f"{words} is {given}: it must be at least {ctx.get('ge')}.")
    elif err.get("type") in ("int_parsing", "int_type"): parts.append(f"{words} must be a whole number, not {str(given)[:20]!r}.")
    else: parts.append(f"{words}: {err.get('msg')}.")
    if field: fields.append(field)
  return " ".join(parts), fields

@router.post("/t", response_class=HTMLResponse)
async def submit_form(request: Request, svc: ServicesDep) -> Response:
  form = urllib.parse.parse_qs((await request.body()).decode(errors="replace"), keep_blank_values=True)
  values, error = {**FORM_DEFAULTS, **{k: v[-1] for k, v in form.items()}, "targets": form.get("targets", []),
                   "rewrites": form.get("rewrites", [])}, None
  busy: Busy | None = None
  invalid: list[str] = []
  try:
    values, req = form_to_request(form)
    status, _ = await deps.submit(svc, req, deps.client_of(request))
    return RedirectResponse(status["url"], status_code=303)
  except ValidationError as e: error, invalid = validation_message(e)
  except SpecError as e: error, invalid = str(e), [f for f in FIELD_WORDS if re.search(rf"\b{f}\b", str(e))]
  except Busy as e: error, busy = str(e), e  # the form again, saying why, with the busy answer's status
  recent = await asyncio.to_thread(svc.store.recent, 30)
  resp = await page(request, "home.html", status_code=busy.status if busy else 422, **home_context(recent, values, error), invalid=invalid)
  if busy: resp.headers["Retry-After"] = str(busy.retry_after_s)
  return resp

@router.get("/versions", response_class=HTMLResponse)
async def tinygrad_versions(request: Request) -> HTMLResponse:
  """The tinygrads a trace may run on and where each one's environment stands (GET /api/versions, `kernel-explorer versions`)."""
  return await page(request, "versions.html", server=TINYGRAD,
                    environments=[e.view() for e in await asyncio.to_thread(versions.environments)])
