"""What the server and the workers agree on: queue names, the job functions a worker may run, the heartbeat key of a live worker,
and how bytes travel in JSON. Imports neither rq nor tinygrad."""
from __future__ import annotations
import base64, urllib.parse

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

def safe_url(url: str) -> str:
  """The URL without its password, for messages and logs."""
  parts = urllib.parse.urlsplit(url)
  if parts.password is None: return url
  host = parts.hostname or ""
  netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
  return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
