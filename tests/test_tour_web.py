"""Teaching tours over HTTP: step texts computed from each trace's numbers, every step's page with its view, the one-click built-in
tour (two traces through the job machinery), annotations (round trip, anchors, escaping, limits) and the glossary on every page.
Real traces: the session's `small` Winograd trace and `small` direct (the built-in "winograd" tour is exactly that pair)."""
from __future__ import annotations
import re
import subprocess
import sys
import textwrap
import pytest
from conftest import REPO, trace_of, wait_done
from explorer.store import Store
from explorer.web.routes import tours

@pytest.fixture(scope="module")
def pair(web_client) -> dict:
  """The built-in "winograd" tour started the way the home page's button does: one POST, then a redirect to the tour. Its Winograd side
  was traced first as the home page's form traces it (default targets): the tour reuses it."""
  stored = trace_of(web_client, {"preset": "small", "variant": {"algo": "winograd"}})
  r = web_client.post("/tours/winograd", follow_redirects=False)
  assert r.status_code == 303, r.text
  url = r.headers["location"]
  m = re.fullmatch(r"/tours/winograd\?a=([0-9a-f]{16})&b=([0-9a-f]{16})", url)
  assert m, url
  a, b = m.groups()
  assert b == stored  # the Winograd trace the user already has is reused from the store, not run again
  for x in (a, b): assert wait_done(web_client, x)["status"] == "done"
  return {"a": a, "b": b, "url": url}

def steps_of(client, trace_id: str, target: str | None = None) -> dict[str, dict]:
  r = client.get(f"/api/traces/{trace_id}/tour" + (f"?target={target}" if target else ""))
  assert r.status_code == 200, r.text
  return {s["id"]: s for s in r.json()["steps"]}

def test_tour_texts_come_from_each_traces_numbers(web_client, pair):
  direct, wino = steps_of(web_client, pair["a"]), steps_of(web_client, pair["b"])
  raw = {k: web_client.get(f"/api/traces/{pair[k]}/raw").json() for k in ("a", "b")}
  for (steps, tr), tid in zip(((direct, raw["a"]), (wino, raw["b"])), (pair["a"], pair["b"]), strict=False):
    assert all(s["url"] == f"/t/{tid}/tour?step={sid}" for sid, s in steps.items())
    assert f"{tr['tensor_graph']['uops']} UOps" in steps["tensor"]["text"]
    k0 = tr["kernels"][0]
    assert f"{k0['linear_uops']} uops" in steps["k0-uops"]["text"] and f"{k0['ops']['alu']} ALU ops" in steps["k0-uops"]["text"]
    assert f"created {tr['scheduler']['stage_counts']['created']} STAGE" in steps["bufferize"]["text"]
  assert direct["tensor"]["text"] != wino["tensor"]["text"] and direct["k0-uops"]["text"] != wino["k0-uops"]["text"]
  for k in ("a", "b"):  # and the page serves the same sentences
    uops = raw[k]["tensor_graph"]["uops"]
    assert f"lazy tensor graph of {uops} UOps" in web_client.get(f"/t/{pair[k]}/tour?step=tensor").text
  assert raw["a"]["tensor_graph"]["uops"] != raw["b"]["tensor_graph"]["uops"]
  assert "constants" in wino and "constants" not in direct and "k3-ast" in wino and "k1-ast" not in direct
  assert wino["k0-ast"]["view_url"] == f"/t/{pair['b']}/k/0" and wino["k0-source"]["url"] == f"/t/{pair['b']}/tour?step=k0-source"

def test_tour_page_shows_the_step_beside_its_view(web_client, pair):
  tid = pair["b"]
  steps = steps_of(web_client, tid)
  r = web_client.get(f"/t/{tid}/tour?step=k1-ast")
  assert r.status_code == 200
  html = r.text
  assert 'data-step="k1-ast"' in html and 'data-ref="ast/1"' in html and 'id="glossary-panel"' in html
  text = steps["k1-ast"]["text"].replace("'", "&#39;").replace(">", "&gt;")
  assert text in html
  assert f'data-prev="/t/{tid}/tour?step=k0-source"' in html and f'data-next="/t/{tid}/tour?step=k1-codegen"' in html
  first = web_client.get(f"/t/{tid}/tour?step=no-such-step").text  # an unknown step opens the first one
  assert 'data-step="tensor"' in first and "data-prev" not in first.split('id="tour"')[1].split(">")[0]
  assert 'data-next="/t/' in web_client.get(f"/t/{tid}/tour?step=k0-ast&big=1").text and "big=1" in web_client.get(f"/t/{tid}/tour?big=1").text

