"""Programs as people write them (tests/programs: a CNN training loop, the same under TinyJit, an MNIST-style convnet with Adam, a
transformer block forward and backward, a KV-cache decode loop with a symbolic position under TinyJit, a ResNet basic block, an
LSTMCell recurrence, random initialisers; and as tinygrad's own examples write them: beautiful_mnist with @function and without,
tinygrad's LLM through Transformer.generate, tinygrad's ONNX runner under TinyJit), each captured whole in a process of its own: its
outputs bit for bit plain tinygrad's (golden data, tests/golden/corpus.py, one program run plain again each day), every kernel tinygrad
launched (its own profiler's record) in the trace, every kernel credited to a line of the program, and the lines checked against the
ones that made each kernel (the `# model:` marks name them), loops and TinyJit runs recorded as such."""
from __future__ import annotations
import collections
import datetime
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import pytest
from corpus import PROGRAMS
from golden.corpus import GOLDEN, programs_hash

TESTS = pathlib.Path(__file__).resolve().parent
GOLDEN_DATA = json.loads(GOLDEN.read_text())
EXPECTED = {"cnn_loop": {"repeats": 2}, "cnn_jit": {"jit_runs": 3}, "kv_decode": {"jit_runs": 4}, "beautiful_mnist": {"jit_runs": 3},
            "beautiful_mnist_nofunction": {"jit_runs": 3}, "llm_generate": {"jit_runs": 3}, "onnx_runner": {"jit_runs": 2, "repeats": 2}}

# what another test in this worker may have set (a device, a clock, opts): each program runs as a user would run it, as the golden ran
TINYGRAD_SETTINGS = ("DEV", "NOOPT", "BEAM", "DEBUG", "JIT", "VIZ", "PROFILE", "TRACK_MATCH_STATS", "PARALLEL", "CCACHE")

def run(*args: str) -> dict:
  env = {k: v for k, v in os.environ.items() if k not in TINYGRAD_SETTINGS}
  r = subprocess.run([sys.executable, str(TESTS / "corpus.py"), *args], capture_output=True, text=True, timeout=1800, env=env)
  assert r.returncode == 0, r.stderr[-3000:]
  return json.loads(r.stdout.splitlines()[-1])

def marks(name: str) -> dict[str, str]:
  """A program's lines by their `# model: mark`: "beautiful_mnist.py:22" -> "batch"."""
  lines = (TESTS / "programs" / f"{name}.py").read_text().splitlines()
  return {f"{name}.py:{i}": m.group(1) for i, line in enumerate(lines, 1) if (m := re.search(r"# model: (.+)$", line))}

def test_the_golden_outputs_are_plain_tinygrads_of_these_programs():
  assert GOLDEN_DATA["tinygrad"] == importlib.metadata.version("tinygrad"), "another tinygrad: regenerate with `make golden`"
  assert GOLDEN_DATA["programs"] == programs_hash(), "tests/programs changed: regenerate with `make golden`"
  assert set(GOLDEN_DATA["outputs"]) == set(PROGRAMS)

@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_is_captured_whole(name, tmp_path):
  got = run("captured", str(tmp_path / "t.sqlite3"), name)[name]
  assert got["status"] == "ok" and not got["failures"], got["failures"]
  assert got["outputs"] == GOLDEN_DATA["outputs"][name]  # bit for bit: the same kernels ran, and left the same state
  kernels = set(got["kernels"])
  assert [n for n in got["launched"] if n not in kernels and not n.startswith("copy")] == []  # every kernel tinygrad launched
  files = {f"{p}.py" for p in PROGRAMS}  # every kernel credited to a line of the programs (cnn_jit's model is cnn_loop's), or to the one
  def of_the_program(e: dict) -> bool:  # that ran a model shipped inside tinygrad
    return any((w or "").rsplit(":", 1)[0] in files for w in (e["site"], e["caller"]))
  assert all(entries and all(of_the_program(e) for e in entries) for entries in got["provenance"]), \
    [(k, es) for k, es in zip(got["kernels"], got["provenance"], strict=False) if not es or not all(of_the_program(e) for e in es)][:3]
  want = EXPECTED.get(name, {})
  assert got["repeats"] == want.get("repeats", got["repeats"])
  if "jit_runs" in want:
    (jit,) = got["jits"]
    assert jit["runs"] == want["jit_runs"] and jit["realizes"] and jit["kernels"] == jit["traced"], jit
  else: assert got["jits"] == []
  if name in LINES: LINES[name](got, marks(name), tmp_path / "t.sqlite3")

