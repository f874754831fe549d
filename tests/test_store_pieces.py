"""A program kept in pieces (explorer.store.pieces): each kernel's heavy part stored once per distinct content, so that a program of
10,000 kernels (a captured step repeated, as a long training loop records it) fits where it did not (the whole JSON was 1.1 GB, past
SQLite's 1 GB for a value), it reads back byte for byte, a trace's size grows with its distinct kernels, not its calls, and a store
written before parts reads as it did. Over a real captured program: the golden store, made by the store of commit 4cea94d (before
parts) from a trace of two layers, captured."""
from __future__ import annotations
import gzip
import json
import pathlib
import sqlite3
import zlib
import pytest
from fastapi.testclient import TestClient
from support import app_over, scaled
from explorer.store import Store, StoreError

GOLDEN = pathlib.Path(__file__).parent / "golden" / "store_v1.sqlite3.gz"
PROGRAM = "5fdf6bd857dee0fd"  # "layer, contiguous": a captured program of two kernels

@pytest.fixture
def v1(tmp_path) -> pathlib.Path:
  """A copy of the golden store written before parts."""
  path = tmp_path / "v1.sqlite3"
  path.write_bytes(gzip.decompress(GOLDEN.read_bytes()))
  return path

def stored_json(db: pathlib.Path, trace_id: str) -> str:
  return sqlite3.connect(db).execute("SELECT trace FROM traces WHERE id = ?", (trace_id,)).fetchone()[0]

def parts(db: pathlib.Path) -> tuple[int, int]:
  """(how many parts, their bytes) in the store."""
  return sqlite3.connect(db).execute("SELECT count(*), coalesce(sum(length(body)), 0) FROM kernel_parts").fetchone()

def test_a_store_written_before_parts_reads_as_it_did_and_serves_its_pages(v1):
  whole = json.loads(stored_json(v1, PROGRAM))
  assert all("uops_listing" in k and "targets" in k for k in whole["kernels"])  # the old layout: every kernel whole in the row
  store = Store(v1)
  assert json.dumps(store.get_trace(PROGRAM)) == json.dumps(whole)
  assert json.loads(stored_json(v1, PROGRAM)) == whole  # opened by this version, left as it was
  store.close()
  with TestClient(app_over(v1)) as client:
    for url in (f"/t/{PROGRAM}", f"/t/{PROGRAM}/k/0", f"/t/{PROGRAM}/k/1", f"/api/traces/{PROGRAM}", f"/api/traces/{PROGRAM}/kernels/1"):
      assert client.get(url).status_code == 200, url

def test_a_trace_reads_back_byte_for_byte_from_its_pieces(v1, tmp_path):
  trace = Store(v1).get_trace(PROGRAM)
  store = Store(tmp_path / "new.sqlite3")
  store.put_trace(PROGRAM, trace, b"")
  assert json.dumps(store.get_trace(PROGRAM)) == json.dumps(trace)  # the kernels' fields in their order too
  row = json.loads(stored_json(tmp_path / "new.sqlite3", PROGRAM))
  assert all(k["uops_listing"] is None and k["targets"] is None and k["name"] for k in row["kernels"])  # the row: what a listing reads
  assert all(k["provenance"] is None and k["ops"] is None for k in row["kernels"])  # what a program's repeats share: in the part too
  assert parts(tmp_path / "new.sqlite3")[0] == 2

def test_ten_thousand_kernels_are_stored_and_repeats_cost_nothing(v1, tmp_path):
  """The issue's program: 10,000 kernels of one repeated step store, read back equal, and take the parts of one step: ten steps are
  the size of one plus their rows."""
  step = Store(v1).get_trace(PROGRAM)
  db = tmp_path / "big.sqlite3"
  store = Store(db)
  store.put_trace("a" * 16, step, b"")
  one = parts(db)
  store.put_trace("b" * 16, ten := scaled(step, 20), b"")
  store.put_trace("c" * 16, big := scaled(step, 10_000), b"")
  assert parts(db) == one and len(big["kernels"]) == 10_000
  assert len(stored_json(db, "b" * 16)) < len(json.dumps(ten)) / 5  # ten steps' row: a fraction of what they were whole
  assert json.dumps(store.get_trace("b" * 16)) == json.dumps(json.loads(json.dumps(ten)))
  got = store.get_trace("c" * 16)
  assert len(got["kernels"]) == 10_000 and got["kernels"][9_999] == json.loads(json.dumps(big["kernels"][9_999]))
  assert db.stat().st_size < 40 * 2**20  # the whole JSON was 1.1 GB for 10,000 kernels of a two-conv step (3.4 MB here, unrepeated)