def test_every_step_renders_its_view(web_client, pair):
  """On a target the trace did not render (CUDA): the tour computes its records first, and every step's view shows them."""
  tid = pair["b"]
  assert "cuda" not in web_client.get(f"/api/traces/{tid}/raw").json()["kernels"][0].get("targets", {})
  expect = {"graph/tensor": 'data-ref="tensor"', "rangeify": 'data-ref="rangeify/', "bufferize": 'id="tour-stage-table"',
            "source": "constant: a device copy", "timings": 'id="tour-timing-table"'}
  for sid, s in steps_of(web_client, tid, "cuda").items():
    html = web_client.get(s["url"]).text
    view = s["view"]
    if view in expect: marker = expect[view]
    elif view.endswith("/passes"): marker = 'id="tour-pass-table"'
    elif view.endswith("/uops"): marker = 'class="listing"'
    elif view.endswith("/source"): marker = 'data-panel="cuda"'
    else: marker = f'data-ref="ast/{view.split("/")[1]}"'
    assert marker in html, (sid, view)

def test_builtin_tour_pair(web_client, pair):
  r = web_client.get(pair["url"] + "&step=compare")
  assert r.status_code == 200 and 'id="tour-ab-table"' in r.text and 'data-step="compare"' in r.text
  assert 'href="/diff/{}/{}"'.format(pair["a"], pair["b"]) in r.text
  first = web_client.get(pair["url"]).text  # the first step offers the comparison from its contents
  contents = first.split('id="tour-contents"')[1].split("</nav>")[0]
  assert 'id="tour-compare-link"' in contents and "step=compare" in contents and "direct" in contents and "winograd" in contents
  api = web_client.get(f"/api/tours/winograd?a={pair['a']}&b={pair['b']}").json()
  ids = [s["id"] for s in api["steps"]]
  assert ids[0] == "a-tensor" and "compare" in ids and ids[-1] == "b-timing"
  cmp = next(s for s in api["steps"] if s["id"] == "compare")["text"]
  assert "1 kernel (conv)" in cmp and "4 kernels" in cmp
  a_raw = web_client.get(f"/api/traces/{pair['a']}/raw").json()
  assert f"{sum(k['ops']['alu'] for k in a_raw['kernels'])} ALU uops" in cmp
  again = web_client.post("/api/tours/winograd")  # both stored: nothing runs again
  assert again.status_code == 200 and again.json()["a"]["cached"] and again.json()["url"] == pair["url"]
  assert web_client.get("/tours/winograd", follow_redirects=False).headers["location"] == pair["url"]
  listed = {t["kind"]: t for t in web_client.get("/api/tours").json()}
  assert set(listed) == {"constants", "fusion", "winograd", "codegen", "versions"} and listed["winograd"]["url"] == pair["url"]
  assert web_client.get("/tours/nope").status_code == 404 and web_client.post("/api/tours/nope").status_code == 404
  home = web_client.get("/").text
  assert home.count('action="/tours/') == len(listed)

def test_tour_of_a_running_pair_shows_progress(web_client, pair):
  page = web_client.get(f"/tours/winograd?a={pair['a']}&b=0123456789abcdef")
  assert page.status_code == 200 and 'data-tour-progress' in page.text and "no trace 0123456789abcdef" in page.text

def test_annotations_round_trip(web_client, pair):
  tid, url = pair["b"], f"/api/traces/{pair['b']}/annotations"
  steps_of(web_client, tid, "cuda")  # the tour on CUDA renders its records: its lines can hold notes
  made = [web_client.post(url, json=body) for body in ({"anchor_kind": "step", "anchor": "k0-ast", "text": "  the weight transform  "},
                                                       {"anchor_kind": "node", "anchor": "ast/1#3", "text": "this node"},
                                                       {"anchor_kind": "line", "anchor": "1:cuda:5", "text": "this line"},
                                                       {"anchor_kind": "line", "anchor": "2:uops:1", "text": "first uop"})]
  assert [r.status_code for r in made] == [201] * 4, [r.text for r in made]
  assert made[0].json()["text"] == "the weight transform"  # trimmed
  listed = web_client.get(url).json()
  assert [n["anchor"] for n in listed if n["id"] in {r.json()["id"] for r in made}] == ["k0-ast", "ast/1#3", "1:cuda:5", "2:uops:1"]
  page = web_client.get(f"/t/{tid}/tour?step=k0-ast").text
  assert "the weight transform" in page and "✎1" in page  # shown on its step, counted in the step list
  assert "the weight transform" in web_client.get(pair["url"] + "&step=b-k0-ast").text  # and on the pair tour's B side
  assert web_client.delete(f"{url}/{made[1].json()['id']}").status_code == 204
  assert web_client.delete(f"{url}/{made[1].json()['id']}").status_code == 404
  assert len(web_client.get(url).json()) == len(listed) - 1
  assert Store(web_client.app.state.services.store.path).annotations(tid)[-1]["text"] == "first uop"  # the store method exports use
  for r in made: web_client.delete(f"{url}/{r.json()['id']}")

