"""Every match of every pass through the API: paged with `total` equal to the pass's recorded match count, for the host's passes and a
target's, each match with its rule's source, time and before/after; a pass's graph as Python; stepping past the replay window."""
from __future__ import annotations
import re
import pytest
from fastapi.testclient import TestClient
from support import WINO8_BUILTIN, app_over, shared_run
from explorer.store import Store
from explorer.web.services.graphs import MAX_STEPS

TID = "00000000000000dd"

@pytest.fixture(scope="module")
def client(tmp_path_factory):
  run = shared_run("wino8", True, **WINO8_BUILTIN)  # cuda and ptx among its targets
  db = tmp_path_factory.mktemp("interrogate") / "s.sqlite3"
  Store(db).put_trace(TID, run.trace, run.rewrites, run.target_rewrites)
  with TestClient(app_over(str(db))) as c:
    c.trace, c.store = run.trace, Store(db)  # type: ignore[attr-defined]
    yield c

def _url(p: dict, what: str = "matches") -> str: return f"/api/traces/{TID}/rewrites/{p['group']}/{p['step']}/{what}"

def test_every_match_of_a_pass_pages_through_with_its_rule(client):
  p = next(p for k in client.trace["kernels"] for p in k["passes"] if 120 < p["matches"] < 800)  # more than one page
  seen = []
  for offset in range(0, p["matches"], 100):
    got = client.get(_url(p), params={"offset": offset, "limit": 100}).json()
    assert got["total"] == p["matches"] and got["name"] == p["name"] and got["offset"] == offset
    seen += got["matches"]
  assert [m["index"] for m in seen] == list(range(1, p["matches"] + 1))
  assert re.fullmatch(r"codegen/__init__\.py:\d+", got["call"]) and "graph_rewrite(" in got["call_code"]
  for m in seen:
    assert re.fullmatch(r"[\w/]+\.py:\d+", m["rule"]) and m["rule_source"].strip() and m["time_s"] >= 0
    assert m["before"]["nodes"] and m["after"]["nodes"]
  assert any("UPat" in m["rule_source"] for m in seen) and any(ln.startswith(("+", "-")) for m in seen for ln in m["diff"])

def test_a_targets_passes_have_their_own_matches(client):
  rec = client.trace["kernels"][0]["targets"]["cuda"]
  big = max(rec["passes"], key=lambda q: q["matches"])
  got = client.get(_url(big), params={"target": "cuda", "offset": big["matches"] - 3, "limit": 50}).json()
  assert got["total"] == big["matches"] > 1000 and [m["index"] for m in got["matches"]] == list(range(big["matches"] - 2, big["matches"] + 1))
  host = client.trace["kernels"][0]["host_target"]
  assert client.get(_url(client.trace["kernels"][0]["passes"][0]), params={"target": host}).status_code == 200  # the host's own name: its blob

def test_past_the_replay_window_a_step_shows_the_match_itself(client):
  rec = client.trace["kernels"][0]["targets"]["cuda"]
  i, big = max(enumerate(rec["passes"]), key=lambda q: q[1]["matches"])
  view = client.get(f"/api/traces/{TID}/graphs/codegen@cuda/0/{i}/m{big['matches']}").json()
  assert big["matches"] > MAX_STEPS and view["nodes"] and view["highlight"] and view["rule"]
  assert f"Match {big['matches']} of {big['matches']}" in view["notes"][0]

def test_a_pass_as_python_and_the_errors(client):
  p = client.trace["kernels"][0]["passes"][0]
  got = client.get(_url(p, "python")).json()
  assert "UOp" in got["python"] and isinstance(got["cut"], bool)
  assert client.get(f"/api/traces/{TID}/rewrites/9999/0/matches").status_code == 404
  assert client.get(_url(p), params={"limit": 0}).status_code == 422
  assert client.get(_url(p), params={"limit": 501}).status_code == 422
  assert client.get(_url(p), params={"offset": p["matches"] + 1}).status_code == 404
  assert client.get(_url(p), params={"target": "nosuch"}).status_code == 404
  assert client.get("/api/traces/ffffffffffffffff/rewrites/0/0/matches").status_code == 404

