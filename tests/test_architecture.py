"""The house rules a linter cannot state: the static import graph of explorer/ has no cycle (a package __init__ that its own modules
import back, or two modules that need each other, make a cycle; import-linter's layer contract sees neither)."""
from __future__ import annotations

def import_cycles(package: str) -> list[list[str]]:
  """Every strongly connected component of more than one module in the package's import graph (grimp's, as import-linter builds it:
  imports inside functions count too), each sorted."""
  import grimp
  graph = grimp.build_graph(package, cache_dir=None)
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on_stack: set[str] = set()
  found: list[list[str]] = []
  for root in sorted(graph.modules):  # Tarjan's algorithm, iterative: no recursion limit to meet
    if root in index: continue
    work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
    index[root] = low[root] = len(index)
    stack.append(root); on_stack.add(root)
    while work:
      node, edges = work[-1]
      nxt = next(edges, None)
      if nxt is not None:
        if nxt not in index:
          index[nxt] = low[nxt] = len(index)
          stack.append(nxt); on_stack.add(nxt)
          work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
        elif nxt in on_stack: low[node] = min(low[node], index[nxt])
        continue
      work.pop()
      if work: low[work[-1][0]] = min(low[work[-1][0]], low[node])
      if low[node] == index[node]:
        comp = []
        while True:
          m = stack.pop(); on_stack.discard(m); comp.append(m)
          if m == node: break
        if len(comp) > 1: found.append(sorted(comp))
  return found

def test_the_import_graph_has_no_cycle():
  assert import_cycles("explorer") == [], "import cycles (break each: a module of its own for what both sides need)"

def test_the_check_sees_a_cycle(tmp_path, monkeypatch):
  """The check itself: a package whose __init__ holds what its module imports back is a cycle of two."""
  pkg = tmp_path / "cyclic"
  pkg.mkdir()
  (pkg / "__init__.py").write_text("from cyclic.mod import f\ndef helper(): return 1\n")
  (pkg / "mod.py").write_text("from cyclic import helper\ndef f(): return helper()\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  assert import_cycles("cyclic") == [["cyclic", "cyclic.mod"]]