def test_annotation_text_is_escaped(web_client, pair):
  tid = pair["b"]
  text = "<script>alert(1)</script> & <b>x</b>"
  r = web_client.post(f"/api/traces/{tid}/annotations", json={"anchor_kind": "step", "anchor": "tensor", "text": text})
  assert r.status_code == 201
  page = web_client.get(f"/t/{tid}/tour?step=tensor").text
  assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;x&lt;/b&gt;" in page and "<script>alert(1)" not in page
  web_client.delete(f"/api/traces/{tid}/annotations/{r.json()['id']}")

@pytest.mark.parametrize("body, status, message", [
  ({"anchor_kind": "step", "anchor": "tensor", "text": "x" * (tours.MAX_NOTE_CHARS + 1)}, 422, "at most 2000 characters"),
  ({"anchor_kind": "step", "anchor": "tensor", "text": "   "}, 422, "at least 1 character"),
  ({"anchor_kind": "pixel", "anchor": "tensor", "text": "x"}, 422, "anchor_kind"),
  ({"anchor_kind": "step", "anchor": "k9-ast", "text": "x"}, 422, "no step 'k9-ast'"),
  ({"anchor_kind": "node", "anchor": "ast/9#1", "text": "x"}, 422, "no kernel 9"),
  ({"anchor_kind": "node", "anchor": "ast/1", "text": "x"}, 422, "node anchor"),
  ({"anchor_kind": "line", "anchor": "0:cuda:99999", "text": "x"}, 422, "lines"),
  ({"anchor_kind": "line", "anchor": "0:ptx:1", "text": "x"}, 422, "no ptx source"),
  ({"anchor_kind": "step", "anchor": "tensor", "text": "x", "extra": 1}, 422, "extra"),
])
def test_annotation_limits(web_client, pair, body, status, message):
  r = web_client.post(f"/api/traces/{pair['b']}/annotations", json=body)
  assert r.status_code == status and message in r.json()["detail"], r.text

def test_annotation_count_limit_and_unknown_trace(web_client, pair, monkeypatch):
  tid = pair["a"]
  monkeypatch.setattr(tours, "MAX_NOTES_PER_TRACE", 2)
  made = [web_client.post(f"/api/traces/{tid}/annotations", json={"anchor_kind": "step", "anchor": "tensor", "text": f"n{i}"}) for i in range(3)]
  assert [r.status_code for r in made] == [201, 201, 409] and "2 notes" in made[2].json()["detail"]
  for r in made[:2]: web_client.delete(f"/api/traces/{tid}/annotations/{r.json()['id']}")
  assert web_client.get("/api/traces/0123456789abcdef/annotations").status_code == 404
  assert web_client.post("/api/traces/0123456789abcdef/annotations", json={"anchor_kind": "step", "anchor": "x", "text": "x"}).status_code == 404

def test_store_annotations_go_with_their_trace(tmp_path):
  store = Store(tmp_path / "s.sqlite3")
  note = store.add_annotation("t1", "line", "0:cuda:3", "hello")
  assert note is not None and store.annotations("t1") == [note] and store.annotations("t2") == []
  assert store.add_annotation("t1", "step", "tensor", "full", max_per_trace=1) is None
  store.delete_trace("t1")
  assert store.annotations("t1") == []

def test_glossary_on_every_page(web_client, pair):
  g = web_client.get("/glossary")
  assert g.status_code == 200
  for term in ("UOp", "RANGE", "STAGE / bufferize", "REDUCE", "LOAD / STORE", "upcast", "global / local size", "xhat", "ghat", "mhat", "out"):
    assert term in g.text, term
  tid = pair["b"]
  for url in ("/", f"/t/{tid}", f"/t/{tid}/bufferize", f"/t/{tid}/k/1", f"/t/{tid}/rangeify", f"/t/{tid}/graph/tensor", f"/t/{tid}/tour",
              pair["url"]):
    html = web_client.get(url).text
    assert 'id="glossary-panel"' in html and 'href="/glossary" data-glossary' in html and "data-big-toggle" in html, url
  kernel = web_client.get(f"/t/{tid}/k/1").text
  assert 'id="kernel-notes"' in kernel and 'data-graph-ref="ast/1"' in kernel and f'href="/t/{tid}/tour"' in kernel

def test_tour_pages_never_import_tinygrad(web_db, pair):
  script = textwrap.dedent(f"""
    import sys
    from fastapi.testclient import TestClient
    from explorer.settings import Settings
    from explorer.web.app import create_app
    app = create_app({str(web_db)!r}, settings=Settings.load(env={{}}))
    with TestClient(app) as c:
      for url in ("/t/{pair['b']}/tour?step=k1-source", "{pair['url']}&step=compare", "/api/traces/{pair['b']}/tour", "/api/tours", "/glossary",
                  "/api/traces/{pair['b']}/annotations"):
        assert c.get(url).status_code == 200, url
    assert "tinygrad" not in sys.modules and "explorer.tracing.tg" not in sys.modules, "the server imported tinygrad"
    print("ok")
  """)
  r = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