def test_what_is_merged_into_one_kernel_stays_with_it(v1, tmp_path):
  """Kernels that share a part share its values when the trace is read, records included: what is computed for one kernel since (a
  target's record, compile facts: enrichments, merged when the trace is read) lands on that kernel alone, on copies of its own."""
  store = Store(tmp_path / "m.sqlite3")
  store.put_trace("d" * 16, scaled(Store(v1).get_trace(PROGRAM), 4), b"")
  a, b = store.get_trace("d" * 16)["kernels"][0:3:2]  # the same kernel, a step apart
  host = a["host_target"]
  assert a["uops_listing"] is b["uops_listing"] and a["targets"][host] is b["targets"][host]
  facts = {"ok": None, "compiler": None, "message": "elsewhere"}
  assert store.put_target_records("d" * 16, "cuda", {0: {**a["targets"][host], "name": "on cuda"}}, "cuda", b"")
  assert store.put_enrichments("d" * 16, "facts", {(0, host): facts})
  a, b = store.get_trace("d" * 16)["kernels"][0:3:2]
  assert a["targets"]["cuda"]["name"] == "on cuda" and a["targets"][host]["compile"] == facts and "cuda" in a["sources"]
  assert "cuda" not in b["targets"] and "cuda" not in b["sources"] and b["targets"][host].get("compile") != facts
  assert a["uops_listing"] is b["uops_listing"]

def test_a_deleted_trace_takes_only_its_own_parts(v1, tmp_path):
  db = tmp_path / "d.sqlite3"
  store, step = Store(db), Store(v1).get_trace(PROGRAM)
  store.put_trace("e" * 16, step, b"")
  store.put_trace("f" * 16, scaled(step, 4), b"")  # the same parts
  assert store.delete_trace("e" * 16) and parts(db)[0] == 2  # still the other's
  assert store.get_trace("f" * 16) is not None
  assert store.delete_trace("f" * 16) and parts(db) == (0, 0)
  store.put_trace("f" * 16, step, b"")
  store.put_trace("f" * 16, {**step, "kernels": step["kernels"][:1]}, b"")  # stored again under its id: the dropped kernel's part goes
  assert parts(db)[0] == 1 and sqlite3.connect(db).execute("SELECT count(*) FROM kernel_refs").fetchone()[0] == 1

def test_a_damaged_part_is_a_clear_error(v1, tmp_path):
  """A stored part is read as data: one that does not parse, or parses to something other than a kernel's fields, is StoreError."""
  db = tmp_path / "c.sqlite3"
  store = Store(db)
  store.put_trace("g" * 16, Store(v1).get_trace(PROGRAM), b"")
  for body, says in (("{not json", "does not parse"), ("[1, 2]", "not an object")):
    with sqlite3.connect(db) as c: c.execute("UPDATE kernel_parts SET body = ?", (body,))
    with pytest.raises(StoreError, match=f"stored trace g{{16}} is corrupt: .*{says}"): store.get_trace("g" * 16)

def chunks(db: pathlib.Path, trace_id: str) -> dict[str, int]:
  return dict(sqlite3.connect(db).execute("SELECT field, count(*) FROM trace_chunks WHERE trace_id = ? GROUP BY field", (trace_id,)))

