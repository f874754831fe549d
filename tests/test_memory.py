"""Memory over the schedule: buffers alive from writer to last reader, the peak, and what fusing saved, staged against fused Winograd,
from real traces; shown on the kernel-graph page and side by side in the diff."""
from __future__ import annotations
from fastapi.testclient import TestClient
from stored_traces import stored_pair
from support import app_over
from explorer.analysis import memory
from explorer.store import Store

def _by_hand(trace: dict) -> tuple[int, int]:
  """Peak and the step it is at, counted plainly: at each call, every buffer already written (or the program's own) and still read."""
  best = (-1, -1)
  for s in trace["schedule"]:
    i = s["index"]
    live = sum(b["nbytes"] for b in trace["buffers"] if b["role"] in ("input", "weight", "output")
               or (min(b["written_by"], default=0) <= i <= max(b["read_by"] + b["written_by"], default=i)))
    best = max(best, (live, -i))
  return best[0], -best[1]

def test_staged_against_fused():
  db, staged, fused = stored_pair()
  a, b = Store(db).get_trace(staged), Store(db).get_trace(fused)
  ta, tb = memory.over_schedule(a), memory.over_schedule(b)
  for t, m in ((a, ta), (b, tb)):
    assert (m["peak_bytes"], m["peak_step"]) == _by_hand(t)
    assert len(m["steps"]) == len(t["schedule"]) and {x["index"] for x in m["buffers"]} == {b_["index"] for b_ in t["buffers"]}
    mhat = [x for x in m["buffers"] if x["role"] == "intermediate"]
    assert all(x["start"] <= x["end"] for x in mhat)
  # fused: the MHAT buffer is gone, so fewer intermediate bytes; the comparison says by how much
  assert tb["intermediate_bytes"] < ta["intermediate_bytes"]
  c = memory.compare(a, b)
  assert c["intermediate_saved"] == ta["intermediate_bytes"] - tb["intermediate_bytes"] > 0
  assert c["peak_saved"] == ta["peak_bytes"] - tb["peak_bytes"]

def test_pages_show_the_timeline():
  db, staged, fused = stored_pair()
  with TestClient(app_over(str(db))) as client:
    page = client.get(f"/t/{staged}/bufferize").text
    m = client.get(f"/api/traces/{staged}/bufferize").json()["memory"]
    assert f'data-peak="{m["peak_bytes"]}"' in page and page.count('class="mem-bar') == len(m["buffers"])
    d = client.get(f"/api/diff/{staged}/{fused}?graphs=0").json()
    assert d["memory"]["intermediate_saved"] > 0
    diff = client.get(f"/diff/{staged}/{fused}").text
    assert 'id="memory-diff"' in diff and 'id="memory-a"' in diff and 'id="memory-b"' in diff
