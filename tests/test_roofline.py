"""Roofline: the spec-sheet table, the math on a synthetic trace, the SVG, and the measured probe on this host's CPU.
Nothing here imports tinygrad: device facts and the probe run in worker processes."""
import math
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import pytest
from explorer.analysis import roofline as R
from explorer.cli import main

@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  return tmp_path / "cache"

@pytest.mark.parametrize("name,device,model", [
  ("NVIDIA H100 80GB HBM3", "CUDA", "H100 SXM"), ("NVIDIA H100 PCIe", "CUDA", "H100 PCIe"), ("NVIDIA H100 NVL", "NV", "H100 NVL"),
  ("NVIDIA H200", "CUDA", "H200 SXM"), ("NVIDIA H200 NVL", "CUDA", "H200 NVL"), ("NVIDIA A100-SXM4-80GB", "CUDA", "A100 80GB SXM"),
  ("NVIDIA A100 80GB PCIe", "CUDA", "A100 80GB PCIe"), ("NVIDIA A100-PCIE-40GB", "CUDA", "A100 40GB"),
  ("NVIDIA GeForce RTX 4090", "NV", "RTX 4090"), ("Apple M1", "METAL", "Apple M1"), ("Apple M1 Max", "METAL", "Apple M1 Max"),
  ("Apple M2 Pro", "METAL", "Apple M2 Pro"), ("Apple M3", "METAL", "Apple M3"), ("Apple M3 Max", "METAL", "Apple M3 Max"),
])
def test_known_devices(name, device, model):
  p = R.known_peaks(name, device)
  assert p is not None and p["model"] == model and p["bw"] > 0 and p["source"]

@pytest.mark.parametrize("name,device", [
  ("Intel(R) Xeon(R) Processor", "CPU"), ("Apple M1", "CPU"),  # CPUs always use the probe, even on an Apple chip
  ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "CUDA"),                 # a slice of the GPU: the spec sheet would overstate it
  ("NVIDIA GeForce RTX 4090 D", "CUDA"), ("NVIDIA GeForce RTX 4090 Laptop GPU", "CUDA"), ("NVIDIA Tesla T4", "CUDA"),
])
def test_unknown_devices_use_the_probe(name, device):
  assert R.known_peaks(name, device) is None

def test_table_figures_are_sane():
  for e in R.KNOWN:
    assert e["source"] and 50e9 <= e["bw"] <= 10e12, e["model"]
    rates = [e[k] for k in R.COMPUTE_KEYS if e[k] is not None]
    assert all(1e12 <= r <= 2e15 for r in rates), e["model"]
    if e["fp32"] and e["fp16_tc"]: assert e["fp16_tc"] >= e["fp32"], e["model"]

PEAKS = {"device": "TEST", "name": "test device", "model": None, "fp32": 1e12, "fp16": 2e12, "tf32_tc": None, "fp16_tc": 8e12, "bw": 1e11,
         "sources": {"fp32": "test", "bw": "test"}}

def kernel(i: int, flops: int, nbytes: int, t: float | None, wmma: int = 0) -> dict:
  return {"index": i, "name": f"k{i}", "role": "conv", "flops": flops, "bytes": nbytes, "ops": {"op:WMMA": wmma} if wmma else {"alu": 1},
          "time_s": None if t is None else {"median": t, "mean": t, "std": 0.0, "min": t, "n": 3}}

def synthetic(dtype: str = "float32") -> dict:
  # ridge at 10 FLOP/B: k0 at 1 FLOP/B (memory bound), k1 at 100 FLOP/B (compute bound), k2 not timed
  ks = [kernel(0, 10**6, 10**6, 1e-4), kernel(1, 10**9, 10**7, 2e-3), kernel(2, 10, 10, None)]
  return {"spec": {"dtype": dtype}, "env": {"device": "TEST"}, "timing": {"device": "TEST"}, "kernels": ks}

def test_roofline_math():
  rl = R.roofline(synthetic(), PEAKS)
  k0, k1, k2 = rl["kernels"]
  assert math.isclose(k0["flops_per_s"], 1e10) and math.isclose(k0["bytes_per_s"], 1e10) and k0["intensity"] == 1.0
  assert math.isclose(k0["pct_compute"], 1.0) and math.isclose(k0["pct_bandwidth"], 10.0)
  assert k0["bound"] == "memory" and math.isclose(k0["roof"], 1e11) and math.isclose(k0["pct_roof"], 10.0)
  assert math.isclose(k1["flops_per_s"], 5e11) and k1["intensity"] == 100.0 and k1["bound"] == "compute"
  assert math.isclose(k1["pct_compute"], 50.0) and math.isclose(k1["pct_bandwidth"], 5.0) and math.isclose(k1["roof"], 1e12)
  assert k2["flops_per_s"] is None and k2["pct_compute"] is None and k2["note"] == "not timed"
  assert [p["index"] for p in rl["plot"]["points"]] == [0, 1]
  assert rl["plot"]["roofs"] == [{"key": "fp32", "label": "FP32", "flops_per_s": 1e12, "ridge": 10.0}]
  assert rl["timing_device"] == "TEST"