def test_pages_read_right(client):
  """A mistyped page address gets the error page; passes are numbered as the pass list numbers them (from 1); the output error is
  shown against the tolerance it is judged by."""
  r = client.get(f"/t/{TID}/k/abc", headers={"accept": "text/html"})
  assert r.status_code == 422 and r.headers["content-type"].startswith("text/html") and "integer" in r.text
  assert client.get(f"/api/traces/{TID}/kernels/abc").headers["content-type"].startswith("application/json")
  assert client.get(f"/api/traces/{TID}/graphs/codegen/0/0/before").json()["title"].startswith("before pass 1 ")
  page = client.get(f"/t/{TID}").text
  err = client.trace["error"]
  assert err["tolerance_for"] == "F(4,3) float32" and err["within"] and err["tolerance"] == 1e-3
  assert 'id="error-judged"' in page and "≤ 1e-03, F(4,3) float32" in page

def test_the_ptx_view_shows_what_tinygrad_compiles(client):
  rec = client.get(f"/api/traces/{TID}/kernels/0/targets/ptx").json()
  assert ".version VERSION" in rec["source"] and ".target TARGET" in rec["source"]  # the renderer's output, as recorded
  assert "VERSION" not in rec["compiled_source"] and ".target sm_90" in rec["compiled_source"]
  page = client.get(f"/t/{TID}/k/0?target=ptx&code=ptx").text
  panel = page.split('data-panel="ptx"')[1].split('data-panel=')[0]
  assert "placeholders filled" in panel and "VERSION" not in panel

def test_every_stage_has_its_fate_its_buffer_and_its_node(client):
  """Fused, kept or realized: each row with bytes, the buffer it became (with its writer and readers) and a link to its node."""
  st, counts = client.trace["scheduler"]["stages"], client.trace["scheduler"]["stage_counts"]
  assert len(st["realized"]) == counts["realized"] == 3 and len(st["kept"]) == counts["kept"] == 1 and len(st["fused"]) == counts["fused"]
  bufs = client.trace["buffers"]
  for row in st["kept"] + st["realized"]:
    b = bufs[row["buffer"]]
    assert b["nbytes"] == row["nbytes"] and isinstance(row["num"], int)
  assert {bufs[r["buffer"]]["role"] for r in st["realized"]} >= {"output"}
  page = client.get(f"/t/{TID}/bufferize").text
  assert page.count('data-fate="realized"') == 3 and page.count('data-fate="kept"') == 1
  assert f'/rangeify?pass={st["debuf_pass"]}&amp;at=after&amp;node={st["realized"][0]["num"]}' in page
  view = client.get(f"/api/traces/{TID}/graphs/rangeify/{st['debuf_pass']}/after?full=1").json()
  assert any(n.get("num") == st["realized"][0]["num"] for n in view["nodes"])  # the node the link selects is in that graph

def test_index_arithmetic_can_be_hidden_or_shown(client):
  ref = f"/api/traces/{TID}/graphs/ast/1"
  shown, hidden = client.get(ref, params={"index": "show"}).json(), client.get(ref, params={"index": "hide"}).json()
  assert hidden["shown_nodes"] < shown["shown_nodes"] == shown["total_nodes"] and any("as asked" in n for n in hidden["notes"])
  assert "index=hide" in hidden["svg_url"] and client.get(hidden["svg_url"]).status_code == 200
  assert client.get(ref, params={"index": "bogus"}).status_code == 422

