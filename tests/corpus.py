"""The programs of tests/programs, one after another in this process: each inside capture() (stored in DB), or in plain tinygrad.
Prints one JSON object: per program, what it returned and, captured, what its trace holds. tests/test_corpus.py runs one program per
process (tinygrad's metadata is kept per UOp: a second program in the process would find the first one's on the UOps they share).

  python tests/corpus.py captured DB NAME ...
  python tests/corpus.py plain NAME ..."""
from __future__ import annotations
import importlib
import json
import pathlib
import sys

PROGRAMS = ("cnn_loop", "cnn_jit", "mnist", "transformer", "kv_decode", "resnet_block", "lstm", "rand_init",
            "beautiful_mnist", "beautiful_mnist_nofunction", "llm_generate", "onnx_runner")  # the last four as tinygrad's own examples write them

def _where(w: dict | None) -> str | None: return f"{pathlib.Path(w['file']).name}:{w['line']}" if w and w.get("file") else None

def _entry(e: dict) -> dict:
  """A provenance entry as the corpus tests read it: its lines by file name and number."""
  return {"fn": e["fn"], "backward": e["backward"], "site": _where(e), "via": e.get("via"), "caller": _where(e.get("caller")),
          "backward_line": _where(e.get("backward_line")), "onnx": [e["onnx"]["op"], e["onnx"]["name"]] if e.get("onnx") else None,
          "inferred": bool(e.get("inferred"))}

def captured(name: str, db: str) -> dict:
  from explorer import capture
  program = importlib.import_module(f"programs.{name}")
  with capture(name=name) as t: outputs = program.run()
  d = t.data
  lanes, names = d["timeline"]["lanes"], d["timeline"]["names"]
  launched = sorted({names[n] for lane, n, _ in d["timeline"]["runs"] if lanes[lane] == d["env"]["device"]})
  return {"id": t.store(db), "status": d["status"], "failures": [f["error"] for f in d["failures"]], "outputs": outputs,
          "kernels": [k["name"] for k in d["kernels"]], "launched": launched,
          "jits": [{"realizes": j["realizes"], "runs": len(j["runs"]), "kernels": j["kernels"],
                    "traced": [d["kernels"][i]["name"] for r in d["realizes"][slice(*j["realizes"])] for i in range(*r["kernels"])]}
                   for j in d.get("jits", [])],
          "repeats": sum(len(r.get("repeats", [])) for r in d["realizes"]),
          "provenance": [[_entry(e) for e in k.get("provenance", [])] for k in d["kernels"]],
          "realize_of": [k.get("realize", 0) for k in d["kernels"]], "captured": [bool(r.get("captured")) for r in d["realizes"]],
          "symbolic": [s["symbolic"] for rows in ((d.get("scheduler") or {}).get("stages") or {}).values() if isinstance(rows, list)
                       for s in rows if s.get("symbolic")]}

def plain(name: str) -> dict: return {"outputs": importlib.import_module(f"programs.{name}").run()}

if __name__ == "__main__":
  how, args = sys.argv[1], sys.argv[2:]
  if how == "captured":
    import explorer  # noqa: F401 - before tinygrad: it turns tinygrad's rewrite tracking on
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
  db, names = (args[0], args[1:]) if how == "captured" else (None, args)
  print(json.dumps({n: captured(n, db) if db is not None else plain(n) for n in names or PROGRAMS}))
