"""What plain tinygrad computes for each program of tests/programs (fixed seeds), kept as checked-in golden data: each program run in
a process of its own with no explorer imported. The reference changes only with tinygrad or the programs, so the suite reads it
(tests/test_corpus.py) rather than running every program twice; the file names the tinygrad that made it and a hash of the programs,
and the suite fails when either differs from what is here (regenerate: `make golden`), and runs one program plain each day to compare.

  python tests/golden/corpus.py"""
from __future__ import annotations
import hashlib
import importlib.metadata
import json
import pathlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

TESTS = pathlib.Path(__file__).resolve().parents[1]
GOLDEN = pathlib.Path(__file__).resolve().parent / "corpus_outputs.json"
sys.path.insert(0, str(TESTS))
from corpus import PROGRAMS  # noqa: E402

def programs_hash() -> str:
  h = hashlib.sha256()
  for f in sorted(p for p in (TESTS / "programs").iterdir() if p.is_file()): h.update(f.name.encode() + f.read_bytes())  # (a model file too)
  return h.hexdigest()[:16]

def plain(name: str) -> list:
  r = subprocess.run([sys.executable, str(TESTS / "corpus.py"), "plain", name], capture_output=True, text=True, timeout=1800, check=True)
  return json.loads(r.stdout.splitlines()[-1])[name]["outputs"]

def main() -> None:
  with ThreadPoolExecutor(2) as pool: outputs = dict(zip(PROGRAMS, pool.map(plain, PROGRAMS), strict=False))
  GOLDEN.write_text(json.dumps({"tinygrad": importlib.metadata.version("tinygrad"), "programs": programs_hash(), "outputs": outputs},
                               indent=1) + "\n")
  print(f"wrote {GOLDEN}")

if __name__ == "__main__": main()