def test_a_long_programs_lists_are_kept_in_chunks_each_parsed_apart(v1, tmp_path):
  """A program's kernels, schedule and buffers past CHUNK items are kept beside its row in chunks (its row has them empty), read back
  in order, byte for byte; a short trace has none; a damaged or missing chunk is StoreError; deleting the trace takes its chunks."""
  from explorer.store.pieces import CHUNK
  step = Store(v1).get_trace(PROGRAM)
  db, big = tmp_path / "k.sqlite3", scaled(step, 2 * CHUNK + 3)
  store = Store(db)
  store.put_trace("h" * 16, big, b"")
  store.put_trace("i" * 16, step, b"")
  assert chunks(db, "h" * 16)["kernels"] == 3 and chunks(db, "i" * 16) == {}
  assert json.loads(stored_json(db, "h" * 16))["kernels"] == []
  assert json.dumps(store.get_trace("h" * 16)) == json.dumps(json.loads(json.dumps(big)))
  with sqlite3.connect(db) as c: c.execute("DELETE FROM trace_chunks WHERE trace_id = ? AND field = 'kernels' AND seq = 1", ("h" * 16,))
  with pytest.raises(StoreError, match="chunk 2 of its kernels is out of place"): store.get_trace("h" * 16)
  with sqlite3.connect(db) as c: c.execute("UPDATE trace_chunks SET body = '{\"a\": 1}' WHERE trace_id = ?", ("h" * 16,))
  with pytest.raises(StoreError, match="is corrupt: chunk 0 of its"): store.get_trace("h" * 16)
  assert store.delete_trace("h" * 16) and chunks(db, "h" * 16) == {} and store.get_trace("i" * 16) is not None

# ***** a part's two halves: what the pages of a program read (light), and what only a kernel's own page, an export or a diff does *****

GOLDEN_V2 = pathlib.Path(__file__).parent / "golden" / "store_v2.sqlite3.gz"  # parts stored whole, by fb4ac21: golden/make_store_v2.py

def light_of_whole(k: dict, computed: tuple[str, ...] = ()) -> dict:
  """What a kernel read light is, from the kernel read whole: its fields less the heavy ones, its records' too (but those `computed` since
  it was stored, an enrichment's, which are whole: nothing else keeps their source), and what it lacks, named."""
  from explorer.store.pieces import HEAVY, HEAVY_RECORD
  out = {f: v for f, v in k.items() if f not in HEAVY}
  out["targets"] = {t: rec if t in computed else {f: v for f, v in rec.items() if f not in HEAVY_RECORD} for t, rec in k["targets"].items()}
  analysable = [t for t, rec in k["targets"].items() if rec.get("linear_nums") is not None]
  return {**out, "light": {"sources": list(k["sources"]), "passes": len(k["passes"]), "analysable": analysable}}

def test_a_program_read_light_is_its_whole_read_less_the_heavy_half(v1, tmp_path):
  """A light read is the whole read less each kernel's UOp listing, sources and passes (and its records' listings, passes, sources, line
  maps), naming what it lacks; a kernel's heavy half, one row, puts it back together equal to the whole read, its records' fields in
  their order. The light halves are a small part of a program's bytes."""
  from explorer.store.pieces import whole
  db = tmp_path / "l.sqlite3"
  store = Store(db)
  store.put_trace("j" * 16, scaled(Store(v1).get_trace(PROGRAM), 4), b"")
  full, light = store.get_trace("j" * 16), store.get_trace("j" * 16, light=True)
  assert {f: v for f, v in light.items() if f != "kernels"} == {f: v for f, v in full.items() if f != "kernels"}
  for i, (a, b) in enumerate(zip(full["kernels"], light["kernels"], strict=True)):
    assert b == light_of_whole(a) and "uops_listing" not in b and "source" not in b["targets"][a["host_target"]]
    back = whole(b, store.kernel_heavy("j" * 16, i))
    assert back == a and [list(r) for r in back["targets"].values()] == [list(r) for r in a["targets"].values()]
  with sqlite3.connect(db) as c:
    light_bytes, heavy_bytes = (c.execute(f"SELECT sum(length(body)) FROM {t}").fetchone()[0] for t in ("kernel_parts", "kernel_heavy"))
  assert light_bytes < heavy_bytes / 4

