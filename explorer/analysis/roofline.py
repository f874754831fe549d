"""Roofline: where each kernel of a trace sits against its device's peak compute and memory bandwidth.

Peaks come from vendor spec sheets for known GPUs (matched by the driver's device name) and, for anything else (every CPU,
unlisted GPUs, MIG slices), from a probe measured on the device itself through tinygrad, cached per device. No tinygrad here:
device facts and the probe run in a worker (explorer.tracing.pipeline.probe).
"""
from __future__ import annotations
import html
import json
import math
import os
import pathlib
import re
import tempfile
from collections.abc import Callable
from typing import Any, Literal, cast
from typing_extensions import TypedDict
from explorer.clocks import method_of
from explorer.schema import DeviceInfo, DevicesFound, KernelRecord, Measured, TraceRecord, device_name, timing_of
from explorer.text import fmt_fixed

ComputeKey = Literal["fp32", "fp16", "tf32_tc", "fp16_tc"]
PeakKey = Literal[ComputeKey, "bw"]
COMPUTE_KEYS: tuple[ComputeKey, ...] = ("fp32", "fp16", "tf32_tc", "fp16_tc")  # vector FP32/FP16, dense tensor-core TF32/FP16 (FP32 accumulate)
PEAK_KEYS: tuple[PeakKey, ...] = (*COMPUTE_KEYS, "bw")
LABELS = {"fp32": "FP32", "fp16": "FP16", "tf32_tc": "TF32 tensor cores", "fp16_tc": "FP16 tensor cores"}
NVIDIA, APPLE = ("CUDA", "NV"), ("METAL",)

class SheetPeaks(TypedDict):
  """A spec sheet's figures for a device model (FLOP/s, bytes/s; None: the vendor published none) and where they are from."""
  model: str
  source: str
  bw: float
  fp32: float | None
  fp16: float | None
  tf32_tc: float | None
  fp16_tc: float | None

class Known(SheetPeaks):
  match: str                  # a regular expression over the driver's device name
  backends: tuple[str, ...]   # the tinygrad backends that name it so

class DeviceKey(TypedDict):
  """What names a device's measured peaks in the cache (a DeviceInfo has these and more)."""
  device: str
  name: str
  host: str
  tinygrad: str

class Peaks(TypedDict):
  """A device's peaks: each figure from the spec sheet or the probe (None: neither has it), sources[figure] where it came from."""
  device: str
  name: str
  model: str | None
  sources: dict[str, str]
  measured: Measured | None
  fp32: float | None
  fp16: float | None
  tf32_tc: float | None
  fp16_tc: float | None
  bw: float | None

def _known(model: str, match: str, backends: tuple[str, ...], source: str, bw: float, fp32: float | None = None, fp16: float | None = None,
           tf32_tc: float | None = None, fp16_tc: float | None = None) -> Known:
  return {"model": model, "match": match, "backends": backends, "source": source, "bw": bw, "fp32": fp32, "fp16": fp16,
          "tf32_tc": tf32_tc, "fp16_tc": fp16_tc}

