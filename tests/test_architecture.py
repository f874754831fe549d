"""The house rules a linter cannot state: the static import graph of explorer/ has no cycle (a package __init__ that its own modules
import back, or two modules that need each other, make a cycle; import-linter's layer contract sees neither); the pages' ES modules
(explorer/static/*.js, no bundler to check them) import only what exists, without a cycle, and each is loaded by a page."""
from __future__ import annotations
import pathlib
import re

STATIC = pathlib.Path(__file__).resolve().parent.parent / "explorer" / "static"
TEMPLATES = STATIC.parent / "templates"

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

IMPORT = re.compile(r'^import \{ ([\w$, ]+) \} from "\./([\w.]+\.js)";$', re.M)
EXPORT = re.compile(r"^export (?:async function|function|class|const) ([\w$]+)", re.M)
SCRIPT = re.compile(r"""<script (type="module" )?src="\{\{ url_for\('static', path='([\w.]+\.js)'\) \}\}"></script>""")

WORKER = re.compile(r'new URL\("\./([\w.]+\.js)", import\.meta\.url\)')  # the script of a Worker a module starts (big_graph.js's)

def js_imports() -> dict[str, list[str]]:
  """Each page module's imports (and the workers it starts), by file name; every name it imports is exported by the module it names."""
  texts = {p.name: p.read_text() for p in STATIC.glob("*.js")}
  graph: dict[str, list[str]] = {}
  for name, text in texts.items():
    found = IMPORT.findall(text)
    assert len(found) == len(re.findall(r"^import ", text, re.M)), f"{name}: an import of another form than import {{ a, b }} from \"./m.js\";"
    for names, dep in found:
      assert dep in texts, f"{name} imports {dep}, which is not there"
      missing = set(names.split(", ")) - set(EXPORT.findall(texts[dep]))
      assert not missing, f"{name} imports {sorted(missing)} from {dep}, which does not export them"
    graph[name] = [dep for _, dep in found] + WORKER.findall(text)  # a worker a module starts is that module's too
  return graph

def test_the_pages_modules_import_what_exists_without_a_cycle():
  graph = js_imports()
  done: set[str] = set()
  def visit(name: str, path: list[str]) -> None:
    assert name not in path, f"import cycle: {' -> '.join(path[path.index(name):] + [name])}"
    if name in done: return
    for dep in graph[name]: visit(dep, path + [name])
    done.add(name)
  for name in sorted(graph): visit(name, [])

def test_each_page_module_is_loaded_by_a_page():
  """A template loads a script that imports or exports as a module (as a classic script it is a syntax error), and every script in
  static/ is a page's or imported by one."""
  graph, loaded = js_imports(), set()
  for tpl in TEMPLATES.rglob("*.html"):
    for module, name in SCRIPT.findall(tpl.read_text()):
      assert (STATIC / name).is_file(), f"{tpl.name} loads {name}, which is not there"
      assert module or not (graph[name] or EXPORT.search((STATIC / name).read_text())), f"{tpl.name} loads {name} as a classic script"
      loaded.add(name)
  reached, todo = set(), sorted(loaded)
  while todo:
    if (name := todo.pop()) not in reached: reached.add(name); todo += graph[name]
  assert reached == set(graph), f"in static/ but loaded by no page: {sorted(set(graph) - reached)}"

FILE_COPY = re.compile(r"shutil\.copy(?:file|2)?\(([^)]*)\)")

def test_no_store_is_copied_as_a_file():
  """A store is copied by SQLite's backup (support.copy_store), never by its bytes: the process that copies a store it has open drops
  its POSIX locks on it as the copy's descriptor closes, and another process then deletes the write-ahead log under it (stop 80's CI
  failures). The one file copy allowed is explorer/store/wal.py's, made before this process opens the store."""
  root = pathlib.Path(__file__).resolve().parent.parent
  copies = [(path.relative_to(root), args) for folder in ("explorer", "tests", "benchmarks") for path in (root / folder).rglob("*.py")
            for args in FILE_COPY.findall(path.read_text()) if re.search(r"db|sqlite|store", args)]
  assert [str(p) for p, _ in copies] == ["explorer/store/wal.py"], copies  # its copy of the store found: the check sees one
