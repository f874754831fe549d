"""The host's work on a timeline: a trace records its stages beside tinygrad's own profile (each pass, each Tensor function, each kernel
launch, the memory its buffers held), the API serves it, its page draws it (lanes, zoom, a stage that opens its page), an older trace
without one says so, and a stored timeline is data checked like the rest of a trace."""
from __future__ import annotations
import copy
import json
import pytest
from conftest import ARTIFACTS, needs_chromium, running_server
from fastapi.testclient import TestClient
from stored_traces import copy_trace, stored_pair
from support import app_over
from explorer.present.timeline import busiest, kind_of, nest, timeline_view
from explorer.schema import validate_trace
from explorer.spec import SpecError

@pytest.fixture(scope="module")
def stored():
  db, staged, _ = stored_pair()
  old = "0ld7ime1ine00001"
  trace = copy_trace(db, staged, old)
  from explorer.store import Store
  Store(db).put_trace(old, {k: v for k, v in trace.items() if k != "timeline"}, Store(db).get_rewrites(staged))
  with TestClient(app_over(str(db))) as client:
    yield client, staged, old, Store(db).get_trace(staged)

def test_a_trace_records_its_stages_beside_tinygrads_profile(stored):
  """Each stage that ran, in order, as long as its stage_seconds; tinygrad's schedule and codegen groups inside them, each compile that
  ran on a lane of its own; every kernel the run stage launched on the trace's device, by tinygrad's name, in schedule order; memory
  in use, never below nothing."""
  client, staged, _, trace = stored
  r = client.get(f"/api/traces/{staged}/timeline")
  assert r.status_code == 200, r.text
  tl = r.json()
  assert tl["lanes"][:3] == ["stages", "tensor", "tinygrad"] and tl["unit"] == "us" and tl["left_out"] == 0
  stages = [s for s in tl["stages"] if s["name"] in trace["stage_seconds"]]
  assert [s["name"] for s in stages] == list(trace["stage_seconds"])
  for s in stages:
    assert s["en"] - s["st"] == pytest.approx(trace["stage_seconds"][s["name"]] * 1e6, rel=0.02, abs=500), s
  names, lanes = tl["names"], tl["lanes"]
  host = [(names[n], st, en) for ln, n, st, en in tl["ranges"] if lanes[ln] == "tinygrad"]
  (codegen,) = [s for s in stages if s["name"] == "codegen"]
  assert any(n.startswith("Schedule") for n, _, _ in host)
  inside = [n for n, st, en in host if codegen["st"] <= st and en <= codegen["en"]]
  assert sum(n.startswith("do_to_program") or n.startswith("get_program") for n in inside) >= len(trace["kernels"]), set(inside)
  compiled = {names[n] for ln, n, st, en in tl["ranges"] if lanes[ln] == "compile" and codegen["st"] <= st and en <= codegen["en"]}
  assert compiled == {k["name"] for k in trace["kernels"] if not k["compile_cached"]}  # each compile that ran, by its kernel
  (run,) = [s for s in stages if s["name"] == "run"]
  launched = [names[n] for ln, n, at in tl["runs"] if lanes[ln] == trace["env"]["device"] and run["st"] <= at <= run["en"]]
  in_order = [trace["kernels"][s["kernel"]]["name"] for s in trace["schedule"] if s["kernel"] is not None]
  assert launched == in_order, (launched, in_order)
  mem = tl["memory"][trace["env"]["device"]]
  assert max(n for _, n in mem) > 0 and all(n >= 0 for _, n in mem)

def test_the_timeline_page_draws_the_lanes_and_where_the_seconds_went(stored):
  client, staged, _, trace = stored
  page = client.get(f"/t/{staged}/timeline")
  assert page.status_code == 200 and 'id="timeline-data"' in page.text and "Where tinygrad" in page.text
  assert 'href="/t/' + staged + '/timeline"' in client.get(f"/t/{staged}").text  # the ribbon's entry
  view = timeline_view(trace["timeline"], lambda stage, realize: f"/{stage}")
  assert [lane["name"] for lane in view["lanes"]][:3] == ["stages", "tensor", "tinygrad"]
  assert view["busiest"] and view["busiest"][0]["us"] <= view["end"]

def test_an_older_trace_says_it_has_no_timeline(stored):
  client, _, old, _ = stored
  r = client.get(f"/api/traces/{old}/timeline")
  assert r.status_code == 409 and "before traces kept a timeline" in r.json()["detail"]
  page = client.get(f"/t/{old}/timeline")
  assert page.status_code == 200 and "before traces kept a timeline" in page.text and "timeline-data" not in page.text

def test_a_stored_timeline_is_checked_as_data(stored):
  """A trace file's timeline naming a lane it lacks, a time that is no number, or a row of the wrong length is refused in one line."""
  _, _, _, trace = stored
  good = json.loads(json.dumps(trace))
  validate_trace(good)
  for spoil, said in ((lambda t: t["ranges"].append([99, 0, 1.0, 2.0]), "names a lane or name"),
                      (lambda t: t["runs"].append([0, 10 ** 6, 1.0]), "names a lane or name"),
                      (lambda t: t["ranges"].append([0, 0, "1", 2.0]), "timeline.ranges"),
                      (lambda t: t["stages"].append({"name": "run", "realize": None, "st": float("nan"), "en": 1.0}), "timeline.stages"),
                      (lambda t: t["memory"].setdefault("CPU", []).append([1.0]), "timeline.memory")):
    bad = copy.deepcopy(good)
    spoil(bad["timeline"])
    with pytest.raises(SpecError, match=said): validate_trace(bad)

def test_spans_nest_as_tinygrad_ran_them():
  assert nest([(0, 10), (1, 4), (2, 3), (5, 9), (11, 12)]) == [0, 1, 2, 1, 0]
  assert kind_of("do_to_program for r_16_16") == "do_to_program" and kind_of("Schedule 3 Kernels n2") == "Schedule"
  tl = {"lanes": ["stages", "tensor", "tinygrad"], "names": ["graph_rewrite", "Schedule 1 Kernel n1", "Schedule 2 Kernels n2"],
        "ranges": [[2, 1, 0, 10], [2, 0, 1, 3], [2, 0, 2, 3], [2, 2, 20, 25]], "runs": [], "memory": {}, "stages": [], "unit": "us",
        "left_out": 0}
  assert busiest(tl) == [{"name": "Schedule", "us": 15, "count": 2}, {"name": "graph_rewrite", "us": 2, "count": 2}]  # nested once

@pytest.mark.browser
@needs_chromium
def test_the_timeline_in_a_browser_zooms_and_a_stage_opens_its_page(tmp_path_factory, browser):
  db, staged, _ = stored_pair()
  with running_server(db, tmp_path_factory.mktemp("timeline-live")) as base:
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{base}/t/{staged}/timeline")
    page.wait_for_selector("#timeline svg")
    for lane in ("stages", "tinygrad"):
      assert page.locator(f'#timeline g[data-lane="{lane}"] rect').count() > 0, lane
    assert page.locator("#timeline .tl-run").count() > 0 and page.locator("#timeline .tl-memory").count() > 0
    whole = page.inner_text("#timeline-window")
    page.click('[data-zoom="in"]')
    assert page.inner_text("#timeline-window") != whole
    page.click('[data-zoom="all"]')
    page.screenshot(path=str(ARTIFACTS / "browser_timeline.png"), full_page=True)
    page.locator('#timeline a.tl-stage[data-stage="schedule"]').first.click()
    page.wait_for_url(f"**/t/{staged}/rangeify")
    assert not errors, errors
    page.close()
