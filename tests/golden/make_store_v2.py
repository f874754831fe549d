"""Makes store_v2.sqlite3.gz, the golden store whose kernel parts were written whole (before a part was kept in two halves): the captured
program of store_v1.sqlite3.gz stored three steps over (six kernels, two distinct parts) by commit fb4ac21's store, with a cuda record
computed since for kernel 0 (an enrichment). Run with that commit's explorer first on the path:

  git worktree add /tmp/fb4ac21 fb4ac21
  PYTHONPATH=/tmp/fb4ac21 python tests/golden/make_store_v2.py tests/golden/store_v2.sqlite3.gz
"""
import gzip
import pathlib
import sqlite3
import sys
import tempfile

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
from support import scaled  # noqa: E402
from explorer.store import Store  # noqa: E402

PROGRAM = "5fdf6bd857dee0fd"

def main(out: pathlib.Path) -> None:
  tmp = pathlib.Path(tempfile.mkdtemp())
  (src := tmp / "v1.sqlite3").write_bytes(gzip.decompress((HERE / "store_v1.sqlite3.gz").read_bytes()))
  step = Store(src).get_trace(PROGRAM)
  assert step is not None
  store = Store(db := tmp / "v2.sqlite3")
  store.put_trace(PROGRAM, scaled(dict(step), 6), b"")
  k0 = store.get_trace(PROGRAM)["kernels"][0]  # type: ignore[index]
  rec = {**k0["targets"][k0["host_target"]], "name": "on cuda", "source": "// cuda"}
  assert store.put_target_records(PROGRAM, "cuda", {0: rec}, "cuda", b"")
  store.close()
  with sqlite3.connect(db) as c: c.execute("VACUUM")
  out.write_bytes(gzip.compress(db.read_bytes(), mtime=0))

if __name__ == "__main__": main(pathlib.Path(sys.argv[1]))
