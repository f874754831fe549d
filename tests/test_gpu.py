"""On an NVIDIA host: traces run and are timed on the GPU by default, and their roofline makes sense. Skipped where no NVIDIA GPU is.
The device list comes from a subprocess: importing explorer.tracing.tg here would switch on tinygrad's tracking in the pytest process."""
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import pytest
from explorer.analysis import roofline as R
from explorer.spec import PRESETS, Variant
from explorer.tracing.pipeline.run import run_trace

def _nvidia_devices() -> list[str]:
  """CUDA/NV devices tinygrad opens here; cheap signs of an NVIDIA driver first, so CPU hosts pay nothing."""
  if not (shutil.which("nvidia-smi") or os.path.exists("/dev/nvidiactl") or glob.glob("/proc/driver/nvidia/gpus/*")): return []
  code = "import json; from explorer.tracing import tg; print(json.dumps(tg.available_devices()))"
  try: out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, "VIZ": "0"})
  except subprocess.TimeoutExpired: return []
  try: return [d for d in json.loads(out.stdout.strip().splitlines()[-1]) if d in ("CUDA", "NV")]
  except (ValueError, IndexError): return []

NVIDIA = _nvidia_devices()
GPU = "CUDA" if "CUDA" in NVIDIA else (NVIDIA[0] if NVIDIA else None)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU is None, reason="no CUDA/NV device that tinygrad can open on this host")]

@pytest.fixture(scope="module", autouse=True)
def cache_home(tmp_path_factory):
  with pytest.MonkeyPatch.context() as mp:  # the probe's cache: not the user's
    mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    yield

@pytest.fixture(scope="module")
def gpu_trace():
  return run_trace(PRESETS["small"], Variant(targets=("cuda",), repeats=5, device=GPU)).trace

@pytest.fixture(scope="module")
def peaks():
  return R.peaks_for(GPU)

def test_default_device_is_the_gpu():
  found = R.list_devices()
  assert found["default"] in ("NV", "CUDA") or os.environ.get("DEV"), found
  assert run_trace(PRESETS["small"], Variant(targets=("cuda",), time=False)).trace["env"]["device"] == found["default"]

def test_trace_is_timed_on_the_gpu(gpu_trace):
  assert gpu_trace["status"] == "ok", gpu_trace["failures"]
  assert gpu_trace["env"]["device"] == GPU and gpu_trace["timing"]["device"] == GPU
  assert gpu_trace["env"]["fallback"] is None
  assert gpu_trace["error"]["max_abs"] < 1e-3 * gpu_trace["error"]["ref_max_abs"]
  for k in gpu_trace["kernels"]:
    assert k["time_s"]["n"] == 5 and 0 < k["time_s"]["min"] <= k["time_s"]["median"] < 1.0, k["time_s"]
    assert "__global__" in k["sources"]["host"]  # tinygrad's CUDA renderer (CUDA and NV both use it)
  assert gpu_trace["totals"]["time_s"]["median"] > 0

def test_roofline_percentages(gpu_trace, peaks):
  assert peaks["fp32"] and peaks["bw"], peaks
  rl = R.roofline(gpu_trace, peaks)
  for k in rl["kernels"]:
    assert 0 < k["pct_compute"] <= 100 and 0 < k["pct_bandwidth"] <= 100, k
    assert k["bound"] in ("memory", "compute") and k["intensity"] > 0
  ET.fromstring(R.roofline_svg(rl))
  assert "roofline:" in R.table_text(rl)

def test_probe_on_the_gpu(peaks):
  info = R.describe(GPU)
  got = R.measured_peaks(info, refresh=True)
  assert got["fp32"] > 1e12 and got["bw"] > 1e11, got  # any NVIDIA GPU tinygrad supports does better than 1 TFLOP/s and 100 GB/s
  if (known := R.known_peaks(info["name"], info["device"])) is not None:  # a spec sheet is a ceiling: the probe stays below it
    assert got["fp32"] <= 1.1 * known["fp32"] and got["bw"] <= 1.1 * known["bw"], (got, known)

# ***** one clock: each method on a real kernel, the span, and the explorer's times against CUPTI's from a process of its own *****

HAS_CUPTI = importlib.util.find_spec("cupti") is not None
CLOCKS = ["cupti", "events-held", "events"]

@pytest.fixture(scope="module")
def by_clock():
  """The small conv traced on the GPU once per clock (KERNEL_EXPLORER_CLOCK asks for a lesser one; unset, the best: CUPTI)."""
  out = {}
  for method in CLOCKS:
    if method == "cupti" and not HAS_CUPTI: continue
    with pytest.MonkeyPatch.context() as mp:
      if method == "cupti": mp.delenv("KERNEL_EXPLORER_CLOCK", raising=False)
      else: mp.setenv("KERNEL_EXPLORER_CLOCK", method)
      out[method] = run_trace(PRESETS["medium"], Variant(algo="winograd", targets=("cuda",), repeats=10, device="CUDA")).trace
  return out

@pytest.mark.parametrize("method", CLOCKS)
def test_each_clock_times_real_kernels(by_clock, method):
  if method not in by_clock: pytest.skip("NVIDIA's cupti-python is not installed here (the [gpu] extra)")
  t = by_clock[method]
  assert t["status"] == "ok", t["failures"]
  assert t["timing"]["method"] == method and t["timing"]["total_s"]["method"] == method
  for k in t["kernels"]:
    assert k["time_s"]["method"] == method and 0 < k["time_s"]["median"] < 1e-2, k["time_s"]
    assert k["time_s"]["l2"] == ("warm" if method == "events" else "flushed")
    if method != "events": assert k["time_warm_s"]["l2"] == "warm"

def test_the_span_is_below_the_launch_inclusive_sum(by_clock):
  """Replayed back to back (a CUDA graph where tinygrad builds one), the schedule takes less than its kernels launched one by one
  with the host's launch latency inside each: the figure the explorer used to add up."""
  best = by_clock.get("cupti") or by_clock["events-held"]
  assert best["timing"]["span_s"]["median"] < by_clock["events"]["timing"]["total_s"]["median"]
  assert best["timing"]["span_s"]["median"] >= max(k["time_s"]["min"] for k in best["kernels"])

@pytest.mark.skipif(not HAS_CUPTI, reason="NVIDIA's cupti-python is not installed here (the [gpu] extra)")
def test_kernel_times_agree_with_cupti_from_a_process_of_its_own(by_clock):
  bench = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu_timing.py")
  r = subprocess.run([sys.executable, bench, "--cupti-child", "medium", "winograd", "--repeats", "10"], capture_output=True, text=True,
                     timeout=600, env={**os.environ, "VIZ": "0"})
  assert r.returncode == 0, r.stderr
  ref = json.loads(r.stdout.strip().splitlines()[-1])
  for k in by_clock["cupti"]["kernels"]:
    theirs = sorted(ref[k["name"]])[len(ref[k["name"]]) // 2]
    assert abs(k["time_s"]["median"] - theirs) <= max(0.10 * theirs, 0.5e-6), (k["name"], k["time_s"]["median"], theirs)
