"""What the server and the workers agree on: queue names, the job functions a worker may run, the heartbeat key of a live worker,
how bytes travel in JSON, how a result is signed, and what a result must be before the server keeps it. Imports neither rq nor
tinygrad."""
from __future__ import annotations
import base64
import binascii
import hashlib
import hmac
import json
import urllib.parse
from typing import Any
from explorer.blob import BlobRefused, check_locations, read_plain
from explorer.schema import TraceRecord, validate_trace
from explorer.spec import SpecError
from explorer.targets import TARGETS

ANY = "any"  # the queue of jobs that name no device: every worker takes them, on its default device
PREFIX = "explorer"

def queue_name(device: str | None) -> str:
  """The queue of a device's jobs, by the device's name: CUDA:1 goes where CUDA workers listen."""
  return f"{PREFIX}:{device.split(':')[0] if device else ANY}"

def device_of(queue: str) -> str | None:
  """The device a queue's jobs need (None: any); None too for a queue that is not the explorer's."""
  prefix, _, device = queue.partition(":")
  return device if prefix == PREFIX and device and device != ANY else None

# the only functions a worker runs (explorer.queue.worker refuses any other job it is handed)
JOBS = {"trace": "explorer.queue.jobs.trace", "study": "explorer.queue.jobs.study", "measure": "explorer.queue.jobs.measure"}

BEAT_S = 3.0      # a worker process refreshes its heartbeat key this often, idle or busy...
BEAT_TTL_S = 12   # ...and the key expires this long after the last refresh: a worker that died is noticed within seconds

def beat_key(worker_name: str) -> str: return f"{PREFIX}:alive:{worker_name}"

class QueueUnavailable(RuntimeError):
  """The broker does not answer (or the [queue] extra, rq and redis, is not installed)."""

class QueueJobFailed(RuntimeError):
  """The job failed on its worker, or its workers died: the message says which."""

NEEDS_EXTRA = "the job queue needs the [queue] extra (rq and redis): pip install 'kernel-explorer[queue]'"

RESULT_TTL_S = 7 * 24 * 3600  # finished and failed jobs stay readable this long: a server that restarts finds them

def b64(data: bytes) -> str: return base64.b64encode(data).decode()

def unb64(text: str) -> bytes: return base64.b64decode(text.encode())

# ***** results: a worker's answer is data from outside the server, checked before anything keeps it *****

class ResultRefused(QueueJobFailed):
  """A worker's result that is not what the job asked for (unsigned, malformed, another computation): nothing of it is kept."""

def seal(result: dict[str, Any], secret: str | None) -> dict[str, Any]:
  """A job's return value: as it is, or with a queue secret, its JSON text and that text's HMAC-SHA256 (the server refuses a result
  whose signature does not match: a worker without the secret, or a forged result written into the broker)."""
  if not secret: return result
  body = json.dumps(result)
  return {"body": body, "hmac": hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()}

def unseal(returned: Any, secret: str | None) -> Any:
  """A job's return value as the worker computed it; ResultRefused when the server has a secret and the signature does not match."""
  if not secret: return returned
  if not (isinstance(returned, dict) and set(returned) == {"body", "hmac"} and all(isinstance(v, str) for v in returned.values())):
    raise ResultRefused("the worker's result is not signed with the queue secret (KERNEL_EXPLORER_QUEUE_SECRET): refused, nothing kept")
  expected = hmac.new(secret.encode(), returned["body"].encode(), hashlib.sha256).hexdigest()
  if not hmac.compare_digest(expected, returned["hmac"]):
    raise ResultRefused("the worker's result is signed with another secret than this server's (KERNEL_EXPLORER_QUEUE_SECRET): refused, nothing kept")
  return json.loads(returned["body"])

def blob_of(text: Any, what: str, max_bytes: int) -> bytes:
  """A rewrite blob sent as base64: at most max_bytes, and the explorer's data format (never a pickle: explorer.tracing.tg)."""
  if not isinstance(text, str) or len(text) > (max_bytes // 3 + 1) * 4:
    raise ResultRefused(f"{what} is not base64 text of at most {max_bytes >> 20} MiB")
  try: data = base64.b64decode(text.encode(), validate=True)
  except (binascii.Error, ValueError): raise ResultRefused(f"{what} is not base64") from None
  try: body = read_plain(data)  # plain data, or refused: a blob kept here never holds an object to build
  except BlobRefused as e: raise ResultRefused(f"{what} is not a rewrite log in the explorer's data format ({e}): refused, nothing kept") from None
  if not isinstance(body, dict) or "fields" not in body: raise ResultRefused(f"{what} is not a rewrite log: refused, nothing kept")
  try: check_locations(body)  # rule locations are data: one naming /proc/self/environ would have a page show it
  except BlobRefused as e: raise ResultRefused(f"{what}: {e}: refused, nothing kept") from None
  return data

MAX_TEXT = 1 << 20  # the longest string a study table or a measurement may hold (a case's label, a verdict, a note)
MAX_DEPTH = 32

def plain_json(value: Any, what: str, depth: int = 0) -> Any:
  """value, when it is plain JSON (objects with string keys, arrays, strings of at most MAX_TEXT, numbers, booleans, null) at most
  MAX_DEPTH deep; else ResultRefused. The pages that show it escape what they show; this keeps what they read to what JSON holds."""
  if depth > MAX_DEPTH: raise ResultRefused(f"{what} nests deeper than {MAX_DEPTH}: refused, nothing kept")
  if value is None or isinstance(value, (bool, int, float)): return value
  if isinstance(value, str):
    if len(value) > MAX_TEXT: raise ResultRefused(f"{what} holds a string over {MAX_TEXT} characters: refused, nothing kept")
    return value
  if isinstance(value, list): return [plain_json(v, what, depth + 1) for v in value]
  if isinstance(value, dict) and all(isinstance(k, str) and len(k) <= 256 for k in value):
    return {k: plain_json(v, what, depth + 1) for k, v in value.items()}
  raise ResultRefused(f"{what} holds a {type(value).__name__}, which is not JSON: refused, nothing kept")

def trace_result(out: Any, max_bytes: int) -> tuple[TraceRecord, bytes, dict[str, bytes]]:
  """A trace job's result (trace, host blob, target blobs) checked as a request is: the trace against its schema, the blobs as data."""
  if not isinstance(out, dict) or set(out) != {"trace", "rewrites", "target_rewrites"}:
    raise ResultRefused("the worker's result is not a trace job's result (trace, rewrites, target_rewrites): refused, nothing kept")
  try: trace = validate_trace(out["trace"], "the worker's trace")
  except SpecError as e: raise ResultRefused(f"{e}: refused, nothing kept") from None
  targets = out["target_rewrites"]
  if not isinstance(targets, dict) or not set(targets) <= set(TARGETS): raise ResultRefused("the worker's target rewrite blobs name unknown targets")
  return trace, blob_of(out["rewrites"], "the worker's rewrite blob", max_bytes), \
    {t: blob_of(b, f"the worker's {t} rewrite blob", max_bytes) for t, b in targets.items()}

def safe_url(url: str) -> str:
  """The URL without its password, for messages and logs."""
  parts = urllib.parse.urlsplit(url)
  if parts.password is None: return url
  host = parts.hostname or ""
  netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
  return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
