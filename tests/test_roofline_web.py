"""The roofline page: no peaks until the device is probed (a CPU has no spec-sheet entry), then per-kernel percentages and a plot."""
import pytest

@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

def test_roofline_needs_peaks_then_probe_fills_them(web_client, small_trace, empty_cache):
  page = web_client.get(f"/t/{small_trace}/roofline")
  assert page.status_code == 200 and "no probe measured on this host yet" in page.text and "Measure this device" in page.text
  assert web_client.get(f"/api/traces/{small_trace}/roofline").status_code == 409
  r = web_client.post(f"/api/traces/{small_trace}/roofline/probe")
  assert r.status_code == 200, r.text
  assert r.json()["measured"]["fp32"] > 0 and r.json()["measured"]["bw"] > 0
  rl = web_client.get(f"/api/traces/{small_trace}/roofline").json()
  assert len(rl["kernels"]) == 4 and all(0 < k["pct_compute"] and 0 < k["pct_bandwidth"] for k in rl["kernels"])
  page = web_client.get(f"/t/{small_trace}/roofline").text
  assert "<svg" in page and "measured on" in page and "r_36_4_16_4_4_3" in page