def test_match_steps_carry_trace_numbers_and_lay_out_stably(client):
  """Stepping match by match, the UOps a step leaves alone keep their number, so the stable layout can keep them in place."""
  rec = client.trace["kernels"][0]["targets"]["cuda"]
  i = next(i for i, p in enumerate(rec["passes"]) if 3 <= p["matches"] <= 60)
  base = f"/api/traces/{TID}/graphs/codegen@cuda/0/{i}"
  m1, m2 = client.get(f"{base}/m1").json(), client.get(f"{base}/m2").json()
  shared = {n["num"] for n in m1["nodes"] if "num" in n} & {n["num"] for n in m2["nodes"] if "num" in n}
  assert shared
  assert client.get(f"{base}/m1.svg").status_code == 200  # lays m1 out and keeps where its UOps went
  r = client.get(f"{base}/m2.svg", params={"stable_from": f"codegen@cuda/0/{i}/m1"})
  assert r.status_code == 200 and r.headers["cache-control"] == "no-store" and r.text.startswith("<svg")
  p1, p2 = (client.store.get_cached_json(TID, f"codegen@cuda/0/{i}/{m}", "pos") for m in ("m1", "m2"))
  kept = [k for k in p1 if k in p2]
  assert kept and all(abs(p1[k][0] - p2[k][0]) < 0.5 and abs(p1[k][1] - p2[k][1]) < 0.5 for k in kept)  # drawn where they were
  assert client.get(f"{base}/m2.svg", params={"stable_from": "nonsense"}).status_code == 404

def test_a_cut_off_node_can_be_opened(client, tmp_path):
  """Over the node limit the graph keeps the nodes nearest its output; opening a cut-off node (by trace number) adds its inputs.
  A server with a 40-node limit, so that wino8's kernel graphs are over it."""
  db = tmp_path / "small-limit.sqlite3"
  src = client.store
  Store(db).put_trace(TID, src.get_trace(TID), src.get_rewrites(TID), {"cuda": src.get_rewrites(TID, "cuda")})
  with TestClient(app_over(str(db), graph_node_limit=40)) as small:
    ref = f"/api/traces/{TID}/graphs/codegen@cuda/0/0/before"
    view = small.get(ref, params={"index": "show"}).json()
    cut = [n for n in view["nodes"] if n.get("truncated") and "num" in n]
    assert view["shown_nodes"] < view["total_nodes"] and cut
    opened = small.get(ref, params={"index": "show", "expand": str(cut[0]["num"])}).json()
    assert opened["shown_nodes"] > view["shown_nodes"] and any("Opened 1 cut-off node" in n for n in opened["notes"])
    assert f"expand={cut[0]['num']}" in opened["svg_url"] and small.get(opened["svg_url"]).status_code == 200
    assert small.get(ref, params={"expand": "x"}).status_code == 422

def test_trace_numbers_order_uops_by_the_pass_that_made_them(client):
  """The nodes new after a top-level pass (the view outlines them) are numbered after the graph the pass started from and no later than
  the graph the next pass starts from; and the node pane's "made by" (the origin API, replayed from the rewrite log) credits each to a
  match of that pass, or, for a node rebuilt around a match (no rule made it), to the graph the next pass starts from."""
  rec = client.trace["kernels"][0]["targets"]["cuda"]
  passes = rec["passes"]
  checked = 0
  for i, p in enumerate(passes[:-1]):
    if not p["matches"] or p["depth"] or passes[i + 1]["depth"]: continue
    view = client.get(f"/api/traces/{TID}/graphs/codegen@cuda/0/{i}/after", params={"index": "show", "full": 1}).json()
    new = [n["num"] for n in view["nodes"] if n["id"] in set(view["highlight"]) and "num" in n]
    assert all(p["sink"] < num <= passes[i + 1]["sink"] for num in new), (p["name"], p["sink"], passes[i + 1]["sink"], new[:5])
    if new:
      made = client.get(f"/api/traces/{TID}/rewrites/{p['group']}/origins", params={"nums": ",".join(map(str, new[:32])), "target": "cuda"})
      assert made.status_code == 200, made.text
      for o in made.json():
        assert (o["kind"], o["step"]) in (("match", p["step"]), ("start", passes[i + 1]["step"])), (p["name"], o)
        if o["kind"] == "match": assert o["rule"] and o["name"] == p["name"] and 1 <= o["match"] <= p["matches"]
    checked += len(new)
    if checked > 200: break
  assert checked > 20