def test_parts_stored_whole_read_light_and_whole_and_a_record_computed_since_goes_with_its_kernel(tmp_path):
  """A store whose parts were written whole (the golden, by the store before halves, with a cuda record computed for kernel 0 since)
  reads whole as it did, and light by cutting them; kernel 0's light read names its cuda source, and put back together has it. The same
  trace stored again now writes halves and reads the same."""
  from explorer.store.pieces import whole
  db = tmp_path / "v2.sqlite3"
  db.write_bytes(gzip.decompress(GOLDEN_V2.read_bytes()))
  assert sqlite3.connect(db).execute("SELECT count(*) FROM sqlite_master WHERE name = 'kernel_heavy'").fetchone()[0] == 0
  store = Store(db)
  full, light = store.get_trace(PROGRAM), store.get_trace(PROGRAM, light=True)
  assert len(full["kernels"]) == 6 and full["kernels"][0]["sources"]["cuda"] == "// cuda" and "cuda" not in full["kernels"][2]["targets"]
  assert light["kernels"][0]["light"]["sources"][-1] == "cuda" and "cuda" not in light["kernels"][2]["light"]["sources"]
  for i, (a, b) in enumerate(zip(full["kernels"], light["kernels"], strict=True)):
    assert b == light_of_whole(a, ("cuda",)) and whole(b, store.kernel_heavy(PROGRAM, i)) == a
  store.put_trace("k" * 16, full, b"")  # the same parts: their rows kept as they were written, halves beside them
  assert json.dumps(store.get_trace("k" * 16)) == json.dumps(full) and store.get_trace("k" * 16, light=True)["kernels"][3] == light["kernels"][3]

def test_a_record_merged_into_a_kernel_read_light_goes_with_it():
  """A target's record merged into a parsed light trace (what a server does when a page computed it) is named in the kernel's `light`,
  on a copy of its own, and is there with its source once the kernel is put back together."""
  from explorer.store.pieces import whole
  from explorer.tracing.enrichments.enrich import with_target
  rec = {"name": "on cuda", "source": "// cuda", "passes": []}
  shared = {"sources": ["clang"], "passes": 3}
  trace = {"kernels": [{"index": 0, "targets": {"clang": {"name": "k"}}, "source_errors": {}, "light": shared},
                       {"index": 1, "targets": {"clang": {"name": "k"}}, "source_errors": {}, "light": shared}]}
  got = with_target(trace, "cuda", {0: rec})  # type: ignore[arg-type]
  a, b = got["kernels"]
  assert a["light"] == {"sources": ["clang", "cuda"], "passes": 3, "analysable": []} and b["light"] is shared and "sources" not in a
  assert shared == {"sources": ["clang"], "passes": 3}
  heavy = {"sources": {"clang": "// clang"}, "passes": [{}, {}, {}], "uops_listing": [], "records": {"clang": {"name": None, "source": "// clang"}}}
  back = whole(a, heavy)
  assert back["sources"] == {"clang": "// clang", "cuda": "// cuda"} and back["targets"]["clang"] == {"name": "k", "source": "// clang"}

def test_a_kernel_part_without_its_heavy_half_is_a_clear_error(v1, tmp_path):
  db = tmp_path / "h.sqlite3"
  store = Store(db)
  store.put_trace("m" * 16, Store(v1).get_trace(PROGRAM), b"")
  with sqlite3.connect(db) as c: c.execute("DELETE FROM kernel_heavy")
  assert store.get_trace("m" * 16, light=True) is not None  # the pages that read light still read it
  with pytest.raises(StoreError, match="heavy half is missing"): store.get_trace("m" * 16)
  with pytest.raises(StoreError, match="heavy half is missing"): store.kernel_heavy("m" * 16, 0)
  assert store.delete_trace("m" * 16) and parts(db) == (0, 0)

def test_a_programs_stage_table_is_paged(v1, tmp_path):
  """A program's thousands of STAGEs (a 16-block transformer step's were a 4 MB bufferize page) are shown STAGE_PAGE rows at a time, the
  rest a link away (?stages=), the buffer table's page kept; the pages read the program light."""
  from explorer.web.routes.schedule import STAGE_PAGE
  step = Store(v1).get_trace(PROGRAM)
  kept = [{"shape": [i + 1], "dtype": "float", "addrspace": "GLOBAL", "removable": False, "src_op": "CONST", "nbytes": 4 * (i + 1)}
          for i in range(STAGE_PAGE * 2 + 50)]
  stages = {**(step["scheduler"] or {}).get("stages", {}), "kept": kept, "fused": [], "realized": []}
  store = Store(db := tmp_path / "s.sqlite3")
  store.put_trace("n" * 16, {**step, "scheduler": {**step["scheduler"], "stages": stages}}, b"")
  with TestClient(app_over(db)) as client:
    first, last = (client.get(f"/t/{'n' * 16}/bufferize{q}").text for q in ("", f"?stages={STAGE_PAGE * 2}&offset=0"))
    assert first.count('<tr data-fate="kept"') == STAGE_PAGE and 'id="stage-pages"' in first and f"?stages={STAGE_PAGE * 2}#stage-table" in first
    assert f"of {len(kept)} shown" in first and last.count('<tr data-fate="kept"') == 50 and "(401)" in last
    assert client.app.state.services.traces.whole_parses == 0

