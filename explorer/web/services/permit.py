"""A request's leave to start work (a worker's run, a layout, a diff, an export): the services that start work take one, and only the
HTTP edge's work gate (explorer.web.http.work) makes one, refusing it to a request from another site."""
from __future__ import annotations
from dataclasses import dataclass

@dataclass(frozen=True)
class WorkPermit:
  """Leave to start work, for the request at `path`."""
  path: str
