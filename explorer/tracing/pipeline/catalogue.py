"""The custom rewrites' catalogue as data, for the server and the CLI: each rewrite's name, usage, summary and point in codegen
(explorer.spec.REWRITES), and the source of its PatternMatcher and functions, read from the text of explorer/tracing/pipeline/rewrites.py
(importing that module would import tinygrad, which the server process never does)."""
from __future__ import annotations
import ast
import functools
import pathlib
from explorer.spec import REWRITES

REWRITES_FILE = pathlib.Path(__file__).with_name("rewrites.py")
# the definitions in rewrites.py that make up each rewrite, in the order they read best
DEFINITIONS = {"sink-loads": ("FENCES", "sink_loads", "_sink_program_loads", "pm_sink_loads"),
               "peel": ("LoopContext", "outermost_loop", "peel", "pm_peel"),
               "drop-end": ("outermost_loop", "drop_end", "pm_drop_end")}

@functools.cache
def _definitions() -> dict[str, str]:
  text = REWRITES_FILE.read_text()
  out = {}
  for node in ast.parse(text).body:
    names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else \
            [t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign) else []
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    for n in names: out[n] = "\n".join(text.splitlines()[start - 1:node.end_lineno])
  return out

def rewrite_source(name: str) -> str:
  """The source of one catalogue rewrite (`peel` for peel:N)."""
  return "\n\n".join(_definitions()[d] for d in DEFINITIONS[name.split(":")[0]])

def catalogue() -> list[dict[str, str]]:
  return [{"name": name, "usage": info.usage, "summary": info.summary, "point": info.point, "source": rewrite_source(name)}
          for name, info in REWRITES.items()]
