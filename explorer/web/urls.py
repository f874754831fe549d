"""Every URL the app makes, in one place: pages, their API twins, and the permalinks a page links to. Plain functions of ids: the
services, the HTTP edge, the routes and the templates all use these, so a page's address is written once."""
from __future__ import annotations
import urllib.parse
from typing import Any
from explorer.store.keys import trace_path

def with_query(path: str, **params: Any) -> str:
  """path with the given query parameters (those that are None left out)."""
  q = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
  return f"{path}?{q}" if q else path

def trace_url(trace_id: str) -> str: return trace_path(trace_id)

def trace_api_url(trace_id: str) -> str: return f"/api/traces/{trace_id}"

def kernel_url(trace_id: str, n: int | str, **query: Any) -> str: return with_query(f"{trace_url(trace_id)}/k/{n}", **query)

def graph_api_url(trace_id: str, ref: str, svg: bool = False, **query: Any) -> str:
  return with_query(f"{trace_api_url(trace_id)}/graphs/{ref}{'.svg' if svg else ''}", **query)

def probe_url(trace_id: str) -> str: return f"{trace_api_url(trace_id)}/roofline/probe"

def diff_url(a: str, b: str, target: str | None = None, target_b: str | None = None) -> str:
  """The diff of two stored traces, optionally of a target of each (the sources diffed)."""
  return with_query(f"/diff/{a}/{b}", target=target, target_b=target_b)

def study_url(study_id: str) -> str: return f"/studies/{study_id}"

def class_url(class_id: str) -> str: return f"/c/{class_id}"  # the join URL a class's students open

def class_api_url(class_id: str) -> str: return f"/api/classes/{class_id}"

def library_url(deleted: str | None = None) -> str: return with_query("/traces", deleted=deleted)

def trace_tour_url(trace_id: str, step: str | None = None, big: bool = False, target: str | None = None) -> str:
  return with_query(f"{trace_url(trace_id)}/tour", step=step, target=target, big=1 if big else None)

def trace_tour_api_url(trace_id: str, target: str | None = None) -> str:
  return with_query(f"{trace_api_url(trace_id)}/tour", target=target)

def pair_tour_api_url(kind: str, a: str, b: str, target: str | None = None) -> str:
  return with_query(f"/api/tours/{kind}", a=a, b=b, target=target)

def pair_tour_url(kind: str, a: str, b: str, step: str | None = None, big: bool = False, target: str | None = None) -> str:
  return with_query(f"/tours/{kind}", a=a, b=b, step=step, target=target, big=1 if big else None)
