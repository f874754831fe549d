"""SASS with its source lines and the registers live at each instruction, without a GPU: nvdisasm (NVIDIA's wheel, or PATH) on the
cubin ptxas made with line information.

nvdisasm is run twice on one cubin, as it prints one of the two at a time: `--print-line-info` (the source line of each instruction,
`//## File "k.cu", line 5` before the first of a run) and `--life-range-mode count` (after each instruction, the registers live
there: general (GPR), uniform (UGPR) and predicates, the columns its header names). CUDA C is compiled with `-lineinfo`, which
leaves the code as it is (checked: the same instructions with and without); tinygrad's PTX carries no `.loc`, so each of its
instruction lines is given its own (`with_ptx_lines`), and SASS lines then number the PTX as tinygrad rendered it."""
from __future__ import annotations
import collections
import pathlib
import re
from collections.abc import Callable
from typing import Any

MAX_INSTRUCTIONS = 4000
SPILL_OPCODES = ("LDL", "STL")  # local memory loads and stores: what ptxas' spills become
PTX_FILE = "kernel.ptx"
Sass = dict[str, Any]
Runner = Callable[[list[str]], tuple[int, str, str]]

# ***** PTX: a .loc per instruction line, so that ptxas records which line each SASS instruction came from *****

_NOT_INSTRUCTIONS = ("//", ".reg", ".shared", ".local", ".param", ".loc", ".file", ".pragma", "{", "}", ")")

def with_ptx_lines(ptx: str) -> str:
  """The PTX with `.file 1 "kernel.ptx"` after its header and `.loc 1 N 0` before each instruction line N of a function body (N: the
  line in the PTX given, so lines count as the record shows them). PTX that already has .loc directives is left as it is."""
  if re.search(r"^\s*\.loc\s", ptx, re.M): return ptx
  out, body = [], 0
  for n, line in enumerate(ptx.split("\n"), 1):
    s = line.strip()
    if body and s and not s.startswith(_NOT_INSTRUCTIONS) and not s.endswith(":"): out.append(f"\t.loc 1 {n} 0")
    out.append(line)
    if s.startswith(".address_size"): out.append(f'.file 1 "{PTX_FILE}"')
    body += s.count("{") - s.count("}")
  return "\n".join(out)

# ***** nvdisasm's two listings *****

_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;(.*)$")
_LINE_INFO = re.compile(r'File "([^"]*)", line (\d+)')

def parse_lines(listing: str, source_name: str) -> tuple[list[dict[str, Any]], bool]:
  """The first function's instructions [{offset, text, line}] of `nvdisasm --print-line-info` (line absent where none is recorded),
  and whether any had a line. An instruction's line is the last one named before it in source_name (a line of an inlined header
  names its call site there)."""
  out: list[dict[str, Any]] = []
  line: int | None = None
  seen_any, started = False, False
  for raw in listing.splitlines():
    if raw.lstrip().startswith("//##"):
      ours = [int(n) for f, n in _LINE_INFO.findall(raw) if pathlib.PurePath(f).name == source_name]
      line = ours[0] if ours else None
      seen_any |= line is not None
      continue
    if (m := _INSTRUCTION.match(raw)) is None:
      if started and raw.startswith("//----"): break  # the next section
      continue
    started = True
    out.append({"offset": int(m.group(1), 16), "text": " ".join(m.group(2).split()), **({"line": line} if line is not None else {})})
  return out, seen_any

def parse_lives(listing: str) -> dict[int, dict[str, int]]:
  """Per instruction offset, the registers live there by kind ({"GPR": 12, "UGPR": 2, ...}) from `nvdisasm --life-range-mode count`."""
  kinds: list[str] = []
  out: dict[int, dict[str, int]] = {}
  for raw in listing.splitlines():
    if not kinds and "| GPR" in raw:
      kinds = [c.strip() for c in raw.split("//", 1)[1].strip().strip("|").split("|")]
      continue
    if (m := _INSTRUCTION.match(raw)) is None or not kinds: continue
    cells = [c.strip() for c in m.group(3).replace("//", "", 1).strip().strip("|").split("|")]
    out[int(m.group(1), 16)] = {k: int(c) if c.isdigit() else 0 for k, c in zip(kinds, cells, strict=False)}
  return out

_REGISTER = re.compile(r"\bR(\d+)\b")  # a general register named by an instruction (RZ, the zero register, is none)

def opcode(text: str) -> str:
  """The instruction's opcode without its predicate guard ("@!P0 BRA ..." -> "BRA")."""
  words = text.split()
  return words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")

def family(op: str) -> str: return op.split(".", 1)[0]

def summarize(instructions: list[dict[str, Any]], lines: bool, tool: str, source: str, registers: int | None) -> Sass:
  """The facts of a listing: its instructions (at most MAX_INSTRUCTIONS kept), the mix by opcode family, the live-register peak and
  where it is, the highest register named (ptxas allocates up to it, plus two it reserves: allocation, not what is live), the spill
  instructions (local loads and stores)."""
  mix = collections.Counter(family(ins["op"]) for ins in instructions)
  peak = max((ins for ins in instructions if "live" in ins), key=lambda ins: ins["live"], default=None)
  named = [int(r) for ins in instructions for r in _REGISTER.findall(ins["text"])]
  return {"tool": tool, "lines_of": source if lines else None, "count": len(instructions), "registers": registers,
          "highest_register": max(named, default=None),
          "peak_live": peak["live"] if peak else None, "peak_offset": peak["offset"] if peak else None,
          "peak_line": peak.get("line") if peak else None, "spills": sum(family(i["op"]) in SPILL_OPCODES for i in instructions),
          "mix": dict(sorted(mix.items(), key=lambda kv: (-kv[1], kv[0]))), "instructions": instructions[:MAX_INSTRUCTIONS],
          "left_out": max(0, len(instructions) - MAX_INSTRUCTIONS)}

class SassUnavailable(Exception): pass

def _listing(run: Runner, cmd: list[str]) -> str:
  rc, out, err = run(cmd)
  if rc != 0: raise SassUnavailable(f"nvdisasm failed: {((err or out).strip().splitlines() or ['no message'])[-1]}")
  return out

def disassemble(nvdisasm: str, tool: str, cubin: pathlib.Path, source_name: str, source: str, registers: int | None, run: Runner) -> Sass:
  """The cubin's SASS with lines (numbering `source`, "cuda" or "ptx", the file named source_name) and live registers; tool: how the
  facts name nvdisasm. SassUnavailable with nvdisasm's message when it fails."""
  by_line = _listing(run, [nvdisasm, "--print-code", "--print-line-info", str(cubin)])
  by_life = _listing(run, [nvdisasm, "--print-code", "--life-range-mode", "count", str(cubin)])
  instructions, lines = parse_lines(by_line, source_name)
  lives = parse_lives(by_life)
  for ins in instructions:  # the padding after the last branch is never run: nvdisasm gives it no live registers, and it has none here
    ins["op"] = opcode(ins["text"])
    if (live := lives.get(ins["offset"])) is not None: ins.update(live=live.get("GPR", 0), ulive=live.get("UGPR", 0))
  return summarize(instructions, lines, tool, source, registers)
