"""A hand schedule's default is the kernel as tinygrad made it: a kernel's own opts, replayed through apply_opts, apply to every kernel
(issue #43: tinygrad's pre-opt passes merge and split ranges, and the opts' axes number the AST apply_opts gets, not the scheduled
kernel's; the small builtin Winograd's kernels 2 and 3 were refused), and the result carries the kernel's axes as apply_opt numbers them."""
from __future__ import annotations
import math
from conftest import scheduled

def _size(axes: list[dict], *kinds: str) -> int: return math.prod(a["size"] for a in axes if a["kind"] in kinds)

def test_the_default_schedule_is_every_kernel_as_tinygrad_made_it_on_the_host_and_cuda(web_client, small_trace):
  """About 60 s of CPU here: each of the four kernels scheduled by hand on the host and on CUDA (eight schedules, each tinygrad's
  codegen in a worker, the host's also run and timed beside the original): every kernel, because the bug was in two of them."""
  trace = web_client.get(f"/api/traces/{small_trace}/raw").json()
  assert len(trace["kernels"]) == 4
  for k in trace["kernels"]:
    for target in dict.fromkeys((k["host_target"], "cuda")):
      own = k["targets"][target]
      body = {} if target == k["host_target"] else {"target": target}  # the API's default: the kernel's own opts on its own target
      r = scheduled(web_client, small_trace, k["index"], body)
      assert r.status_code == 200, (k["index"], target, own["opts"], r.text)
      got = r.json()
      assert got["opts"] == got["record"]["opts"] == own["opts"] and got["record"]["source"] == own["source"], (k["index"], target)
      before, after, rec = got["axes"], got["axes_after"], got["record"]
      assert [a["axis"] for a in before] == list(range(len(before))) and before and after
      assert _size(before, *{a["kind"] for a in before}) == _size(after, *{a["kind"] for a in after})  # opts split axes, none pads here
      if target == "cuda":  # the axes after the opts are the launch: global ones the grid, local ones the block
        assert {a["kind"] for a in before} <= {"global", "reduce"}
        assert _size(after, "global") == math.prod(rec["global_size"]) and _size(after, "local") == math.prod(rec["local_size"] or [1])
      else: assert _size(after, "thread") == math.prod(rec["global_size"]) and {a["kind"] for a in before} <= {"loop", "reduce"}
      for a in before:  # UNROLL counts the unrollable axes, GROUP the reduce ones
        assert (a["unroll"] is not None) == (a["kind"] == "reduce" and a["size"] > 1) and (a["group"] is not None) == (a["kind"] == "reduce")
      if target == k["host_target"]: assert got["check"]["same"] and got["timing"]["b_median_s"] > 0  # it runs, as the original

def test_the_first_opt_numbers_the_axes_of_the_table(web_client, small_trace):
  """An opt on an axis the table shows applies as the table says: a full UPCAST of the table's smallest loop axis removes it."""
  got = scheduled(web_client, small_trace, 3, {"opts": [], "from": "none"}).json()
  axis = min((a for a in got["axes"] if a["size"] <= 16 and a["kind"] == "loop"), key=lambda a: a["size"])
  r = scheduled(web_client, small_trace, 3, {"opts": [f"UPCAST:{axis['axis']}:0"], "from": "none"})
  assert r.status_code == 200, r.text
  after = r.json()["axes_after"]
  assert len(after) == len(got["axes"]) and [a for a in after if a["kind"] == "upcast"] == [{**axis, "kind": "upcast", "axis": len(after) - 1}]

def test_a_stored_schedule_without_axes_still_reads(web_client, small_trace):
  """A schedule an older version stored has no axes: the API answers it (axes null) and the panel shows it without the table."""
  host = web_client.get(f"/api/traces/{small_trace}/raw").json()["kernels"][0]["host_target"]
  got = scheduled(web_client, small_trace, 0, {"opts": [], "from": "none"}).json()
  old = {k: v for k, v in got.items() if k not in ("axes", "axes_after")}
  web_client.app.state.services.store.put_enrichments(small_trace, "opts:none:UPCAST:0:0", {(0, host): {**old, "opts": ["UPCAST:0:0"]}})
  r = web_client.get(f"/api/traces/{small_trace}/kernels/0/opts", params={"opts": "UPCAST:0:0", "from": "none"})
  assert r.status_code == 200 and r.json()["axes"] is None, r.text
  frag = web_client.get(f"/t/{small_trace}/k/0/opts", params={"opts": "UPCAST:0:0", "from": "none"})
  assert frag.status_code == 200 and 'id="opts-result"' in frag.text and "data-opts-axes" not in frag.text
