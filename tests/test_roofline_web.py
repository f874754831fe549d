"""The roofline page: no peaks until the device is probed (a CPU has no spec-sheet entry), then per-kernel percentages and a plot."""
import time
import pytest

@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

def test_roofline_needs_peaks_then_probe_fills_them(web_client, small_trace, empty_cache):
  page = web_client.get(f"/t/{small_trace}/roofline")
  assert page.status_code == 200 and "no probe measured on this host yet" in page.text and "Measure this device" in page.text
  assert web_client.get(f"/api/traces/{small_trace}/roofline").status_code == 409
  url = f"/api/traces/{small_trace}/roofline/probe"
  assert web_client.get(url).json()["status"] == "none"  # no probe of CPU yet
  t0 = time.monotonic()
  r = web_client.post(url)
  assert r.status_code == 202 and time.monotonic() - t0 < 5, r.text  # a job: it answers at once
  probe = r.json()
  assert probe["status"] in ("queued", "running") and probe["device"] == "CPU" and probe["url"] == url, probe
  again = web_client.post(url).json()  # one probe per device at a time: a second request shares it
  assert again["id"] == probe["id"], again
  details = set()
  while probe["status"] in ("queued", "running") and time.monotonic() - t0 < 300:
    time.sleep(0.2)
    probe = web_client.get(url).json()
    details.add(probe["detail"])
  assert probe["status"] == "done", probe
  assert probe["result"]["fp32"] > 0 and probe["result"]["bw"] > 0 and probe["error"] is None
  assert any("bandwidth" in d for d in details) or any("FP32" in d for d in details), details  # progress from the worker
  rl = web_client.get(f"/api/traces/{small_trace}/roofline").json()
  assert len(rl["kernels"]) == 4 and all(k["pct_compute"] > 0 and k["pct_bandwidth"] > 0 for k in rl["kernels"])
  page = web_client.get(f"/t/{small_trace}/roofline").text
  assert "<svg" in page and "measured on" in page and "r_36_4_16_4_4_3" in page
