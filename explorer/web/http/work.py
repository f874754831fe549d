"""Work a GET may start: a worker's run (a target's codegen, a graph's expansion), a layout, a diff, an export. A web page elsewhere
must not make a visitor's browser start such work by the hundred, so a route that may start work takes a `Work` gate and asks it for a
permit just before it does; the gate refuses one (403) to a request from another site, unless a person followed a link to it (a
top-level navigation the user started). The services that start work take a WorkPermit, which only a gate makes: a route cannot start
work without going through one (mypy checks the calls; tests/test_work.py walks every route cross-site). Unsafe methods (POST, DELETE)
are refused cross-site before any route runs (explorer.web.http.limits)."""
from __future__ import annotations
from typing import Annotated
from fastapi import Depends, HTTPException, Request
from explorer.web.http.limits import cross_site, followed_link
from explorer.web.services.permit import CROSS_SITE_REFUSED, WorkPermit

class WorkGate:
  def __init__(self, request: Request):
    self.request = request
    self.permits = 0

  def permit(self) -> WorkPermit:
    """A permit for this request; 403 when it came from another site and no person followed a link to it."""
    headers = self.request.headers
    if cross_site(headers) and not followed_link(headers):
      raise HTTPException(403, CROSS_SITE_REFUSED)
    self.permits += 1
    return WorkPermit(self.request.url.path, self.request.client.host if self.request.client else None)

  def permit_if_allowed(self) -> WorkPermit | None:
    """A permit, or None where permit() would refuse one: for a page that does without the work when it may not start it."""
    headers = self.request.headers
    return None if cross_site(headers) and not followed_link(headers) else self.permit()

async def work_gate(request: Request) -> WorkGate: return WorkGate(request)  # async: no thread pool hop (deps.services)

Work = Annotated[WorkGate, Depends(work_gate)]
