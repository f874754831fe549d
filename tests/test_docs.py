"""Docs that run (#56). README.md stays short; every ```python block of README.md and docs/ runs as pasted, each in a fresh
`python` process of its own (cwd a temporary directory, the store there too); every `kernel-explorer ...` line of a shell block
names a subcommand that exists (`kernel-explorer SUB --help`) and parses with the CLI's own parser (nothing runs); relative links
resolve and every page is in mkdocs.yml's nav. A block that cannot run here says why on the line before its fence,
`<!-- skip: the reason -->`, and is reported skipped with that reason; `<!-- continue -->` there joins a block to the one before it
(one script). The training step's capture (once tests/test_readme.py) must also print what its comments say."""
from __future__ import annotations
import functools
import pathlib
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
import pytest
from conftest import REPO
from support import settings_free_env

README = REPO / "README.md"
PAGES = (README, *sorted((REPO / "docs").rglob("*.md")))
MAX_README_LINES = 250
BLOCK_TIMEOUT_S = 180  # each block is meant to take seconds: the slowest, the training step's capture, about 11 s of CPU here
FENCE = re.compile(r"^(```+)\s*([\w+-]*)\s*$")
MARK = re.compile(r"^<!--\s*(skip|continue)\b\s*:?\s*(.*?)\s*-->$")
SHELLS = ("sh", "bash", "console", "shell")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")

@dataclass(frozen=True)
class Block:
  path: pathlib.Path
  line: int        # the opening fence's line, 1-based
  lang: str
  code: str
  mark: str | None  # "skip", "continue" or None
  reason: str

  @property
  def where(self) -> str: return f"{self.path.relative_to(REPO)}:{self.line}"

def blocks(path: pathlib.Path) -> list[Block]:
  """Every fenced block of a Markdown file, with the mark on the line before its fence."""
  lines, out, i = path.read_text().splitlines(), [], 0
  while i < len(lines):
    if not (m := FENCE.match(lines[i])):
      i += 1
      continue
    fence, lang = m.groups()
    end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), len(lines))
    mark = MARK.match(lines[i - 1].strip()) if i else None
    out.append(Block(path, i + 1, lang.lower(), "\n".join(lines[i + 1:end]) + "\n", mark.group(1) if mark else None, mark.group(2) if mark else ""))
    i = end + 1
  return out

def python_scripts() -> list[list[Block]]:
  """Each script: a python block and the `<!-- continue -->` blocks after it."""
  scripts: list[list[Block]] = []
  for path in PAGES:
    for b in blocks(path):
      if b.lang != "python": continue
      if b.mark == "continue":
        assert scripts and scripts[-1][0].path == path, f"{b.where}: <!-- continue --> with no python block before it in this file"
        scripts[-1].append(b)
      else: scripts.append([b])
  return scripts

def command_lines() -> list[tuple[str, str]]:
  """(where, line) for every `kernel-explorer ...` line of a shell block, backslash continuations joined, a `$ ` prompt dropped."""
  out = []
  for path in PAGES:
    for b in blocks(path):
      if b.lang not in SHELLS: continue
      lines, pending, start = b.code.splitlines(), "", 0
      for n, raw in enumerate(lines):
        if not pending: start = n
        text = raw.rstrip()
        if text.endswith("\\"):
          pending += text[:-1] + " "
          continue
        logical, pending = (pending + text).strip().removeprefix("$ "), ""
        if logical.startswith("kernel-explorer "): out.append((f"{b.path.relative_to(REPO)}:{b.line + 1 + start}", logical))
  return out

# what a block must print besides exiting 0, keyed by a line of its code
EXPECTED: dict[str, Callable[[str], bool]] = {
  'capture(name="one training step", time=True)': lambda out: ("conv2d bw <- script.py:6" in out and "'backward': True" in out
                                                               and "script.py" in out.splitlines()[-1]),
  'capture(name="relu of a sum")': lambda out: "<- script.py:6" in out,
}

def test_the_readme_is_short():
  n = len(README.read_text().splitlines())
  assert n <= MAX_README_LINES, f"README.md has {n} lines, more than {MAX_README_LINES}: move a section into docs/"

def test_every_mark_says_why():
  for path in PAGES:
    for b in blocks(path):
      assert b.mark != "skip" or b.reason, f"{b.where}: <!-- skip --> without a reason (<!-- skip: why it cannot run here -->)"

