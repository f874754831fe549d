"""One clock on the pages (the session's small Winograd trace, on the CPU): every page that shows a time shows how it was measured,
the Timings card says what each figure is and adds up what the stage table does, and counts that differ by target name it."""
from __future__ import annotations
import re
import time
import pytest

BADGE = re.compile(r'<span class="badge clock" data-clock="(host|cupti|events-held|events)" title="([^"]*)">')

def badges(html: str) -> list[tuple[str, str]]: return BADGE.findall(html)

@pytest.mark.parametrize("url", ["/t/{id}", "/t/{id}/k/0", "/t/{id}/export.html", "/t/{id}/tour?step=timing", "/traces", "/"])
def test_every_page_that_shows_a_time_shows_its_clock(web_client, small_trace, url):
  deadline = time.monotonic() + 120
  while 'id="preparing"' in (html := web_client.get(url.format(id=small_trace)).text):  # a first view still computing what it shows
    assert time.monotonic() < deadline, url
    time.sleep(0.2)
  got = badges(html)
  assert got and all(method == "host" for method, _ in got), url
  if "/t/" in url:  # a trace's own records: their samples and interval in the tooltip
    assert any("samples, 95% interval" in tip for _, tip in got), got

def test_the_timing_card_names_each_figure_and_how_it_was_measured(web_client, small_trace):
  t = web_client.get(f"/api/traces/{small_trace}").json()
  tm = t["timing"]
  assert tm["method"] == "host" and tm["span_s"]["median"] > 0 and tm["total_s"]["median"] > 0 and tm["eager_s"] > 0
  page = web_client.get(f"/t/{small_trace}").text
  card = page[page.index("data-timing-card"):page.index('id="stage-seconds"')]
  for what in ("kernels, each alone, summed", "schedule span", "between kernels", "first run", "codegen + compile"):
    assert what in card, what
  assert "Measured alone, in this trace's own run: host clock, caches warm, " in card and 'href="/diff"' in card  # no diff of it yet

def test_the_cards_codegen_is_the_stage_tables_tinygrad_codegen(web_client, small_trace):
  """A program's card said codegen 857 ms where its table said 1.547 s: the card now sums what the table's codegen row's tinygrad's
  column times (tinygrad's codegen and compile of every kernel), not what the row's own seconds add (the explorer's records too)."""
  t = web_client.get(f"/api/traces/{small_trace}").json()
  card = t["totals"]["codegen_s"] + t["totals"]["compile_s"]
  own = t["tinygrad_seconds"]["codegen"]
  assert abs(card - own) <= 0.05 * own + 0.002, (card, own)
  assert t["stage_seconds"]["codegen"] >= own

def test_counts_that_differ_by_target_name_it(web_client, small_trace):
  for target, label in (("clang", "C (clang)"), ("cuda", "CUDA")):
    page = web_client.get(f"/t/{small_trace}/k/0?target={target}").text
    assert f"FLOPs ({label})" in page and f"bytes ({label})" in page, target
  tour = web_client.get(f"/t/{small_trace}/tour?step=tensor").text
  assert "counted by formula, 2 per multiply-add" in tour
