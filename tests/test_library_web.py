"""Stored traces on the web: the library (search, pages, deletion with a confirmation), permalinks that reproduce the stored result
(across a restart; from another tinygrad or device: a banner; a rewrite blob this tinygrad cannot load: the cached layouts, said so)."""
from __future__ import annotations
import pytest
from fastapi.testclient import TestClient
from stored_traces import copy_trace, stored_pair
from support import app_over
from explorer.store import Store
from explorer.web.services import provenance

@pytest.fixture(scope="module")
def lib():
  db, staged, fused = stored_pair()
  with TestClient(app_over(str(db))) as client: yield client, db, staged, fused

def test_library_lists_searches_and_pages(lib):
  client, db, staged, fused = lib
  page = client.get("/traces")
  assert page.status_code == 200 and staged in page.text and fused in page.text and 'id="library-table"' in page.text
  only_fused = client.get("/traces?staging=fused").text
  assert fused in only_fused and staged not in only_fused and 'value="fused" selected' in only_fused
  assert staged in client.get(f"/traces?q={staged[:6]}").text
  api = client.get("/api/library", params={"algo": "winograd", "staging": "staged"}).json()
  ids = {x["id"]: x for x in api["items"]}  # other tests may store more staged traces (copies, quick picks)
  assert staged in ids and fused not in ids and api["total"] == len(ids) and {x["staging"] for x in api["items"]} == {"staged"}
  assert ids[staged]["url"] == f"/t/{staged}" and ids[staged]["algo"] == "winograd"
  p1, p2 = (client.get("/api/library", params={"q": "winograd", "per_page": 1, "page": n}).json() for n in (1, 2))
  assert p1["total"] >= 2 and p1["pages"] >= 2 and p1["items"][0]["id"] != p2["items"][0]["id"]
  assert client.get("/api/library", params={"opt": "beam"}).json()["total"] == 0
  assert client.get("/api/library", params={"per_page": 0}).status_code == 422
  assert client.get("/traces?q=no-such-trace").text.count("No stored trace matches") == 1

def test_delete_needs_a_confirmation_and_drops_everything(lib):
  client, db, staged, _ = lib
  copy_trace(db, staged, "d0d0d0d0d0d0d0d0")
  store = Store(db)
  store.put_cached("d0d0d0d0d0d0d0d0", "kernels", "svg", "<svg/>"); store.put_diff("d0d0d0d0d0d0d0d0", staged, "numerics", {"compared": True})
  confirm = client.get("/traces/d0d0d0d0d0d0d0d0/delete")
  assert confirm.status_code == 200 and "Delete this trace?" in confirm.text and 'name="confirm" value="yes"' in confirm.text
  assert client.post("/traces/d0d0d0d0d0d0d0d0/delete", data={}).status_code == 422 and store.has_trace("d0d0d0d0d0d0d0d0")
  r = client.post("/traces/d0d0d0d0d0d0d0d0/delete", data={"confirm": "yes"}, follow_redirects=False)
  assert r.status_code == 303 and r.headers["location"] == "/traces?deleted=d0d0d0d0d0d0d0d0"
  assert "Deleted trace" in client.get(r.headers["location"]).text
  assert not store.has_trace("d0d0d0d0d0d0d0d0") and store.get_cached("d0d0d0d0d0d0d0d0", "kernels", "svg") is None
  assert store.get_diff("d0d0d0d0d0d0d0d0", staged, "numerics") is None
  assert client.get("/t/d0d0d0d0d0d0d0d0").status_code == 404
  copy_trace(db, staged, "e0e0e0e0e0e0e0e0")
  assert client.delete("/api/traces/e0e0e0e0e0e0e0e0").json() == {"id": "e0e0e0e0e0e0e0e0", "deleted": True}
  assert client.delete("/api/traces/e0e0e0e0e0e0e0e0").status_code == 404

def test_permalink_reproduces_the_stored_trace_after_a_restart(lib):
  client, db, staged, _ = lib
  stored = Store(db).get_trace(staged)
  assert client.get(f"/api/traces/{staged}/raw").json() == stored
  page = client.get(f"/t/{staged}").text
  with TestClient(app_over(str(db))) as again:  # a new server over the same file
    assert again.get(f"/api/traces/{staged}/raw").json() == stored
    table = lambda html: html[html.index('id="kernel-table"'):html.index("</table>", html.index('id="kernel-table"'))]
    assert table(again.get(f"/t/{staged}").text) == table(page)
  assert 'id="provenance"' not in page  # this server's tinygrad and device

def test_a_trace_from_another_tinygrad_and_device_says_so(lib):
  client, db, staged, _ = lib
  copy_trace(db, staged, "0130000000000000", tinygrad="0.13.0", device="CUDA", host="gpu-box")
  assert provenance.server_device(wait_s=90) == "CPU"  # asked once of tinygrad, in a worker
  page = client.get("/t/0130000000000000").text
  assert 'id="provenance"' in page and 'data-differs="tinygrad device"' in page
  assert "tinygrad 0.13.0" in page and "this server runs tinygrad 0.14.0 on CPU" in page and "gpu-box" in page
  assert 'id="provenance"' in client.get("/t/0130000000000000/k/0").text  # on every view of the trace

def test_a_rewrite_blob_this_tinygrad_cannot_load_falls_back_to_the_cached_layouts(lib):
  client, db, staged, _ = lib
  assert client.get(f"/api/traces/{staged}/graphs/tensor.svg").status_code == 200  # laid out (and cached) while the blob loads
  copy_trace(db, staged, "0b10b0000000000", rewrites=b"not a rewrite trace", tinygrad="0.13.0")
  store = Store(db)
  for kind in ("view", "svg"): store.put_cached("0b10b0000000000", "tensor", kind, store.get_cached(staged, "tensor", kind))
  assert client.get("/api/traces/0b10b0000000000/graphs/tensor.svg").text == store.get_cached(staged, "tensor", "svg")  # cached: no expansion
  full = client.get("/api/traces/0b10b0000000000/graphs/tensor?full=1")  # never laid out in full: the worker tries the blob, then the cache
  assert full.status_code == 200, full.text
  assert "cannot load the stored rewrites" in full.json()["notes"][0] and "cached" in full.json()["notes"][0]
  ast = client.get("/api/traces/0b10b0000000000/graphs/ast/0")
  assert ast.status_code == 409 and "cannot load the stored rewrites" in ast.json()["detail"] and "no earlier layout" in ast.json()["detail"]
  assert client.get("/t/0b10b0000000000").status_code == 200  # the page itself is the stored JSON

def test_a_studys_traces_are_on_its_page_not_in_the_library(lib):
  """A study traces each of its variants; the library leaves those out (saying how many, with a link to show them), the API lists all."""
  client, db, staged, fused = lib
  made = "5d00000000000001"
  copy_trace(db, fused, made)
  store = Store(db)
  store.put_task("study", "5d0000000001", "a study", {"kind": "fusion"}, "test", "running")
  store.task_finished("study", "5d0000000001", "done", result={"cases": [{"preset": "wino8", "rows": [{"name": "fused", "trace_id": made}]}]})
  page = client.get("/traces").text
  assert f"/t/{made}" not in page and f"/t/{fused}" in page and 'id="library-studies"' in page and "made by studies" in page
  assert f"/t/{made}" in client.get("/traces?studies=1").text
  assert made in {x["id"] for x in client.get("/api/library", params={"per_page": 200}).json()["items"]}