# Matched in order (first wins) against the driver's name: CUDA's cuDeviceGetName ("NVIDIA H100 80GB HBM3"), Metal's ("Apple M1 Pro").
# FLOP/s are dense: NVIDIA's datasheets print tensor-core rates with 2:4 sparsity ("*"), halved here. None: not published by the
# vendor; the measured probe fills in FP32 and bandwidth, the others stay unknown.
KNOWN: tuple[Known, ...] = (
  # NVIDIA H200 Tensor Core GPU datasheet: H200 NVL FP32 60 TF, TF32 835 TF*, FP16 1,671 TF*, 4.8 TB/s
  _known("H200 NVL", r"H200 NVL", NVIDIA, "NVIDIA H200 datasheet", 4.8e12, fp32=60e12, tf32_tc=417.5e12, fp16_tc=835.5e12),
  # NVIDIA H200 datasheet: H200 SXM FP32 67 TF, TF32 989 TF*, FP16 1,979 TF*, 4.8 TB/s; vector FP16 as H100 SXM (same GH100 SXM5 part)
  _known("H200 SXM", r"H200", NVIDIA, "NVIDIA H200 datasheet", 4.8e12, fp32=67e12, fp16=133.8e12, tf32_tc=494.7e12, fp16_tc=989.4e12),
  # NVIDIA H100 datasheet: H100 NVL FP32 60 TF, TF32 835 TF*, FP16 1,671 TF*, 3.9 TB/s
  _known("H100 NVL", r"H100 NVL", NVIDIA, "NVIDIA H100 datasheet", 3.9e12, fp32=60e12, tf32_tc=417.5e12, fp16_tc=835.5e12),
  # NVIDIA H100 datasheet: H100 PCIe FP32 51 TF, TF32 756 TF*, FP16 1,513 TF*, 2 TB/s; vector FP16 102.4 TF: H100 architecture whitepaper
  _known("H100 PCIe", r"H100 PCIe", NVIDIA, "NVIDIA H100 datasheet", 2.0e12, fp32=51e12, fp16=102.4e12, tf32_tc=378e12, fp16_tc=756.5e12),
  # NVIDIA H100 datasheet: H100 SXM FP32 67 TF, TF32 989 TF*, FP16 1,979 TF*, 3.35 TB/s; vector FP16 133.8 TF: H100 whitepaper.
  # The other H100 names ("H100 80GB HBM3", "H100 SXM5 80GB") are SXM parts
  _known("H100 SXM", r"H100", NVIDIA, "NVIDIA H100 datasheet", 3.35e12, fp32=67e12, fp16=133.8e12, tf32_tc=494.7e12, fp16_tc=989.4e12),
  # NVIDIA A100 datasheet: FP32 19.5 TF, TF32 312 TF*, FP16 624 TF*; 80GB PCIe 1,935 GB/s, 80GB SXM 2,039 GB/s, 40GB 1,555 GB/s;
  # vector FP16 78 TF: A100 architecture whitepaper
  _known("A100 80GB PCIe", r"A100.*80GB.*PCIe|A100-PCIE-80GB", NVIDIA, "NVIDIA A100 datasheet", 1.935e12, 19.5e12, 78e12, 156e12, 312e12),
  _known("A100 80GB SXM", r"A100.*80GB", NVIDIA, "NVIDIA A100 datasheet", 2.039e12, 19.5e12, 78e12, 156e12, 312e12),
  _known("A100 40GB", r"A100", NVIDIA, "NVIDIA A100 datasheet", 1.555e12, 19.5e12, 78e12, 156e12, 312e12),
  # NVIDIA Ada GPU architecture whitepaper, appendix (GeForce RTX 4090): FP32 82.6 TF, vector FP16 82.6 TF, TF32 tensor 82.6 TF,
  # FP16 tensor with FP32 accumulate 165.2 TF (dense), 1,008 GB/s. Not the 4090 D nor the laptop part
  _known("RTX 4090", r"RTX 4090$", NVIDIA, "NVIDIA Ada whitepaper", 1.008e12, 82.6e12, 82.6e12, 82.6e12, 165.2e12),
  # Apple newsroom: bandwidth of each chip (the Max figures are the top configuration; M3 Max with the 30-core GPU has 300 GB/s).
  # GPU FP32 only where Apple stated it, for the top GPU configuration: M1 2.6 TF (Nov 2020 event), M1 Pro 5.2 TF and M1 Max 10.4 TF
  # (Oct 2021 event); binned parts (7-core M1, 14-core M1 Pro, 24-core M1 Max) are slower
  _known("Apple M1 Ultra", r"\bM1 Ultra\b", APPLE, "Apple newsroom (Mar 2022)", 800e9),
  _known("Apple M1 Max", r"\bM1 Max\b", APPLE, "Apple newsroom and event (Oct 2021)", 400e9, fp32=10.4e12),
  _known("Apple M1 Pro", r"\bM1 Pro\b", APPLE, "Apple newsroom and event (Oct 2021)", 200e9, fp32=5.2e12),
  # M1: LPDDR4X-4266 on a 128-bit bus = 68.25 GB/s (Apple states only that M2's 100 GB/s is 50% more)
  _known("Apple M1", r"\bM1\b", APPLE, "Apple event (Nov 2020); LPDDR4X-4266 x 128 bit", 68.25e9, fp32=2.6e12),
  _known("Apple M2 Ultra", r"\bM2 Ultra\b", APPLE, "Apple newsroom (Jun 2023)", 800e9),
  _known("Apple M2 Max", r"\bM2 Max\b", APPLE, "Apple newsroom (Jan 2023)", 400e9),
  _known("Apple M2 Pro", r"\bM2 Pro\b", APPLE, "Apple newsroom (Jan 2023)", 200e9),
  _known("Apple M2", r"\bM2\b", APPLE, "Apple newsroom (Jun 2022)", 100e9),
  _known("Apple M3 Max", r"\bM3 Max\b", APPLE, "Apple newsroom (Oct 2023)", 400e9),
  _known("Apple M3 Pro", r"\bM3 Pro\b", APPLE, "Apple newsroom (Oct 2023)", 150e9),
  _known("Apple M3", r"\bM3\b", APPLE, "Apple newsroom (Oct 2023)", 100e9),
)

