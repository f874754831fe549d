"""The event loop's watch (explorer.web.http.loopwatch, settings.loop_watch): a step that computes on the loop is reported with its CPU
time and where its handler stood; a step that only waits (a sleep, as a wait for the interpreter lock is) is not counted as holding it."""
from __future__ import annotations
import asyncio
import time
from fastapi.testclient import TestClient
from support import app_over

TOKEN = "loop-watch-token-0123456789"

def spin(seconds: float) -> None:
  end = time.thread_time() + seconds
  while time.thread_time() < end: pass

async def holds_the_loop() -> None:
  spin(0.08)  # computed on the loop: 80 ms held
  await asyncio.sleep(0)

async def waits_on_the_loop() -> None:
  time.sleep(0.12)  # blocks the loop, but on no CPU: the wall clock sees it, the CPU clock does not
  await asyncio.sleep(0)

def test_a_step_computing_on_the_loop_is_reported_and_a_wait_is_told_apart(tmp_path):
  with TestClient(app_over(tmp_path / "t.sqlite3", loop_watch=True, token=TOKEN), headers={"X-Access-Token": TOKEN}) as client:
    since = time.monotonic()
    client.portal.call(holds_the_loop)
    client.portal.call(waits_on_the_loop)
    loop = client.get("/api/health", params={"held_since": since}).json()["loop"]
    assert loop["steps"] > 0 and loop["over_ms"] == 50 and loop["over"] >= 1
    worst = loop["longest"][0]
    assert 75 <= worst["cpu_ms"] <= worst["wall_ms"] and worst["at"] >= since and "holds_the_loop" in worst["what"], worst
    waited = [s for s in loop["longest"] if "waits_on_the_loop" in s["what"]]
    assert all(s["cpu_ms"] < 50 for s in waited) and any(s["wall_ms"] >= 115 for s in waited), loop["longest"]
    later = client.get("/api/health", params={"held_since": time.monotonic()}).json()["loop"]
    assert all(s["at"] >= worst["at"] + 0.05 for s in later["longest"]) and later["over"] == 0  # only steps since then
    for _ in range(20): client.portal.call(holds_the_loop)  # more long steps than a report lists: a later window still sees its own
    since = time.monotonic()
    client.portal.call(waits_on_the_loop)
    client.portal.call(holds_the_loop)
    window = client.get("/api/health", params={"held_since": since}).json()["loop"]
    assert window["over"] == 1 and "holds_the_loop" in window["longest"][0]["what"] and window["longest"][0]["at"] >= since
    assert "loop" not in client.get("/api/health", headers={"X-Access-Token": ""}).json()  # it names code: to those trusted with it only
  import asyncio.events
  from explorer.web.http.loopwatch import LoopWatch
  assert LoopWatch.active is None and asyncio.events.Handle._run.__name__ == "_run"  # uninstalled when the app stopped

def test_health_without_the_watch_says_nothing_of_the_loop(tmp_path):
  with TestClient(app_over(tmp_path / "t.sqlite3")) as client: assert "loop" not in client.get("/api/health").json()
