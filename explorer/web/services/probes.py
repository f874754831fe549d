"""Roofline probes: one run per device at a time of explorer.tracing.pipeline.probe.measure (bandwidth and FP32, in a worker), its progress
and then its peaks (cached for every trace of the device by explorer.analysis.roofline)."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any
from explorer.analysis import roofline as rf
from explorer.schema import TraceRecord
from explorer.stages import Progress
from explorer.tracing.workers.process import GATED_STAGE  # no tinygrad: the pool and the workers' supervision
from explorer.web.services.lifecycle import ACTIVE, QUEUED, RUNNING, Task, Tasks
from explorer.web.urls import probe_url

@dataclass
class ProbeTask(Task):
  device: str = ""

  def note(self, stage: str, status: str, detail: str) -> None:
    """GATED_STAGE: waiting for the device's lock (another measurement holds it), so still queued."""
    if self.status in ACTIVE: self.status, self.detail = QUEUED if stage == GATED_STAGE else RUNNING, detail or f"{stage} {status}"

  def view(self, trace_id: str) -> dict[str, Any]:
    """The probe as GET .../roofline/probe shows it (explorer.web.http.models.ProbeStatus)."""
    return {**self.snapshot(), "device": self.device, "url": probe_url(trace_id), "result": self.result}

class Probes:
  """The latest probe of each device, this server's."""
  def __init__(self, timeout_s: float):
    self.timeout_s = timeout_s
    self.tasks: Tasks[ProbeTask] = Tasks()

  def latest(self, device: str) -> ProbeTask | None: return self.tasks.get(device)

  def start(self, trace: TraceRecord) -> ProbeTask:
    """The device's running probe, or a new one (call from the event loop)."""
    def work(probe: ProbeTask, progress: Progress) -> Any: return rf.probe_for_trace(trace, self.timeout_s, progress)
    device = trace["env"]["device"]
    return self.tasks.start(device, ProbeTask(device=device, detail="starting a worker"), work)

  def none(self, trace_id: str, device: str) -> dict[str, Any]:
    return {"id": None, "device": device, "status": "none", "detail": f"no probe of {device} has run on this server: POST starts one",
            "url": probe_url(trace_id), "result": None, "error": None, "elapsed_s": 0.0}

  def cancel_all(self) -> None: self.tasks.cancel_all()
