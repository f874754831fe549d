"""Hostile trace files: deeply nested, huge integers, not UTF-8, oversized, not a trace, or a real trace with one reference broken.
Every command that reads a trace file (export, diff, repro, enrich, opts) refuses each with one line on stderr and exit 2, never a
traceback; validate_trace names the broken reference. A refused file never reaches tinygrad: nothing here runs a worker."""
from __future__ import annotations
import copy
import json
import pathlib
from collections.abc import Callable
from typing import Any
import pytest
from support import shared_run
from explorer.cli.main import main
from explorer.schema import validate_trace
from explorer.spec import SpecError
from explorer.store import files as store  # the trace-file reader: its module constant and its `open`

@pytest.fixture(scope="module")
def real() -> dict[str, Any]:
  """A real small convolution's trace with its analyses (line maps, live values), as `trace --json` writes it."""
  return json.loads(json.dumps(shared_run("small", analysis=True, time=False).trace, default=str))

def record(t: dict) -> dict:
  """The first target record with a line map and live values."""
  return next(r for k in t["kernels"] for r in (k.get("targets") or {}).values() if r.get("line_map") and r.get("pressure"))

def with_realizes(t: dict, kernels: list[int]) -> None:
  t["realizes"] = [{"index": 0, "name": "r", "kernels": kernels, "schedule": [0, len(t["schedule"])], "tensor_graph": None, "seconds": 0.0,
                    "outputs": [], "total_s": None}]

BREAKS: dict[str, tuple[Callable[[dict], Any], str]] = {  # a reference broken: how, and what the refusal names
  "kernel reads": (lambda t: t["kernels"][0]["reads"].append(99), "kernels[0].reads names buffer 99, and the trace has 3"),
  "kernel writes": (lambda t: t["kernels"][0]["writes"].append(len(t["buffers"])), "kernels[0].writes names buffer"),
  "kernel call": (lambda t: t["kernels"][0].update(call=7), "kernels[0].call names schedule row 7"),
  "kernel index": (lambda t: t["kernels"][0].update(index=3), "kernels[0].index is 3"),
  "kernel realize": (lambda t: t["kernels"][0].update(realize=0), "kernels[0].realize names realize 0, and the trace has none"),
  "schedule kernel": (lambda t: t["schedule"][0].update(kernel=5), "schedule[0].kernel names kernel 5"),
  "schedule reads": (lambda t: t["schedule"][0]["reads"].append(40), "schedule[0].reads names buffer 40"),
  "schedule index": (lambda t: t["schedule"][0].update(index=1), "schedule[0].index is 1"),
  "buffer written_by": (lambda t: t["buffers"][0]["written_by"].append(9), "buffers[0].written_by names schedule row 9"),
  "buffer read_by": (lambda t: t["buffers"][1]["read_by"].append(2), "buffers[1].read_by names schedule row 2"),
  "buffer index": (lambda t: t["buffers"][2].update(index=0), "buffers[2].index is 0"),
  "stage buffer": (lambda t: t["scheduler"]["stages"]["realized"][0].update(buffer=40), "scheduler.stages.realized[0].buffer names buffer 40"),
  "stage reads": (lambda t: t["scheduler"]["stages"]["realized"][0].update(reads=[0, 8]), "scheduler.stages.realized[0].reads names buffer 8"),
  "realize range": (lambda t: with_realizes(t, [0, 5]), "realizes[0].kernels is [0, 5]"),
  "line map uop": (lambda t: record(t)["line_map"][0][1].append(record(t)["linear_uops"]), ".line_map (line"),
  "peak uop": (lambda t: record(t)["pressure"].update(max_live_at=-1), ".pressure.max_live_at names uop -1"),
  "longest until": (lambda t: record(t)["pressure"]["longest"][0].update(until=10 ** 6), ".pressure.longest[0].until names uop 1000000"),
}

def broken(real: dict, name: str) -> dict:
  t = copy.deepcopy(real)
  BREAKS[name][0](t)
  return t

