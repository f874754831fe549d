"""The SASS page in a real browser (Debian's chromium): opened before anything it needs is computed, it follows the work and puts the
listing in place; a UOp, a source line or an instruction clicked lights up exactly what the line map and the line table tie to it."""
from __future__ import annotations
import httpx
import pytest
from conftest import needs_chromium, shared_trace_on
from test_sass import MISSING, WINO

pytestmark = [pytest.mark.browser, needs_chromium, pytest.mark.skipif(bool(MISSING), reason=f"no {', '.join(MISSING)} here")]

def lit(page) -> tuple[list[int], list[int]]:
  """(offsets of the lit instructions, lit source lines)."""
  return (sorted(int(x) for x in page.eval_on_selector_all("#sass-listing tr.lit", "rs => rs.map(r => r.dataset.offset)")),
          sorted(int(x) for x in page.eval_on_selector_all("#sass-source tr.lit", "rs => rs.map(r => r.dataset.line)")))

def test_a_uop_a_line_and_an_instruction_light_up_each_other(live_server, page, errors):
  tid = shared_trace_on(live_server, WINO)
  page.goto(f"{live_server}/t/{tid}/k/1/sass")  # its compile facts and line map are computed now, in workers
  assert page.locator("#sass-pending").count() == 1
  page.wait_for_selector("#sass-split", timeout=300_000)
  got = httpx.get(f"{live_server}/api/traces/{tid}/kernels/1/targets/cuda/sass", timeout=60).json()
  assert page.locator("#sass-listing tr[data-offset]").count() == got["count"]
  # a UOp of the heaviest: every instruction whose line the line map gives for it, and those lines
  chip = page.locator("#sass-heaviest [data-uop]").first
  u = int(chip.get_attribute("data-uop"))
  assert (chip.get_attribute("title") or "").startswith(f"UOp #{u}: ")  # what the chip is: the UOp's op and dtype
  line_chip = page.locator("#sass-source td.uops [data-uop]").first
  assert "source line" in (line_chip.get_attribute("title") or "") and " · made " in line_chip.get_attribute("title")
  chip.click()
  want = [i for i in got["instructions"] if u in i["uops"]]
  assert lit(page) == (sorted(i["offset"] for i in want), sorted({i["line"] for i in want}))
  # a source line: its instructions
  line = next(int(n) for n, offs in got["lines"].items() if len(offs) > 1)
  page.locator(f"#sass-source tr[data-line='{line}'] td.src").click()
  assert lit(page) == (sorted(got["lines"][str(line)]), [line])
  # an instruction: its line, and the other instructions of that line
  ins = next(i for i in got["instructions"] if i["line"] is not None and i["line"] != line)
  page.locator(f"#i{ins['offset']} td.ins").click()
  assert lit(page) == (sorted(got["lines"][str(ins["line"])]), [ins["line"]])
  # the peak is marked where the facts put it
  assert page.locator("#sass-listing tr.peak").get_attribute("data-offset") == str(got["peak_offset"])
  assert errors == []
