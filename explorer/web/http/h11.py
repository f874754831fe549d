"""uvicorn's h11 protocol with a deadline on every request head. uvicorn holds a connection that has sent nothing (or half a
request head) for as long as the client keeps it open, and such sockets counted against its concurrency limit: 256 idle sockets
locked every client out. Here a connection must send a whole request head within head_timeout_s of opening, or of its last
response plus the keep-alive time, else it is closed. Requests in flight are limited by explorer.web.http.limits, not sockets."""
from __future__ import annotations
import asyncio
from uvicorn.protocols.http.h11_impl import H11Protocol

class HeadTimeoutH11(H11Protocol):
  head_timeout_s = 5.0
  _head_timer: asyncio.TimerHandle | None = None

  def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
    super().connection_made(transport)
    self._arm(self.head_timeout_s)

  def on_response_complete(self) -> None:
    super().on_response_complete()
    if not self.transport.is_closing(): self._arm(self.timeout_keep_alive + self.head_timeout_s)

  def connection_lost(self, exc: Exception | None) -> None:
    self._disarm()
    super().connection_lost(exc)

  def _arm(self, delay_s: float) -> None:
    self._disarm()
    self._head_timer = self.loop.call_later(delay_s, self._head_timed_out)

  def _disarm(self) -> None:
    if self._head_timer is not None: self._head_timer.cancel(); self._head_timer = None

  def _head_timed_out(self) -> None:
    self._head_timer = None
    if self.cycle is not None and not self.cycle.response_complete: return  # a request is being served; its response arms a new deadline
    if not self.transport.is_closing(): self.transport.close()

def protocol_with(head_timeout_s: float) -> type[HeadTimeoutH11]:
  return type("HeadTimeoutH11", (HeadTimeoutH11,), {"head_timeout_s": head_timeout_s})
