"""A trace with a failed stage is partial, never "ok": its status in the store and the API, a banner on every page of it naming the
stage and the error in a line, the terminal's printout first of all, and the CLI's exit status 1 unless asked to accept it (a real
failure: a device tinygrad does not have, at the tensor graph's stage)."""
from __future__ import annotations
import json
import re
import subprocess
import sys
from conftest import REPO
from fastapi.testclient import TestClient
from support import app_over

PAGES = ("", "/bufferize", "/rangeify", "/timeline", "/roofline", "/tour")

def test_a_failed_stage_makes_the_trace_partial_in_the_cli_the_api_and_every_page(tmp_path):
  out = tmp_path / "t.json"
  args = [sys.executable, "-m", "explorer", "trace", "--preset", "small", "--device", "NOSUCHDEVICE", "--no-time", "--quiet", "--json", str(out)]
  p = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=300)
  assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
  assert re.match(r"PARTIAL TRACE: stage tensor_graph failed: .*NOSUCHDEVICE", p.stdout.splitlines()[1], re.I), p.stdout
  accepted = subprocess.run([*args, "--accept-partial"], capture_output=True, text=True, cwd=REPO, timeout=300)
  assert accepted.returncode == 0 and "PARTIAL TRACE" in accepted.stdout, accepted.stderr[-2000:]
  trace = json.loads(out.read_text())
  assert trace["status"] == "partial" and trace["failures"][0]["stage"] == "tensor_graph"
  from explorer.store import Store, key_of
  db = tmp_path / "s.sqlite3"
  Store(db).put_trace(trace_id := key_of(trace), trace, b"")
  assert Store(db).recent()[0]["status"] == "partial"
  with TestClient(app_over(db)) as client:
    assert client.get(f"/api/traces/{trace_id}").json()["status"] == "partial"
    shown = 0
    for page in PAGES:
      if (r := client.get(f"/t/{trace_id}{page}")).status_code != 200: continue
      banner = re.search(r'<div class="alert err partial-banner" id="partial"[^>]*>(.*?)</div>', r.text, re.S)
      assert banner and "stage Tensor graph failed" in banner.group(1) and "NOSUCHDEVICE" in banner.group(1).upper(), (page, r.text[:3000])
      assert "\n" not in re.sub(r"\s*\n\s*", " ", banner.group(1)).strip()  # one line
      shown += 1
    assert shown >= 3
