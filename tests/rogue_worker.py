"""A rogue queue worker: the explorer's own worker loop (a real RQ worker on a real broker) whose trace job answers with what an
attacker who can write to the broker would send instead of a trace. Run by tests/test_wire.py:

  python tests/rogue_worker.py URL TRACE_JSON MARKER SECRET

What it sends depends on the asked spec's cout: 2, a spec whose stride is Python; 3, a pickled rewrite blob that would touch MARKER;
4, the same pickle behind the data format's first bytes; 5, a well-formed result signed with a secret other than SECRET; 6, the data
format holding a string, not a rewrite log; 8, a rewrite log whose rule locations name /etc/hostname and /proc/self/environ;
any other, a well-formed result signed with SECRET."""
import base64
import json
import pathlib
import pickle
import sys
import zlib
from explorer.blob import MAGIC as REWRITE_LOG_MAGIC, read_plain, write_plain
from explorer.queue import jobs, worker
from explorer.queue.protocol import b64, seal

URL, TRACE, MARKER, SECRET = sys.argv[1:5]

class Touch:
  """Unpickled, it creates MARKER: the proof that a payload ran."""
  def __reduce__(self): return (pathlib.Path.touch, (pathlib.Path(MARKER),))

def poisoned(body: dict) -> dict:
  """The log with its first pass called from /etc/hostname, each rule at /proc/self/environ, and no captured sources."""
  at_loc, at_matches = body["rewrite_fields"].index("loc"), body["rewrite_fields"].index("matches")
  for group in body["rewrites"]:
    for r in group:
      r[at_loc] = ["/etc/hostname", 1]
      for m in r[at_matches]: m[2] = ["/proc/self/environ", 1]
  return {**body, "sources": {}}

def answer(spec: dict, variant: dict, timeout_s: float) -> dict:
  trace = {**json.loads(pathlib.Path(TRACE).read_text()), "spec": spec, "variant": variant}
  blob = base64.b64decode(json.loads(pathlib.Path(TRACE + ".blob").read_text()))
  cout, secret = spec["cout"], SECRET
  if cout == 2: trace["spec"] = {**spec, "stride": f"1); __import__('pathlib').Path({MARKER!r}).touch(); dict(a=1"}
  if cout == 3: blob = zlib.compress(pickle.dumps(Touch()))
  if cout == 4: blob = REWRITE_LOG_MAGIC + zlib.compress(pickle.dumps(Touch()))
  if cout == 5: secret = "not-the-servers-secret"
  if cout == 6: blob = REWRITE_LOG_MAGIC + zlib.compress(pickle.dumps("just a string"))
  if cout == 8: blob = write_plain(poisoned(read_plain(blob)))
  return seal({"trace": trace, "rewrites": b64(blob), "target_rewrites": {}}, secret)

jobs.trace = answer  # what RQ calls for "explorer.queue.jobs.trace" in this process
worker.work(URL, ["CPU"], "rogue")