def own(entries: list[dict]) -> list[dict]: return [e for e in entries if not e["inferred"]]

def beautiful_mnist_lines(got: dict, mark: dict[str, str], db: pathlib.Path) -> None:
  """The forward's kernels credited to the model's forward, the gradient's to the forward ops they differentiate and to the .backward()
  line, never to the batch sampler (whose lines are the randint kernels'), Adam's to its step, through nn.optim."""
  at = lambda w: mark.get(w or "", w)
  backward = [own(es) for es in got["provenance"] if any(e["backward"] for e in own(es))]
  assert len(backward) >= 16 and all(at(e["backward_line"]) == "loss" and at(e["site"]) in ("forward", "loss")
                                     for es in backward for e in es if e["backward"]), backward
  assert not [es for es in backward if any(at(e["site"]) == "batch" for e in es)]
  convs = {e["fn"] for es in backward for e in es if at(e["site"]) == "forward"}
  assert {"conv2d", "relu", "max_pool2d", "batchnorm", "linear"} <= convs, convs
  forward = [own(es) for es in got["provenance"] if any(e["fn"] == "conv2d" and not e["backward"] for e in own(es))]
  assert forward and all(at(e["site"]) == "forward" for es in forward for e in es)
  batch = [own(es) for k, es in zip(got["kernels"], got["provenance"], strict=False) if any(at(e["site"]) == "batch" for e in own(es))]
  assert batch and all(e["fn"] in ("_next_counter", "_threefry_random_bits", "_bits_to_rand", "_cumalu", "__add__", "__getitem__")
                       for es in batch for e in es if at(e["site"]) == "batch")
  step = [e for es in got["provenance"] for e in own(es) if at(e["site"]) == "step"]
  assert len(step) > 50 and sum((e["via"] or "").startswith("nn.optim") for e in step) >= len(step) - 3

LLM_MODEL = pathlib.Path(str(importlib.util.find_spec("tinygrad").origin)).parent / "llm" / "model.py"

def llm_line(code: str) -> str:
  """The line of tinygrad/llm/model.py that holds code."""
  (n,) = [i for i, line in enumerate(LLM_MODEL.read_text().splitlines(), 1) if code in line]
  return f"model.py:{n}"

def llm_generate_lines(got: dict, mark: dict[str, str], db: pathlib.Path) -> None:
  """tinygrad's LLM: each kernel credited to the line of tinygrad/llm/model.py that made it, run from the program's line (generate's
  loop, or the model's construction for the weights' initialisers), never to a decorator's frame (TinyJit.__call__'s contextlib); the
  attention to scaled_dot_product_attention's line, the projections to their Linear's, the sampler's random draw to forward's last line.
  The prefill's symbolic token count goes through bufferize: its STAGE sizes as expressions of toks and start_pos, with their bounds and
  the values the prefill bound, shown on the bufferize page."""
  assert got["symbolic"] and all(set(s["variables"]) <= {"toks", "start_pos"} for s in got["symbolic"]), got["symbolic"]
  assert {"toks": [1, 32]} in [{k: v for k, v in s["variables"].items() if k == "toks"} for s in got["symbolic"]]
  assert all(s["at"] is not None and s["at"] > 0 for s in got["symbolic"])
  from fastapi.testclient import TestClient
  from support import app_over
  attention_kernel = next(i for i, es in enumerate(got["provenance"]) if any(e["fn"] == "scaled_dot_product_attention" for e in own(es)))
  with TestClient(app_over(str(db))) as client:
    page = client.get(f"/t/{got['id']}/bufferize").text
    made_by = client.get(f"/t/{got['id']}/k/{attention_kernel}").text
  assert 'data-symbolic="' in page and "toks ∈ [1, 32]" in page
  panel = made_by[made_by.index('id="made-by"'):][:6000]
  assert "model.py:" in panel and re.search(r"data-caller>[^<]*</span>\s*<(a|span)[^>]*>llm_generate\.py:\d+</(a|span)>", panel), panel
  entries = [e for es in got["provenance"] for e in es]
  assert all(e["site"].startswith("model.py:") and mark.get(e["caller"] or "") in ("generate", "build") for e in entries), \
    [e for e in entries if not e["site"].startswith("model.py:") or mark.get(e["caller"] or "") not in ("generate", "build")][:3]
  sites = lambda fn: {e["site"] for e in entries if e["fn"] == fn and not e["inferred"]}
  assert sites("scaled_dot_product_attention") == {llm_line("q.scaled_dot_product_attention(k, v")}
  assert llm_line("q, k, v = self.attn_q(x), self.attn_k(x), self.attn_v(x)") in sites("linear")
  assert sites("rand_like") == {llm_line("Tensor.rand_like(logits)")}
  attention = [own(es) for es in got["provenance"] if any(e["fn"] == "scaled_dot_product_attention" for e in own(es))]
  assert len(attention) >= 20 and not any(e["fn"] == "rand_like" for es in attention for e in es)  # the sampler is not attention's
  decode = [r for r, captured in enumerate(got["captured"]) if captured]
  assert decode and any(got["realize_of"][i] in decode for i, es in enumerate(got["provenance"]) if es)  # the decode JIT's capture, traced