def known_peaks(name: str, device: str) -> SheetPeaks | None:
  """The spec-sheet entry for a device name on a tinygrad backend, or None (CPUs, unlisted GPUs, MIG slices of a GPU)."""
  base = device.split(":")[0].upper()
  if "MIG" in name: return None
  hit = next((e for e in KNOWN if base in e["backends"] and re.search(e["match"], name)), None)
  return None if hit is None else cast(SheetPeaks, {k: v for k, v in hit.items() if k not in ("match", "backends")})

# ***** measured peaks: the probe, cached per device *****

def cache_path() -> pathlib.Path:
  return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "kernel-explorer" / "peaks.json"

def _cache_key(info: DeviceKey) -> str: return f"{info['host']}|{info['device']}|{info['name']}|tinygrad {info['tinygrad']}"

def _load_cache() -> dict[str, Measured]:
  """The measured peaks by device (_cache_key): only the devices probed on this host."""
  try: cache: dict[str, Measured] = json.loads(cache_path().read_text())
  except (OSError, ValueError): return {}
  return cache

def _cached(info: DeviceKey) -> Measured | None:
  """The peaks the probe measured on this device before, from the cache (None: not probed on this host)."""
  return _load_cache().get(_cache_key(info))

def _store_cache(key: str, value: Measured) -> None:
  p = cache_path()
  p.parent.mkdir(parents=True, exist_ok=True)
  data = {**_load_cache(), key: value}
  with tempfile.NamedTemporaryFile("w", dir=p.parent, delete=False, suffix=".tmp") as f: json.dump(data, f, indent=1)
  os.replace(f.name, p)

def describe(device: str | None = None, timeout_s: float = 120.0) -> DeviceInfo:
  """Device, hardware name, compiler, host (in a worker: it opens the device)."""
  from explorer.tracing.workers.process import call_in_worker
  info: DeviceInfo = call_in_worker("explorer.tracing.pipeline.probe:describe", {"device": device}, env={"VIZ": "0"}, timeout_s=timeout_s)[0]
  return info

def list_devices(timeout_s: float = 120.0) -> DevicesFound:
  from explorer.tracing.workers.process import call_in_worker
  found: DevicesFound = call_in_worker("explorer.tracing.pipeline.probe:list_devices", {}, env={"VIZ": "0"}, timeout_s=timeout_s)[0]
  return found

def measured_peaks(info: DeviceKey, refresh: bool = False, timeout_s: float = 300.0,
                   progress: Callable[[str, str, str], None] | None = None) -> Measured:
  """The probe's FP32 FLOP/s and bandwidth for the device info describes: from the cache, else measured in a worker and cached.
  progress(stage, status, detail) hears what the worker measures, and its wait for the device."""
  from explorer.tracing.workers.process import call_in_worker
  key = _cache_key(info)
  hit = None if refresh else _cached(info)
  if hit is not None: return hit
  # a measurement: the device's lock for the whole run, so that no trace or study times on it meanwhile (explorer.tracing.workers.devicelock)
  got: Measured = call_in_worker("explorer.tracing.pipeline.probe:measure", {"device": info["device"]}, progress=progress, env={"VIZ": "0"},
                             timeout_s=timeout_s, exclusive=info["device"])[0]
  _store_cache(key, got)
  return got

