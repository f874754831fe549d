"""The devices this server offers to requests: the compute devices this host opens, as `kernel-explorer devices` lists them.
Listing opens each device, which imports tinygrad (never in the server process), so it runs once in a worker and is kept."""
from __future__ import annotations
import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING
from explorer.queue.protocol import QueueUnavailable
from explorer.spec import COMPUTE_DEVICES
from explorer.web.services.lifecycle import Busy, run_in_daemon_thread

if TYPE_CHECKING:
  from explorer.queue.client import QueueClient

class DevicesUnavailable(Busy):
  """The worker that lists the devices failed, or the job queue's broker does not answer (503: try again shortly)."""

Listing = list[str] | tuple[list[str], list[dict[str, str]]]  # the devices opened, and where told, those that did not with why

def list_in_worker(timeout_s: float) -> Listing:
  from explorer.analysis.roofline import list_devices  # no tinygrad: the listing runs in a worker
  found = list_devices(timeout_s)
  return [d["device"] for d in found["devices"]], [{"device": u["device"], "reason": u["reason"]} for u in found.get("unopened", [])]

class DeviceCatalog:
  def __init__(self, timeout_s: float = 120.0, lister: Callable[[float], Listing] = list_in_worker):
    self.timeout_s, self.lister = timeout_s, lister
    self._offered: list[str] | None = None
    self.unopened: list[dict[str, str]] = []  # the compute devices that did not open here, with tinygrad's reason
    self._lock: asyncio.Lock | None = None

  async def offered(self) -> list[str]:
    """Listed on first use (concurrent callers share the one listing); a failed listing is not kept, the next call tries again."""
    if self._offered is not None: return self._offered
    if self._lock is None: self._lock = asyncio.Lock()
    async with self._lock:
      if self._offered is None:
        try: found = await run_in_daemon_thread(lambda: self.lister(self.timeout_s))
        except Exception as e: raise DevicesUnavailable(f"could not list this host's devices: {str(e).splitlines()[0] if str(e) else e!r}") from None
        if isinstance(found, tuple): found, self.unopened = found
        self._offered = [d for d in found if d in COMPUTE_DEVICES]
    return self._offered

  async def accepted(self) -> list[str]:
    """The devices a request may name: those this host offers."""
    return await self.offered()

class QueueDevices:
  """The devices of a server whose jobs run on queue workers (settings.queue): offered, those some registered worker offers now;
  accepted, every compute device (a job for a device no worker offers waits in the queue and says so)."""
  def __init__(self, client: QueueClient):
    self.client = client

  async def offered(self) -> list[str]:
    try: return await asyncio.to_thread(self.client.offered)
    except QueueUnavailable as e: raise DevicesUnavailable(str(e)) from None

  async def accepted(self) -> list[str]: return list(COMPUTE_DEVICES)

  unopened: list[dict[str, str]] = []  # each worker lists its own
