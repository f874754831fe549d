"""A captured training step in a real browser: search the program view by a line of the model, land on the kernels that line made, open
one, and follow its provenance into the program's source."""
from __future__ import annotations
import re
import pytest
from conftest import ARTIFACTS, needs_chromium, running_server
from test_capture import run_json
from test_program import model_line

pytestmark = [pytest.mark.browser, needs_chromium]

@pytest.fixture(scope="module")
def served(tmp_path_factory):
  db = tmp_path_factory.mktemp("program-browser") / "p.sqlite3"
  got = run_json("program", "cnn", str(db))
  with running_server(db, tmp_path_factory.mktemp("program-browser-log")) as base: yield base, got

def test_search_the_program_by_a_model_line_and_follow_it_to_the_source(served, page, errors):
  base, got = served
  line = model_line("classifier")
  site = f"capture_programs.py:{line}"
  page.goto(f"{base}/t/{got['id']}")
  assert page.locator("#program .timeline .tl").count() == got["kernels"]
  page.fill("#kernel-search", site)
  page.press("#kernel-search", "Enter")
  page.wait_for_url(re.compile(r".*[?&]q=capture_programs\.py%3A\d+.*"))
  rows = page.locator("#kernel-table tbody tr")
  assert 0 < rows.count() < got["kernels"]
  cells = page.locator("#kernel-table tbody td.provenance").all_inner_texts()
  assert cells and all(site in c for c in cells)
  assert page.locator("#kernel-table tbody .badge.bw").count() >= 1  # the line's backward kernels (linear bw) are marked
  page.screenshot(path=str(ARTIFACTS / "program_search.png"), full_page=True)
  rows.first.locator("td.mono a").click()
  page.wait_for_url(re.compile(r".*/k/\d+.*"))
  page.locator(f"#made-by a[href$='/source#L{line}']").first.click()
  page.wait_for_url(re.compile(rf".*/source#L{line}$"))
  assert "self.fc(x.flatten(1))" in page.locator(f"tr#L{line}").inner_text()
  assert page.evaluate("() => document.querySelector(':target').id") == f"L{line}"
  assert not errors, errors

def test_a_pass_shows_the_stack_that_opened_it_and_links_the_programs_line(served, page, errors):
  base, got = served
  page.goto(f"{base}/t/{got['id']}/rangeify")
  stack = page.locator("[data-pass-stack]")
  stack.wait_for(state="visible", timeout=120_000)
  assert "called from capture_programs.py:" in stack.locator("summary").inner_text()
  stack.locator("summary").click()
  assert stack.locator("li[data-frame]").count() > 3 and "tinygrad/" in stack.inner_text()
  match = page.locator("[data-match-list] tr[data-match]").first  # a match as the text diff of the graph written as Python (pyrender)
  match.locator("td:last-child summary").click()
  assert match.locator("pre.diff span.add").count() > 0 and match.locator("pre.diff span.del").count() > 0
  page.click("[data-pass-python]")  # the graph the pass started from, as Python
  # 0.2 s here; a fresh expand worker on a loaded CI machine (the whole suite on two cores) took longer than the default 30 s once
  page.wait_for_function("() => { const t = document.querySelector('[data-pass-python-text]').textContent; return t && t !== 'loading…'; }",
                         timeout=120_000)
  assert "UOp" in page.locator("[data-pass-python-text]").inner_text()
  frame = stack.locator("li[data-frame]:has(a[href*='/source#L'])").last  # the program's innermost line: what opened the pass's group
  code, link = frame.locator("code").inner_text(), frame.locator("a")
  line = int(link.get_attribute("href").rsplit("#L", 1)[1])
  link.click()
  page.wait_for_url(re.compile(rf".*/source#L{line}$"))
  assert code and " ".join(code.split()) in " ".join(page.locator(f"tr#L{line}").inner_text().split())  # as a browser spaces it
  assert not errors, errors