def test_a_chunk_missing_at_the_end_or_holding_no_records_is_named_on_every_page(v1, tmp_path):
  """The row keeps each chunked list's length, so a program whose last chunk of kernels, schedule or buffers is gone (the rows before
  it all in place) is StoreError, not a shorter program: its pages and exports answer that in one line (500), never 500 of 600 rows
  or a template's traceback (its API document, made whole when it was stored, still serves); a chunk of items that are not records is
  refused the same way."""
  from explorer.store.pieces import CHUNK
  big = scaled(Store(v1).get_trace(PROGRAM), CHUNK + 3)
  assert all(len(big[f]) > CHUNK for f in ("kernels", "schedule", "buffers")), {f: len(big[f]) for f in ("kernels", "schedule", "buffers")}
  last = "(SELECT max(seq) FROM trace_chunks WHERE trace_id = ?1 AND field = ?2)"
  cut, bad = f"DELETE FROM trace_chunks WHERE trace_id = ?1 AND field = ?2 AND seq = {last}", \
             f"UPDATE trace_chunks SET body = '[1, 2, 3]' WHERE trace_id = ?1 AND field = ?2 AND seq = {last}"
  for field, damage in [("kernels", cut), ("schedule", cut), ("buffers", cut), ("schedule", bad)]:
    db = tmp_path / f"{field}-{len(damage)}.sqlite3"
    store = Store(db)
    store.put_trace(tid := "c" * 16, big, b"")
    with sqlite3.connect(db) as c: c.execute(damage, (tid, field))
    says = "a chunk is missing" if damage.startswith("DELETE") else "holds items that are not records"
    with pytest.raises(StoreError, match=f"stored trace c{{16}} is corrupt: .*{says}"): store.get_trace(tid, light=True)
    with TestClient(app_over(db), raise_server_exceptions=False) as client:
      for url in (f"/t/{tid}", f"/t/{tid}/k/0", f"/t/{tid}/export.html", f"/api/traces/{tid}/raw", f"/t/{tid}/export.json"):
        r = client.get(url)
        assert r.status_code == 500 and "is corrupt" in r.text and says in r.text and "Traceback" not in r.text, (field, url, r.text[:300])

