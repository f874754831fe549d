"""A reader's crawl of a served trace: every address its pages link to or load (a href, src, a link's href), followed breadth-first
from a start page as one client would, each asked for once, with no retry. What tests/test_crawl.py checks."""
from __future__ import annotations
import dataclasses
import html.parser
import time
import urllib.parse
import httpx

class _Links(html.parser.HTMLParser):
  def __init__(self) -> None:
    super().__init__()
    self.found: list[str] = []

  def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
    for name, value in attrs:
      if value and (name == "src" or (name == "href" and tag in ("a", "link", "area"))): self.found.append(value)

def links(page: str, at: str) -> list[str]:
  """The same-site addresses a page links to or loads, absolute paths with their query, without the fragment."""
  parser = _Links()
  parser.feed(page)
  out = []
  for ref in parser.found:
    url = urllib.parse.urlsplit(urllib.parse.urljoin(at, ref))
    if url.scheme in ("http", "https", "") and url.netloc in ("", urllib.parse.urlsplit(at).netloc) and url.path.startswith("/"):
      out.append(url.path + (f"?{url.query}" if url.query else ""))
  return out

@dataclasses.dataclass
class Crawl:
  answered: dict[str, int] = dataclasses.field(default_factory=dict)  # address -> status
  came_from: dict[str, str] = dataclasses.field(default_factory=dict)
  slowest: list[tuple[float, str]] = dataclasses.field(default_factory=list)

  def failures(self) -> list[tuple[str, int, str]]:
    return [(url, code, self.came_from.get(url, "")) for url, code in self.answered.items() if code != 200]

def crawl(base: str, start: str, limit: int = 600, skip: tuple[str, ...] = ()) -> Crawl:
  """Breadth-first from `start` (a path), at most `limit` addresses, each asked once (a browser's Accept), none retried; an address
  starting with one of `skip` is not followed."""
  got, todo, seen = Crawl(), [start], {start}
  with httpx.Client(base_url=base, timeout=120, headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}) as client:
    while todo and len(got.answered) < limit:
      url = todo.pop(0)
      t0 = time.perf_counter()
      r = client.get(url)
      got.slowest.append((time.perf_counter() - t0, url))
      got.answered[url] = r.status_code
      if r.status_code != 200 or not r.headers.get("content-type", "").startswith("text/html"): continue
      for nxt in links(r.text, f"{base}{url}"):
        if nxt not in seen and not nxt.startswith(skip):
          seen.add(nxt)
          got.came_from[nxt] = url
          todo.append(nxt)
  got.slowest.sort(reverse=True)
  return got