@pytest.mark.parametrize("script", python_scripts(), ids=lambda s: s[0].where)
def test_python_block_runs(script: list[Block], tmp_path):
  first = script[0]
  if first.mark == "skip": pytest.skip(f"{first.where}: {first.reason}")
  code = "".join(b.code for b in script)
  (tmp_path / "script.py").write_text(code)
  env = {**settings_free_env(), "XDG_DATA_HOME": str(tmp_path / "data"),
         "KERNEL_EXPLORER_DB": str(tmp_path / "data" / "traces.sqlite3")}
  r = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S, env=env)
  assert r.returncode == 0, f"{first.where} failed (exit {r.returncode}):\n{r.stderr[-3000:]}"
  for key, check in EXPECTED.items():
    if key in code: assert check(r.stdout), f"{first.where} ran but did not print what it says it prints:\n{r.stdout[-3000:]}"

def test_the_expected_outputs_name_blocks_that_exist():
  code = "".join(b.code for s in python_scripts() for b in s)
  assert not [k for k in EXPECTED if k not in code], "EXPECTED names a block the docs no longer hold"

@functools.cache
def parser():
  from explorer.cli.main import build_parser
  return build_parser(settings_flags=True)  # serve's flag per setting too; building it runs nothing

def subcommands() -> list[str]: return sorted({shlex.split(line, comments=True)[1] for _, line in command_lines()})

@pytest.mark.parametrize("sub", subcommands())
def test_subcommand_exists(sub: str):
  exe = pathlib.Path(sys.executable).with_name("kernel-explorer")
  cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "explorer"]
  r = subprocess.run([*cmd, sub, "--help"], capture_output=True, text=True, timeout=60)
  assert r.returncode == 0 and f"kernel-explorer {sub}" in r.stdout, f"`kernel-explorer {sub} --help` failed: {r.stderr[-2000:]}"

@pytest.mark.parametrize("where,line", command_lines(), ids=[w for w, _ in command_lines()])
def test_command_line_parses(where: str, line: str):
  from explorer.cli.main import UsageError
  try: parser().parse_args(shlex.split(line, comments=True)[1:])
  except (UsageError, SystemExit) as e: pytest.fail(f"{where}: `{line}` does not parse: {e}")

def test_relative_links_resolve():
  broken = []
  for path in PAGES:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # links in code are not links
    for target in LINK.findall(text):
      if re.match(r"[a-z]+:", target) or target.startswith("#"): continue
      if not (path.parent / target.split("#")[0]).exists(): broken.append(f"{path.relative_to(REPO)}: {target}")
  assert not broken, f"links to nothing: {broken}"

def test_every_page_is_in_the_nav():
  nav = (REPO / "mkdocs.yml").read_text()
  missing = [str(p.relative_to(REPO / "docs")) for p in PAGES[1:] if f" {p.relative_to(REPO / 'docs')}" not in nav]
  assert not missing, f"docs pages missing from mkdocs.yml's nav: {missing}"

def test_the_architecture_is_a_map():
  """ARCHITECTURE.md is a map, not a manual: at most 200 lines of at most 100 characters, what to read first and the entry points in
  its first 50 lines, and each numbered invariant naming its check: a lint run, or tests that exist (each test file and test named)."""
  lines = (REPO / "ARCHITECTURE.md").read_text().splitlines()
  assert len(lines) <= 200 and not (long := [i + 1 for i, ln in enumerate(lines) if len(ln) > 100]), (len(lines), long)
  assert {"## Read first", "## Entry points"} <= set(lines[:50])
  section = "\n".join(lines[lines.index("## Invariants") + 1:lines.index("## Where to start")])
  items = re.split(r"\n(?=\d+\. )", section.split("\n\n", 2)[-1].strip())
  assert len(items) >= 10 and [int(it.split(".")[0]) for it in items] == list(range(1, len(items) + 1)), items
  for item in items:
    check = re.search(r"\*([^*]+)\*\s*$", item, re.S)
    assert check, f"invariant without its check: {item[:80]}"
    files = re.findall(r"`(tests/[\w/]+\.py)`", check.group(1))
    assert files or re.search(r"`(lint-imports|make lint)`", check.group(1)), f"no test or lint rule named: {item[:80]}"
    sources = "".join((REPO / f).read_text() for f in files)
    for name in re.findall(r"`(test_\w+)`", check.group(1)):
      assert f"def {name}(" in sources, f"{name} is in none of {files}"