def _probed(measured: Measured | None, k: PeakKey) -> float | None:
  """The probe's figure for k: it measures FP32 and bandwidth only."""
  if measured is None: return None
  return measured["fp32"] if k == "fp32" else measured["bw"] if k == "bw" else None

def merge_peaks(info: DeviceKey, known: SheetPeaks | None, measured: Measured | None, prefer_measured: bool = False) -> Peaks:
  """One peaks dict: each figure from the spec sheet, or from the probe where the sheet has none (or prefer_measured)."""
  ret: Peaks = {"device": info["device"], "name": info["name"], "model": known and known["model"], "sources": {}, "measured": measured,
                "fp32": None, "fp16": None, "tf32_tc": None, "fp16_tc": None, "bw": None}
  for k in PEAK_KEYS:
    table, meas = known[k] if known is not None else None, _probed(measured, k)
    use_meas = meas is not None and (table is None or prefer_measured)
    ret[k] = meas if use_meas else table
    if ret[k] is not None: ret["sources"][k] = f"measured on {info['host']} (probe)" if use_meas or known is None else known["source"]
  return ret

def peaks_for(device: str | None = None, probe: str = "auto", refresh: bool = False) -> Peaks:
  """Peaks of a device (None: the best one present). probe: 'auto' measures only what the spec sheet lacks (FP32 or bandwidth),
  'always' measures and prefers the measurement, 'never' uses the spec sheet alone."""
  info = describe(device)
  known = known_peaks(info["name"], info["device"])
  need = probe == "always" or (probe == "auto" and (known is None or known["fp32"] is None or known["bw"] is None))
  return merge_peaks(info, known, measured_peaks(info, refresh) if need else None, prefer_measured=probe == "always")


def peaks_of_trace(trace: TraceRecord) -> Peaks | None:
  """Peaks for the hardware a trace ran on, without touching any device: the spec sheet, completed by a probe measured earlier on
  this host (the cache); None when neither has a compute and a bandwidth figure."""
  env = trace["env"]
  info: DeviceKey = {"device": env["device"], "name": device_name(env), "host": env["host"], "tinygrad": env["tinygrad"]}
  peaks = merge_peaks(info, known_peaks(info["name"], info["device"]), _cached(info))
  return peaks if peaks["fp32"] and peaks["bw"] else None

def probe_for_trace(trace: TraceRecord, timeout_s: float = 300.0, progress: Callable[[str, str, str], None] | None = None) -> Measured:
  """Measure (in a worker) and cache the peaks of the device a trace ran on; it must be a device of this host."""
  env = trace["env"]
  return measured_peaks({"device": env["device"], "name": device_name(env), "host": env["host"], "tinygrad": env["tinygrad"]},
                        refresh=True, timeout_s=timeout_s, progress=progress)

# ***** the roofline of a trace *****

def compute_key(dtype: str, tensor_cores: bool) -> ComputeKey:
  return ("fp16_tc" if tensor_cores else "fp16") if dtype == "float16" else ("tf32_tc" if tensor_cores else "fp32")

def _pct(x: float | None, peak: float | None) -> float | None: return None if x is None or not peak else 100.0 * x / peak

def kernel_dtype(trace: TraceRecord, k: KernelRecord) -> str:
  """The dtype a kernel of a captured program computes in: that of the first buffer it writes ("dtypes.half" reads float16), the roof
  it is put against (a program mixes them: an fp16 matmul beside fp32 optimizer updates)."""
  written = [trace["buffers"][i]["dtype"] for i in k["writes"] if i < len(trace["buffers"])]
  name = (written[0] if written else "float").removeprefix("dtypes.")
  return "float16" if name in ("half", "float16") else "float32"

