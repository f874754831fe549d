"""The way into a diff without a trace open: /diff picks two stored traces, or traces two variants of one preset (through the home
form's submit path) and lands on their diff; the home page links it. And what the diff page draws: identical groups in a line, the
UOp graph diff with only where a change starts outlined red (a legend for the rest)."""
from __future__ import annotations
import re
import pytest
from conftest import wait_done
from fastapi.testclient import TestClient
from stored_traces import stored_pair
from support import app_over, fake_result, minimal_trace
from explorer.spec import PRESETS, Variant
from explorer.store import trace_key

@pytest.fixture(scope="module")
def pair():
  db, staged, fused = stored_pair()
  with TestClient(app_over(str(db))) as client: yield client, staged, fused

def options(html: str, name: str) -> list[str]:
  select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', html, re.S)
  assert select is not None, name
  return re.findall(r'<option value="([^"]+)"', select.group(1))

def test_the_picker_offers_both_ways_and_the_home_page_links_it(pair):
  client, staged, fused = pair
  home = client.get("/").text
  assert re.search(r'<a class="button" id="home-diff"[^>]*href="/diff"', home) and 'id="recent-diff"' in home
  page = client.get("/diff")
  assert page.status_code == 200 and 'id="pick-pair-form"' in page.text and 'id="variants-form"' in page.text
  assert {staged, fused} <= set(options(page.text, "a")) and {staged, fused} <= set(options(page.text, "b"))
  assert {"staged", "fused", "direct"} <= set(options(page.text, "va")) and "small" in options(page.text, "preset")
  # the stored-traces form is a GET of /diff?a=&b=: the permalink follows
  r = client.get("/diff", params={"a": staged, "b": fused}, follow_redirects=False)
  assert r.status_code == 303 and r.headers["location"] == f"/diff/{staged}/{fused}"
  assert 'id="groups-table"' in client.get(r.headers["location"]).text
  narrowed = client.get("/diff", params={"q": fused}).text
  assert options(narrowed, "a") == [fused] and "1 of 1 stored traces" in narrowed
  one = client.get("/diff", params={"a": staged}).text  # one side: its quick picks, and both lists with A chosen
  assert 'id="diff-picker"' in one and re.search(rf'<option value="{staged}" selected', one)

def test_tracing_two_variants_submits_both_and_lands_on_their_diff(tmp_path):
  ran: list[tuple] = []
  def runner(spec, variant, progress, timeout_s):
    ran.append((spec, variant))
    return fake_result(minimal_trace(spec, variant))
  with TestClient(app_over(str(tmp_path / "p.sqlite3"), runner=runner)) as client:
    form = {"preset": "small", "va": "staged", "vb": "fused", "targets": ["cuda"]}
    r = client.post("/diff/variants", data=form, follow_redirects=False)
    assert r.status_code == 303, r.text
    wino = Variant(algo="winograd", wino_impl="explorer", targets=("cuda",))
    a, b = (trace_key(PRESETS["small"], Variant(**{**wino.to_dict(), "staging": s})) for s in ("staged", "fused"))
    assert r.headers["location"] == f"/diff/{a}/{b}"
    assert wait_done(client, a)["status"] == wait_done(client, b)["status"] == "done"
    assert sorted(v.staging for _, v in ran) == ["fused", "staged"] and all(s == PRESETS["small"] for s, _ in ran)
    diff = client.get(r.headers["location"])
    assert diff.status_code == 200 and 'id="groups-table"' in diff.text and "staging staged → fused" in diff.text
    again = client.post("/diff/variants", data=form, follow_redirects=False)  # both stored: served, not traced again
    assert again.headers["location"] == r.headers["location"] and len(ran) == 2
    bad = client.post("/diff/variants", data={**form, "vb": "bogus"})
    assert bad.status_code == 422 and 'id="pair-error"' in bad.text and "bogus" in bad.text and 'id="variants-form"' in bad.text
    refused = client.post("/diff/variants", data={**form, "preset": "nope"})
    assert refused.status_code == 422 and 'id="pair-error"' in refused.text

def test_identical_groups_read_in_a_line_and_the_graph_diff_outlines_where_changes_start(pair):
  client, staged, fused = pair
  page = client.get(f"/diff/{staged}/{fused}").text
  groups = {int(i): body for i, body in re.findall(r'<section class="panel flush diff-group" id="group-(\d+)"[^>]*>(.*?)</section>', page, re.S)}
  assert '<section class="panel flush diff-group" id="group-0" data-identical>' in page and 'class="identical-note"' in groups[0]
  assert 'class="data metrics"' not in groups[0] and 'class="data metrics"' in groups[2]  # the figures table only where they differ
  graphs = client.get(f"/diff/{staged}/{fused}/graphs").text
  d = client.get(f"/api/diff/{staged}/{fused}").json()
  g = next(x for x in d["groups"] if x["relation"] == "fused")["graph"]
  red = len(re.findall(r'class="node uop op[^ "]+ changed', graphs))
  amber = len(re.findall(r'class="node uop op[^ "]+ downstream', graphs))
  assert g["frontier_a"] + g["frontier_b"] < len(g["only_a"]) + len(g["only_b"]) / 10
  assert 0 < red < (len(g["only_a"]) + len(g["only_b"])) / 10  # before: every differing node outlined red, ~500 of them
  assert amber > red and "data-graph-legend" in graphs and "where the change starts" in graphs
  assert "structurally identical" in graphs and 'class="graph-diff-head graph-identical"' in graphs
