"""A request's leave to start work (a worker's run, a layout, a diff, an export): the services that start work take one, and only the
HTTP edge's work gate (explorer.web.http.work) makes one, refusing it to a request from another site, and names the client whose share
the work counts against (explorer.web.services.lifecycle's admission rule)."""
from __future__ import annotations
from dataclasses import dataclass

CROSS_SITE_REFUSED = ("cross-site request refused: this URL starts work (a target's codegen, a graph layout, a diff, an export); "
                      "open it from this server's pages")

@dataclass(frozen=True)
class WorkPermit:
  """Leave to start work, for the request at `path` from `client` (its address: the work it starts counts against its share)."""
  path: str
  client: str | None = None