def kernel_point(k: KernelRecord, dtype: str, peaks: Peaks) -> dict[str, Any]:
  """Achieved FLOP/s and bytes/s of one kernel (tinygrad's Estimates over the median run time), against its roofs."""
  t = ts["median"] if (ts := k["time_s"]) else None
  tc = k["ops"].get("op:WMMA", 0) > 0  # ops: only those the kernel has
  key = compute_key(dtype, tc)
  note = None
  if peaks[key] is None and key != "fp32" and peaks["fp32"] is not None:
    key, note = "fp32", f"no {LABELS[compute_key(dtype, tc)]} figure for this device: FP32 roof"
  peak, bw = peaks[key], peaks["bw"]
  fps = k["flops"] / t if t else None
  bps = k["bytes"] / t if t else None
  ai = k["flops"] / k["bytes"] if k["bytes"] else None
  roof = min(peak, ai * bw) if peak and bw and ai is not None else None
  bound = None if not (peak and bw and ai is not None) else ("memory" if ai * bw < peak else "compute")
  return {"index": k["index"], "kernel": k["name"], "role": k["role"], "flops": k["flops"], "bytes": k["bytes"], "time_s": t,
          "flops_per_s": fps, "bytes_per_s": bps, "intensity": ai, "tensor_cores": tc, "roof_key": key, "peak_flops": peak, "peak_bw": bw,
          "pct_compute": _pct(fps, peak), "pct_bandwidth": _pct(bps, bw), "roof": roof, "pct_roof": _pct(fps, roof), "bound": bound,
          "note": note if t else "not timed"}

def roofline(trace: TraceRecord, peaks: Peaks) -> dict[str, Any]:
  """Per kernel: achieved GFLOP/s and GB/s, % of peak compute and bandwidth, arithmetic intensity, the roof that bounds it; plus the
  data of a roofline plot (roofs and points, log-log: x FLOP/byte, y FLOP/s)."""
  spec = trace["spec"]
  dtypes = [spec["dtype"] if spec is not None else kernel_dtype(trace, k) for k in trace["kernels"]]  # a program's: each kernel's own
  rows = [kernel_point(k, dt, peaks) for k, dt in zip(trace["kernels"], dtypes, strict=False)]
  dtype = spec["dtype"] if spec is not None else "/".join(sorted(set(dtypes))) or "float32"
  bw, keys = peaks["bw"], {r["roof_key"] for r in rows} | {"fp32"}
  roofs = [{"key": k, "label": LABELS[k], "flops_per_s": peak, "ridge": peak / bw if bw else None}
           for k in COMPUTE_KEYS if k in keys and (peak := peaks[k])]
  points = [{"index": r["index"], "kernel": r["kernel"], "role": r["role"], "x": r["intensity"], "y": r["flops_per_s"], "bound": r["bound"]}
            for r in rows if r["intensity"] and r["flops_per_s"]]
  return {"device": peaks["device"] or trace["env"]["device"], "name": peaks["name"], "model": peaks["model"], "dtype": dtype,
          "timing_device": timing["device"] if (timing := timing_of(trace)) else None,
          "clock": method_of(total, timing["device"]) if timing and (total := timing.get("total_s")) else None,
          "peaks": {k: peaks[k] for k in PEAK_KEYS},
          "sources": peaks["sources"], "kernels": rows, "plot": {"bw": bw, "roofs": roofs, "points": points}}

def trace_roofline(trace: TraceRecord) -> tuple[dict[str, Any] | None, str | None]:
  """(the trace's roofline, None) or (None, why there is none): untimed, or no peaks for its device yet."""
  if not timing_of(trace): return None, "this trace was not timed: a roofline needs measured run times"
  if (peaks := peaks_of_trace(trace)) is None:
    return None, f"no spec-sheet peaks for {device_name(trace['env'])} and no probe measured on this host yet"
  return roofline(trace, peaks), None

def export_block(trace: TraceRecord) -> dict[str, Any]:
  """What an export shows of the roofline: {"rl", "svg" (None: no kernel to plot), "why" (None: there is one), "rate" (how the page
  writes a rate)}; a captured program's kernels each against the roof of their own dtype."""
  rl, why = trace_roofline(trace)
  return {"rl": rl, "svg": roofline_svg(rl) if rl is not None and rl["plot"]["points"] else None, "why": why, "rate": rate}