def test_a_programs_json_export_streams_its_kernels_a_chunk_at_a_time(v1, tmp_path):
  """A program's export.json is the trace as stored with its annotations, its kernels read whole from the store a chunk at a time and
  streamed (no length known up front; gzipped where the client takes it, plain otherwise), with what was computed for a kernel since
  merged in; the response cache holds none of a body past its entry bound."""
  from explorer.store.pieces import CHUNK
  store = Store(db := tmp_path / "e.sqlite3")
  store.put_trace("p" * 16, big := scaled(Store(v1).get_trace(PROGRAM), 2 * CHUNK + 3), b"")
  k0 = store.get_trace("p" * 16)["kernels"][CHUNK + 1]
  rec = {**k0["targets"][k0["host_target"]], "name": "on cuda", "source": "// cuda"}
  assert store.put_target_records("p" * 16, "cuda", {CHUNK + 1: rec}, "cuda", b"")
  store.add_annotation("p" * 16, "step", "schedule", "a note")
  assert [len(ks) for ks in store.whole_kernels("p" * 16, per=CHUNK // 2)] == [CHUNK // 2] * 4 + [len(big["kernels"]) - 2 * CHUNK]
  whole = json.loads(json.dumps(store.get_trace("p" * 16)))
  assert whole["kernels"][CHUNK + 1]["sources"]["cuda"] == "// cuda"
  with TestClient(app_over(db)) as client:
    for encoding in ("gzip", "identity"):
      r = client.get(f"/t/{'p' * 16}/export.json", headers={"accept-encoding": encoding})
      assert r.status_code == 200 and "content-length" not in r.headers and r.headers.get("content-encoding", "identity") == encoding
      body = r.json()
      assert body.pop("annotations")[0]["text"] == "a note" and body == whole
    cache = client.app.state.response_cache
    cache.max_entry_bytes = 1 << 16  # a body past it is sent on, never held
    assert client.get(f"/t/{'p' * 16}/export.json?download=0", headers={"accept-encoding": "identity"}).status_code == 200
    assert not any("download=0" in q for (_, q, _) in cache.entries) and cache.size < 40 << 20

def test_a_programs_html_export_gives_each_distinct_kernel_one_section(v1, tmp_path):
  """A big program's HTML export (past MAX_SECTIONS kernels) writes a section (sources, UOps, AST) per distinct kernel, the first of its
  repeats, which link to it (a 10,000-kernel program's was 91 s and 1.5 GB of server memory, for 73 distinct kernels); past MAX_SECTIONS
  distinct ones, the rest are named and left to the JSON export. A smaller one's every kernel has its section."""
  from explorer.present.export import MAX_SECTIONS, sections_of
  step = Store(v1).get_trace(PROGRAM)
  store = Store(db := tmp_path / "x.sqlite3")
  store.put_trace("q" * 16, big := scaled(step, MAX_SECTIONS + 1), b"")
  with TestClient(app_over(db)) as client:
    page = client.get(f"/t/{'q' * 16}/export.html").text
  n = len(step["kernels"])
  assert page.count('<section class="panel flush kernel"') == n and f"{n} of {len(big['kernels'])} kernels have a section below" in page
  assert f'<a href="#kernel-{1}">' in page and f'<a href="#kernel-{n + 1}">' not in page  # kernel n+1 repeats kernel 1: its link is 1's
  many = {"kernels": [{"index": i, "ast_key": f"k{i % (MAX_SECTIONS + 5)}", "opts": []} for i in range(2 * (MAX_SECTIONS + 5))]}
  shown, section, left_out = sections_of(many)  # type: ignore[arg-type]
  assert shown == list(range(MAX_SECTIONS)) and left_out == 5 and section[MAX_SECTIONS + 5] == 0 and MAX_SECTIONS not in section
  few = {"kernels": many["kernels"][:MAX_SECTIONS]}
  assert sections_of(few)[0] == list(range(MAX_SECTIONS)) and sections_of({"kernels": many["kernels"][:3] * 2})[2] == 0  # type: ignore[arg-type]

def test_a_programs_diff_reads_it_light_and_each_groups_sources_whole(v1, tmp_path):
  """A diff of two programs reads both light (a 10,000-kernel program's diff read both whole, 520-583 MiB at first view): each group's
  kernels are put back together with their sources as the group is diffed, and the page shows them side by side."""
  step = Store(v1).get_trace(PROGRAM)
  store = Store(db := tmp_path / "d.sqlite3")
  store.put_trace("r" * 16, scaled(step, 6), b"")
  store.put_trace("s" * 16, scaled(step, 8), b"")
  with TestClient(app_over(db)) as client:
    page = client.get(f"/diff/{'r' * 16}/{'s' * 16}")
    d = client.get(f"/api/diff/{'r' * 16}/{'s' * 16}", params={"graphs": False}).json()
    traces = client.app.state.services.traces
    assert page.status_code == 200 and 'class="sbs hl"' in page.text and traces.whole_parses == 0 and traces.parses == 2
  assert len(d["groups"]) == 8 and all(g["source"]["rows"] for g in d["groups"][:6]) and d["groups"][-1]["a"] == []

def test_a_programs_diff_keeps_what_its_groups_share_once(v1, tmp_path):
  """A program's repeated kernels give equal figures and source rows: its diff keeps each once (a 10,000-kernel loop's diff with itself
  held 10,001 copies of 73, 180 MiB at first view) and stores it so (69 MB of JSON, read back by every later page as as many copies):
  read back, the same diff, its shared values shared again; a stored diff whose positions are out of place reads as none."""
  from explorer.analysis.diff import packed, unpacked
  from explorer.web.services.diffs import build_diff, structural_kind
  step = Store(v1).get_trace(PROGRAM)
  store = Store(db := tmp_path / "p.sqlite3")
  store.put_trace("t" * 16, scaled(step, 40), b"")
  light = store.get_trace("t" * 16, light=True)
  assert light is not None
  d = build_diff(light, light, "host", "host", *[lambda k: store.get_trace("t" * 16)["kernels"][k["index"]]] * 2)  # type: ignore[index]
  groups = d["groups"]
  assert len(groups) == 40 and groups[0]["source"]["rows"] is groups[len(step["kernels"])]["source"]["rows"]  # the step's repeat shares
  assert groups[0]["metrics"] is groups[len(step["kernels"])]["metrics"] and groups[0]["source"] is not groups[len(step["kernels"])]["source"]
  stored = json.loads(json.dumps(packed(d)))
  assert len(json.dumps(stored)) < len(json.dumps(d)) / 3 and len(stored["shared"]) <= 3 * len(step["kernels"])
  back = unpacked(stored)
  assert back == d and back is not None and back["groups"][0]["metrics"] is back["groups"][len(step["kernels"])]["metrics"]
  assert unpacked({**stored, "groups": [{**groups[0], "metrics": len(stored["shared"])}]}) is None  # out of range: not trusted
  assert unpacked({**stored, "groups": [{**stored["groups"][0], "metrics": stored["groups"][0]["source"]["rows"]}]}) is None  # a list for figures
  assert unpacked({k: v for k, v in stored.items() if k != "shared"}) is None
  with TestClient(app_over(db)) as client:  # the server stores it packed, and a page reads it back
    assert client.get(f"/diff/{'t' * 16}/{'t' * 16}").status_code == 200
    assert "shared" in (kept := store.get_diff("t" * 16, "t" * 16, structural_kind("host", "host"))) and kept["shared"]
    assert client.get(f"/api/diff/{'t' * 16}/{'t' * 16}", params={"graphs": False}).json()["groups"][3]["source"]["rows"]

def test_a_document_made_stale_by_what_a_server_stored_is_made_again_after_and_the_next_server_reads_it(v1, tmp_path):
  """What a server stores into a trace (an enrichment: a target's record, here) makes its kept document stale; the server makes it
  again from the store a moment after the last such write, once no more work may store into it (its `busy`), so that the next
  server's first reader reads it, with no parse, as it would have made it then."""
  import time
  from pydantic_core import to_json
  from explorer.store.documents import listed
  store = Store(db := tmp_path / "a.sqlite3")
  store.put_trace(tid := "s" * 16, scaled(Store(v1).get_trace(PROGRAM), 40), b"")
  def remade(within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while Store(db).document(tid) is None and time.monotonic() < deadline: time.sleep(0.1)
    return Store(db).document(tid) is not None
  with TestClient(app_over(db)) as client:
    svc, busy = client.app.state.services, [True]
    svc.traces.busy = lambda: busy[0]
    k0 = Store(db).get_trace(tid)["kernels"][0]
    assert store.put_target_records(tid, "cuda", {0: {**k0["targets"][k0["host_target"]], "name": "on cuda"}}, "cuda", b"")
    svc.forget(tid, lambda t: t)  # what the enrichment service calls once it stored a record
    assert Store(db).document(tid) is None and not remade(3.0) and svc.traces.documents_made == 0  # while more may be stored: waits
    busy[0] = False
    assert remade(5.0) and svc.traces.documents_made == 1
  light = Store(db).get_trace(tid, light=True)
  assert light is not None and "cuda" in light["kernels"][0]["targets"]
  with TestClient(app_over(db)) as client:
    got, traces = client.get(f"/api/traces/{tid}"), client.app.state.services.traces
    assert got.content == to_json({"id": tid, "url": f"/t/{tid}", **listed(light)}) and traces.parses == 0 and traces.documents_read == 1

def test_a_programs_api_document_is_made_when_it_is_stored_and_served_without_a_parse(v1, tmp_path):
  """GET /api/traces/ID serves the document kept when the trace was stored (explorer.store.documents: a 10,000-kernel program's first
  reader parsed it and made 16 MB of JSON, 0.26 s), byte for byte what its light parse makes, with no parse; what is merged into the
  trace since (a target's record) makes it stale: the next reader gets the trace as it is now, made from a parse and kept for the next
  one. A trace stored before documents, and a damaged document, are made again."""
  from pydantic_core import to_json
  from explorer.store.documents import KEY, listed
  store = Store(db := tmp_path / "a.sqlite3")
  store.put_trace(tid := "q" * 16, scaled(Store(v1).get_trace(PROGRAM), 40), b"")
  def made_now() -> bytes:
    light = Store(db).get_trace(tid, light=True)
    assert light is not None
    return to_json({"id": tid, "url": f"/t/{tid}", **listed(light)})
  with TestClient(app_over(db)) as client:
    traces = client.app.state.services.traces
    got = client.get(f"/api/traces/{tid}")
    assert got.content == made_now() and traces.parses == 0 and traces.documents_read == 1
    assert got.headers["content-encoding"] == "gzip" and int(got.headers["content-length"]) == len(stored := Store(db).document(tid) or b"")
    assert gzip.decompress(stored) == made_now()  # sent as kept, and to a client that takes no gzip opened
    plain = client.get(f"/api/traces/{tid}", headers={"accept-encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.content == made_now() and traces.parses == 0
    k0 = got.json()["kernels"][0]
    assert "cuda" not in k0["targets"] and "sources" not in k0 and k0["n_passes"] > 0
    assert store.put_target_records(tid, "cuda", {0: {**Store(db).get_trace(tid)["kernels"][0]["targets"][k0["host_target"]], "name": "on cuda"}},
                                    "cuda", b"")
    client.app.state.services.forget(tid)  # (what the server does when it stores one: drop what it rendered of the trace)
    stale = client.get(f"/api/traces/{tid}")
    assert stale.json()["kernels"][0]["targets"] == sorted([*k0["targets"], "cuda"]) and stale.content == made_now()
    assert traces.parses == 1 and traces.documents_read == 2
    client.app.state.services.forget(tid)
    assert client.get(f"/api/traces/{tid}").content == made_now() and traces.parses == 1 and traces.documents_read == 3  # kept, read
    assert client.get(f"/t/{tid}").status_code == 200 and traces.parses == 2  # the overview's light parse, kept
    assert store.put_target_records(tid, "metal", {1: {**Store(db).get_trace(tid)["kernels"][1]["targets"][k0["host_target"]], "name": "m"}},
                                    "metal", b"")
    traces.update(tid, lambda t: t)  # that parse merged in memory (as a server merges what it stored): not known to be the store's
    client.app.state.response_cache.forget(tid)
    assert client.get(f"/api/traces/{tid}").status_code == 200 and Store(db).document(tid) is None and traces.parses == 2  # not kept
    for damage in ("DELETE FROM graph_cache WHERE key = ?", "UPDATE graph_cache SET body = x'00ff' WHERE key = ?"):  # none kept; damaged
      with sqlite3.connect(db) as c: c.execute(damage, (KEY.format(tid),))
      client.app.state.services.forget(tid)
      assert client.get(f"/api/traces/{tid}").content == made_now() and Store(db).document(tid) is not None  # made from a parse: kept
    for body in (b"not gzip at all", gzip.compress(b"x")[:12]):  # bytes that are no document (or cut short), with their CRC: refused too
      with sqlite3.connect(db) as c:
        (ref,) = c.execute("SELECT ref FROM graph_cache WHERE key = ?", (KEY.format(tid),)).fetchone()
        crc = f"{ref.rsplit(':', 1)[0]}:{zlib.crc32(body):08x}"
        c.execute("UPDATE graph_cache SET body = ?, ref = ? WHERE key = ?", (body, crc, KEY.format(tid)))
      client.app.state.services.forget(tid)
      for encoding in ("identity", "gzip"):
        assert client.get(f"/api/traces/{tid}", headers={"accept-encoding": encoding}).content == made_now(), (body, encoding)
    assert client.get("/api/traces/" + "0" * 16).status_code == 404