def test_roofline_picks_the_roof_by_dtype_and_tensor_cores():
  t = synthetic("float16")
  t["kernels"][1] = kernel(1, 10**9, 10**7, 2e-3, wmma=4)
  k0, k1, _ = R.roofline(t, PEAKS)["kernels"]
  assert k0["roof_key"] == "fp16" and math.isclose(k0["pct_compute"], 0.5)
  assert k1["roof_key"] == "fp16_tc" and k1["tensor_cores"] and k1["bound"] == "compute"
  # float32 on tensor cores (TF32) with no TF32 figure: the FP32 roof, said so
  t32 = synthetic()
  t32["kernels"][1] = kernel(1, 10**9, 10**7, 2e-3, wmma=4)
  k1 = R.roofline(t32, PEAKS)["kernels"][1]
  assert k1["roof_key"] == "fp32" and "FP32 roof" in k1["note"]

def test_merge_peaks_fills_only_what_the_sheet_lacks():
  info = {"device": "METAL", "name": "Apple M2", "host": "h", "tinygrad": "0.14.0"}
  known = R.known_peaks("Apple M2", "METAL")
  merged = R.merge_peaks(info, known, {"fp32": 3e12, "bw": 90e9})
  assert merged["fp32"] == 3e12 and merged["sources"]["fp32"].startswith("measured")
  assert merged["bw"] == 100e9 and merged["sources"]["bw"].startswith("Apple")
  assert R.merge_peaks(info, known, {"fp32": 3e12, "bw": 90e9}, prefer_measured=True)["bw"] == 90e9
  assert R.merge_peaks(info, None, None)["fp32"] is None

def test_svg_is_well_formed():
  for rl in (R.roofline(synthetic(), PEAKS), R.roofline({**synthetic(), "kernels": []}, PEAKS),
             R.roofline(synthetic(), {**PEAKS, "fp32": None, "bw": None})):
    svg = R.roofline_svg(rl)
    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
  assert svg.count("<circle") == 2 and "k1 (conv)" in svg

def test_rate():
  assert R.rate(67e12, "FLOP/s") == "67 TFLOP/s" and R.rate(12.26e9, "B/s") == "12.26 GB/s" and R.rate(None, "B/s") == "-"

def test_probe_on_cpu_and_cache(cache_home):
  info = R.describe("CPU")
  assert info["device"] == "CPU" and info["name"] and info["host"]
  st = time.perf_counter()
  got = R.measured_peaks(info)
  first = time.perf_counter() - st
  assert got["fp32"] > 1e8 and got["bw"] > 1e8, got
  assert 0 < got["probe"]["seconds"] <= first < 60, (got["probe"]["seconds"], first)  # bounded: its speed is benchmarks/roofline_probe.py's
  assert (cache_home / "kernel-explorer" / "peaks.json").exists()
  st = time.perf_counter()
  assert R.measured_peaks(info) == got and time.perf_counter() - st < 1  # from the cache: no worker
  peaks = R.peaks_for("CPU")
  assert peaks["fp32"] == got["fp32"] and peaks["sources"]["bw"].startswith("measured")

def test_devices_on_this_host():
  found = R.list_devices()
  names = [d["device"] for d in found["devices"]]
  assert "CPU" in names and found["default"] == names[0]
  # every compute device that did not open says why, in tinygrad's words (NV's bare StopIteration in some VMs included)
  unopened = {u["device"]: u["reason"] for u in found["unopened"]}
  assert set(unopened) | set(names) == {"METAL", "AMD", "NV", "CUDA", "CL", "CPU"} and all(unopened.values())
  assert "not opened here: " + next(iter(unopened)) in R.devices_report()

def test_cli_devices_and_trace_roofline(capsys):
  assert main(["devices"]) == 0
  out = capsys.readouterr().out
  assert "CPU" in out and "*" in out
  assert main(["trace", "--preset", "small", "--target", "cuda", "--repeats", "3", "--quiet", "--roofline", "--device", "CPU"]) == 0
  out = capsys.readouterr().out
  assert "roofline:" in out and "% peak FLOP" in out and "measured on" in out
  assert main(["trace", "--preset", "small", "--target", "cuda", "--no-time", "--quiet", "--roofline"]) == 0
  assert "no timings" in capsys.readouterr().out

def test_roofline_module_does_not_import_tinygrad():
  code = "import sys, explorer.analysis.roofline, explorer.cli; sys.exit('tinygrad' in sys.modules or 'explorer.tracing.tg' in sys.modules)"
  assert subprocess.run([sys.executable, "-c", code]).returncode == 0