# ***** output *****

def rate(x: float | None, unit: str) -> str:
  """67e12, "FLOP/s" -> "67 TFLOP/s"."""
  if x is None: return "-"
  p, s = next(((p, s) for p, s in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")) if x >= p), (1.0, ""))
  return f"{x / p:.4g} {s}{unit}"

def table_text(rl: dict[str, Any]) -> str:
  from explorer.text import table
  p, src = rl["peaks"], rl["sources"]  # sources: every figure's that has one (a roof's, bandwidth's where known)
  head = [f"roofline: {rl['name']} ({rl['device']}{', ' + rl['model'] if rl['model'] else ''}), {rl['dtype']}"]
  for r in rl["plot"]["roofs"]: head.append(f"  {r['label']}: {rate(r['flops_per_s'], 'FLOP/s')} [{src[r['key']]}]")
  head.append(f"  bandwidth: {rate(p['bw'], 'B/s')} [{src['bw'] if p['bw'] is not None else None}]")
  rows = [(r["kernel"], r["role"], fmt_fixed(r["time_s"], 1e-3, 3), fmt_fixed(r["flops_per_s"], 1e9), fmt_fixed(r["bytes_per_s"], 1e9),
           fmt_fixed(r["intensity"], 1, 2), fmt_fixed(r["pct_compute"], 1, 2), fmt_fixed(r["pct_bandwidth"], 1, 2), r["bound"] or "-",
           r["note"] or "") for r in rl["kernels"]]
  return "\n".join(head + [table(("kernel", "role", "time ms", "GFLOP/s", "GB/s", "FLOP/B", "% peak FLOP", "% peak BW", "bound", "note"), rows)])

def roofline_report(trace: TraceRecord, probe: str = "auto") -> str:
  """The table `kernel-explorer trace --roofline` prints: peaks for the trace's device, then one row per kernel."""
  if not timing_of(trace): return "roofline: the trace has no timings (run without --no-time)"
  try: peaks = peaks_for(trace["env"]["device"], probe)
  except Exception as e: return f"roofline: no peaks for {trace['env']['device']}: {type(e).__name__}: {e}"
  return table_text(roofline(trace, peaks))

def devices_report(probe: bool = False) -> str:
  """What `kernel-explorer devices` prints: each device this host opens, the default, spec-sheet and measured peaks."""
  from explorer.text import table
  found, rows = list_devices(), []
  for d in found["devices"]:
    known = known_peaks(d["name"], d["device"])
    meas = measured_peaks(d, refresh=True) if probe else _cached(d)
    rows.append((d["device"], d["name"], d["compiler"], "*" if d["device"] == found["default"] else "", known["model"] if known else "-",
                 rate(known and known["fp32"], "FLOP/s"), rate(known and known["bw"], "B/s"), rate(meas and meas["fp32"], "FLOP/s"),
                 rate(meas and meas["bw"], "B/s")))
  out = [table(("device", "name", "compiler", "default", "spec sheet", "FP32", "bandwidth", "measured FP32", "measured bandwidth"), rows)]
  out += [f"note: {d['device']}: {d['fallback']}" for d in found["devices"] if d["fallback"]]
  out += [f"not opened here: {u['device']} ({u['reason']})" for u in found.get("unopened", [])]
  out.append(f"traces run on {found['default']} unless --device or DEV= says otherwise" + ("" if probe else "; --probe measures each device"))
  return "\n".join(out)

def roofline_svg(rl: dict[str, Any], width: int = 640, height: int = 400) -> str:
  """An inline SVG of the roofline (log-log): bandwidth slope and compute ceilings, one dot per timed kernel (hover: its numbers)."""
  plot, pad = rl["plot"], (64, 20, 28, 44)  # left, right, top, bottom
  roofs, bw, pts = plot["roofs"], plot["bw"], plot["points"]
  xs = [p["x"] for p in pts] + [r["ridge"] for r in roofs if r["ridge"]]
  ys = [p["y"] for p in pts] + [r["flops_per_s"] for r in roofs]
  if not xs or not ys: xs, ys = [0.1, 100.0], [1e9, 1e12]
  x0, x1 = 10 ** math.floor(math.log10(min(xs)) - 0.5), 10 ** math.ceil(math.log10(max(xs)) + 0.5)
  y0, y1 = 10 ** math.floor(math.log10(min(ys)) - 0.5), 10 ** math.ceil(math.log10(max(ys)) + 0.3)
  def frac(v: float, lo: float, hi: float) -> float: return (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
  def sx(x: float) -> float: return pad[0] + (width - pad[0] - pad[1]) * frac(x, x0, x1)
  def sy(y: float) -> float: return height - pad[3] - (height - pad[2] - pad[3]) * frac(y, y0, y1)
  e, title = html.escape, f"roofline of {rl['name'] or rl['device']}"
  out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" '
         f'font-size="11" role="img" aria-label="{e(title)}">',
         f'<rect x="{pad[0]}" y="{pad[2]}" width="{width-pad[0]-pad[1]}" height="{height-pad[2]-pad[3]}" fill="none" stroke="#999"/>']
  for i in range(round(math.log10(x0)), round(math.log10(x1)) + 1):
    out.append(f'<line x1="{sx(10**i):.1f}" y1="{pad[2]}" x2="{sx(10**i):.1f}" y2="{height-pad[3]}" stroke="#eee"/>'
               f'<text x="{sx(10**i):.1f}" y="{height-pad[3]+14}" text-anchor="middle">{10.0**i:g}</text>')
  for i in range(round(math.log10(y0)), round(math.log10(y1)) + 1):
    out.append(f'<line x1="{pad[0]}" y1="{sy(10**i):.1f}" x2="{width-pad[1]}" y2="{sy(10**i):.1f}" stroke="#eee"/>'
               f'<text x="{pad[0]-4}" y="{sy(10**i)+4:.1f}" text-anchor="end">{10.0**i/1e9:g}</text>')
  mid = (pad[2] + height - pad[3]) // 2
  out.append(f'<text x="{(pad[0]+width-pad[1])/2:.0f}" y="{height-6}" text-anchor="middle">arithmetic intensity (FLOP/byte)</text>'
             f'<text x="14" y="{mid}" text-anchor="middle" transform="rotate(-90 14 {mid})">GFLOP/s</text>')
  for r in roofs:
    if not bw: break
    start, peak = max(x0, y0 / bw), r["flops_per_s"]  # the slope enters the plot at its bottom or left edge; the ridge is inside it
    out.append(f'<polyline fill="none" stroke="#c33" stroke-width="2" points="{sx(start):.1f},{sy(bw*start):.1f} {sx(r["ridge"]):.1f},'
               f'{sy(peak):.1f} {sx(x1):.1f},{sy(peak):.1f}"><title>{e(r["label"])}</title></polyline>'
               f'<text x="{width-pad[1]-4}" y="{sy(peak)-4:.1f}" text-anchor="end" fill="#c33">{e(r["label"])} {rate(peak, "FLOP/s")}</text>')
  if bw: out.append(f'<text x="{pad[0]+6}" y="{pad[2]+14}" fill="#c33">memory {rate(bw, "B/s")}</text>')
  for p in pts:
    tip = f'{p["kernel"]} ({p["role"]}): {p["x"]:.3g} FLOP/B, {p["y"]/1e9:.4g} GFLOP/s, {p["bound"] or "?"} bound'
    out.append(f'<circle cx="{sx(p["x"]):.1f}" cy="{sy(p["y"]):.1f}" r="5" fill="#36c" fill-opacity="0.8"><title>{e(tip)}</title></circle>'
               f'<text x="{sx(p["x"])+7:.1f}" y="{sy(p["y"])+4:.1f}">{p["index"]}</text>')
  if not pts: out.append(f'<text x="{width/2:.0f}" y="{height/2:.0f}" text-anchor="middle" fill="#777">no timed kernels</text>')
  return "\n".join(out + ["</svg>"])