def hostile(real: dict, kind: str) -> bytes:
  """A hostile file's bytes."""
  text = json.dumps(real)
  if kind in BREAKS: return json.dumps(broken(real, kind)).encode()
  if kind == "deep": return b"[" * 100_000 + b"]" * 100_000
  if kind == "deep in a trace": return json.dumps({**real, "totals": "@@"}).replace('"@@"', "{\"x\": " * 10_000 + "1" + "}" * 10_000).encode()
  if kind == "huge integer": return json.dumps({**real, "totals": {**real["totals"], "kernels": "@@"}}).replace('"@@"', "7" * 10_000).encode()
  if kind == "integer over 2**63": return text.replace('"index": 0', f'"index": {2 ** 63}', 1).encode()
  if kind == "not UTF-8": return json.dumps({**real, "label": "@@"}).encode().replace(b"@@", b"caf\xe9")
  if kind == "lone surrogate": return json.dumps({**real, "label": "\ud800"}).encode()
  if kind == "NaN": return json.dumps({**real, "totals": {**real["totals"], "flops": float("nan")}}).encode()
  if kind == "1e999": return json.dumps({**real, "error": "@@"}).replace('"@@"', "1e999").encode()
  if kind == "not JSON": return text[:len(text) // 2].encode()
  if kind == "unterminated string": return b'["' + b'\\"' * 200_000  # each quote would start a scan to the end in a naive bracket scan
  if kind == "JSON, not a trace": return b'{"hello": [1, 2, 3]}'
  if kind == "a wrapped nothing": return b'{"trace": 5}'
  if kind == "a trace of other types": return json.dumps({**real, "kernels": [{"index": "zero"}]}).encode()
  raise KeyError(kind)

REFUSED = {  # what each refusal says
  "deep": "nests arrays and objects deeper than the 64 levels", "deep in a trace": "deeper than the 64 levels",
  "huge integer": "holds the integer 77777777777777777777... (10000 digits)", "integer over 2**63": f"holds the integer {2 ** 63} (19 digits)",
  "not UTF-8": "is not UTF-8: byte", "lone surrogate": "lone UTF-16 surrogate", "NaN": "has totals that are not finite", "1e999": "error",
  "not JSON": "cannot read the trace file", "unterminated string": "cannot read the trace file",
  "JSON, not a trace": "is not a Kernel Explorer trace", "a wrapped nothing": "is not a Kernel Explorer trace",
  "a trace of other types": "is not a Kernel Explorer trace of this version: kernels.0",
  **{name: says if says.startswith(".") else f"trace.json: {says}" for name, (_, says) in BREAKS.items()},  # a record's: under its target
}

def commands(path: str, out: pathlib.Path) -> dict[str, list[str]]:
  return {"export": ["export", path, "--quiet", "-o", str(out / "x.html")], "diff": ["diff", path, path, "--quiet", "--no-time"],
          "repro": ["repro", path, "-o", str(out / "x.py")], "enrich": ["enrich", path, "--quiet", "-o", str(out / "x.json")],
          "opts": ["opts", path, "--kernel", "0", "--opt", "UPCAST:0:4", "--quiet", "--no-time"]}

def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
  """The command's one line on stderr: it exits 2, with no traceback."""
  code = main(argv)
  err = capsys.readouterr().err
  assert code == 2, (argv[0], code, err[-2000:])
  assert err.count("\n") == 1 and err.startswith("kernel-explorer: ") and "Traceback" not in err, (argv[0], err[-2000:])
  return err

@pytest.mark.parametrize("kind", list(REFUSED))
def test_every_command_refuses_a_hostile_file_in_one_line(kind, real, tmp_path, capsys):
  path = tmp_path / "trace.json"
  path.write_bytes(hostile(real, kind))
  for name, argv in commands(str(path), tmp_path).items():
    err = refused(argv, capsys)
    assert REFUSED[kind] in err, (name, err)
  assert path.read_bytes() == hostile(real, kind), "a refused file is not written back"
  assert not any((tmp_path / f"x.{ext}").exists() for ext in ("html", "py", "json"))

@pytest.mark.parametrize("name", list(BREAKS))
def test_validate_trace_names_the_broken_reference(name, real):
  validate_trace(real, "trace.json")  # the real trace, whole
  with pytest.raises(SpecError) as e: validate_trace(broken(real, name), "trace.json")
  assert BREAKS[name][1] in str(e.value) and "\n" not in str(e.value), str(e.value)

def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
  path = tmp_path / "big.json"
  with open(path, "wb") as f: f.truncate(300 << 20)  # sparse: nothing written
  def never(*a: Any, **k: Any) -> Any: raise AssertionError("the oversized file was opened")
  monkeypatch.setattr(store, "open", never, raising=False)  # load_trace_file's own `open`: it must not get that far
  for name, argv in commands(str(path), tmp_path).items():
    assert f"trace file {path} is 300 MiB, over the 256 MiB a trace file may be" in refused(argv, capsys), name

def test_the_cap_is_the_module_constant(real, tmp_path, capsys, monkeypatch):
  path = tmp_path / "trace.json"
  path.write_text(json.dumps(real))
  assert json.loads(json.dumps(store.load_trace_file(str(path))["kernels"])) == real["kernels"]
  monkeypatch.setattr(store, "MAX_TRACE_FILE_BYTES", 1 << 10)
  assert "over the 0.0009766 MiB a trace file may be" in refused(["repro", str(path), "-o", "-"], capsys)

def test_a_real_trace_file_still_reads(real, tmp_path, capsys):
  """The checks refuse nothing a trace writes: the real trace, and as the web API wraps it, exports and reproduces."""
  path = tmp_path / "trace.json"
  path.write_text(json.dumps({"id": "abc", "url": "/t/abc", "trace": real}, indent=1))
  assert main(["repro", str(path), "-o", str(tmp_path / "r.py")]) == 0
  assert main(["export", str(path), "--format", "json", "--quiet", "-o", str(tmp_path / "e.json")]) == 0
  assert json.loads((tmp_path / "e.json").read_text())["kernels"] == real["kernels"]

NEGATIVE: dict[str, Callable[[dict], Any]] = {  # a count or a time below zero, where a trace file may carry one
  "kernels[0].flops": lambda t: t["kernels"][0].update(flops=-5), "kernels[0].bytes": lambda t: t["kernels"][0].update(bytes=-1),
  "totals.flops": lambda t: t["totals"].update(flops=-5), "kernels[0].compile_s": lambda t: t["kernels"][0].update(compile_s=-0.5)}

@pytest.mark.parametrize("where", list(NEGATIVE))
def test_a_negative_count_is_refused(real, where, tmp_path):
  t = copy.deepcopy(real)
  NEGATIVE[where](t)
  with pytest.raises(SpecError, match="greater than or equal to 0"): validate_trace(t)
  path = tmp_path / "negative.json"
  path.write_text(json.dumps(t))
  with pytest.raises(SpecError): store.load_trace_file(str(path))