def onnx_runner_lines(got: dict, mark: dict[str, str], db: pathlib.Path) -> None:
  """tinygrad's ONNX runner: each kernel names the ONNX nodes it computes, by op type and name, and the program's line that ran the
  runner: the direct call's, or the jitted lambda's for the TinyJit's calls."""
  nodes = {"Conv": "/features/conv1/Conv", "Relu": "/features/relu/Relu", "MaxPool": "/features/pool/MaxPool", "Gemm": "/classifier/fc/Gemm",
           "Softmax": "/classifier/Softmax"}
  for k, es, r in zip(got["kernels"], got["provenance"], got["realize_of"], strict=False):
    assert es and all(e["onnx"] is not None and nodes.get(e["onnx"][0]) == e["onnx"][1] for e in es), (k, es)
    assert {mark[e["site"]] for e in es} == {"direct" if r == 0 else "jitted"}, (k, r, es)
  conv = next(es for k, es in zip(got["kernels"], got["provenance"], strict=False) if any(e["fn"] == "conv2d" for e in es))
  assert {e["onnx"][0] for e in conv} == {"Conv", "Relu"}  # the relu fused into the convolution's kernel
  assert {e["onnx"][0] for es in got["provenance"] for e in es} == set(nodes)
  from fastapi.testclient import TestClient
  from support import app_over
  with TestClient(app_over(str(db))) as client:
    page = client.get(f"/t/{got['id']}/k/0").text
    found = client.get(f"/api/traces/{got['id']}/kernels", params={"q": "/features/conv1/Conv"}).json()
  assert 'data-onnx="0"' in page and "/features/conv1/Conv" in page  # the kernel page names its nodes; a search finds them by name
  assert [k["index"] for k in found] == [i for i, es in enumerate(got["provenance"]) if any(e["onnx"][0] == "Conv" for e in es)]

LINES = {"beautiful_mnist": beautiful_mnist_lines, "beautiful_mnist_nofunction": beautiful_mnist_lines, "llm_generate": llm_generate_lines,
         "onnx_runner": onnx_runner_lines}

def test_function_credits_kernels_as_without_it(tmp_path):
  """beautiful_mnist's @function on its model's __call__ (tinygrad turns the body into a FUNCTION called on PARAMs, and differentiates it
  whole): every kernel credited to the same functions and marked lines as without it, backward entries to the same .backward() line."""
  runs = {n: run("captured", str(tmp_path / f"{n}.sqlite3"), n)[n] for n in ("beautiful_mnist", "beautiful_mnist_nofunction")}
  def credited(name: str) -> collections.Counter:
    mark = marks(name)
    return collections.Counter((k, tuple(sorted((e["fn"], e["backward"], mark.get(e["site"], e["site"]), mark.get(e["backward_line"] or "", None),
                                                  e["inferred"]) for e in es))) for k, es in zip(runs[name]["kernels"], runs[name]["provenance"],
                                                                                                               strict=False))
  assert runs["beautiful_mnist"]["outputs"] == runs["beautiful_mnist_nofunction"]["outputs"]
  assert credited("beautiful_mnist") == credited("beautiful_mnist_nofunction")

def test_one_program_a_day_against_plain_tinygrad_now():
  name = PROGRAMS[datetime.date.today().toordinal() % len(PROGRAMS)]
  assert run("plain", name)[name]["outputs"] == GOLDEN_DATA["outputs"][name], f"{name}: plain tinygrad now differs from the golden data"
