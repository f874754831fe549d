"""explorer.schema.upgrade: a trace of an older schema is filled in once, where it is read, and then read like a current one."""
from __future__ import annotations
from explorer.schema import HOST_TARGET_OF_SCHEMA_1, host_target, target_record, target_records, upgrade

def _schema_1_kernel(index: int) -> dict:
  """A kernel as schema 1 wrote it: the host's figures at the top, sources per target, no `targets` nor `host_target`."""
  return {"index": index, "name": f"k{index}", "opts": ["UPCAST:0:4"], "global_size": [4, 1, 1], "local_size": None, "linear_uops": 12,
          "ops": {"total": 12, "alu": 3}, "flops": 64, "bytes": 256, "passes": [], "uops_listing": ["0 Ops.SINK"],
          "sources": {"host": f"void k{index}() {{}}", "cuda": "__global__ void k() {}"}}

def test_a_schema_1_trace_is_upgraded_once_and_keeps_its_number():
  old = {"schema": 1, "kernels": [_schema_1_kernel(0), _schema_1_kernel(1)]}
  new = upgrade(old)
  assert new["schema"] == 1 and "targets" not in old["kernels"][0]  # the number as recorded; the stored copy untouched
  k = new["kernels"][1]
  assert host_target(k) == HOST_TARGET_OF_SCHEMA_1 and list(target_records(k)) == [HOST_TARGET_OF_SCHEMA_1]
  rec = target_record(k)
  assert rec is not None and rec["name"] == "k1" and rec["source"] == "void k1() {}" and rec["lds"] is None and rec["compile"] is None
  assert rec["opts"] == ["UPCAST:0:4"] and rec["ops"] == {"total": 12, "alu": 3} and "schema 1" in rec["notes"][0]
  assert target_record(k, "cuda") is None  # other targets: their source only
  assert upgrade(new) is new  # once: an upgraded trace reads as current

def test_a_current_trace_is_returned_as_it_is():
  current = {"schema": 2, "kernels": [{**_schema_1_kernel(0), "host_target": "clang", "targets": {"clang": {"name": "k0"}}}]}
  assert upgrade(current) is current
  assert host_target(current["kernels"][0]) == "clang" and target_record(current["kernels"][0]) == {"name": "k0"}

def test_the_store_reads_a_schema_1_trace_upgraded(tmp_path):
  """Store.get_trace upgrades as it reads: every read has the host's record, and the schema number as recorded."""
  from explorer.store import Store
  store = Store(tmp_path / "old.sqlite3")
  old = {"schema": 1, "spec": None, "label": "old", "status": "ok", "env": {"device": "CPU"}, "kernels": [_schema_1_kernel(0)]}
  store.put_trace("0123456789abcdef", old, b"")
  for _ in range(2):
    got = store.get_trace("0123456789abcdef")
    assert got is not None and got["schema"] == 1 and host_target(got["kernels"][0]) == HOST_TARGET_OF_SCHEMA_1
    assert (rec := target_record(got["kernels"][0])) is not None and rec["source"] == "void k0() {}"
