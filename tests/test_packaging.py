"""Packaging as the ecosystem expects: the wheel (built offline from this checkout) carries the templates, static files and vendored
libraries, the `kernel-explorer` command and the extras; installed on its own, it renders a page and answers `python -m explorer`."""
from __future__ import annotations
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import zipfile
import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent

@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
  out = tmp_path_factory.mktemp("wheel")
  src = out / "src"  # a copy: the build writes build/ and *.egg-info where it runs, and a stale build/ would hide missing files
  shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".venv", ".git", "build", "dist", "test-artifacts", "__pycache__", "*.egg-info",
                                                             ".*_cache"))
  r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
                     capture_output=True, text=True, timeout=300, cwd=out)
  assert r.returncode == 0, r.stderr[-2000:]
  (whl,) = out.glob("kernel_explorer-*.whl")
  return whl

def test_the_wheel_carries_everything_the_pages_need(wheel):
  names = set(zipfile.ZipFile(wheel).namelist())
  for need in ("explorer/templates/base.html", "explorer/templates/notebook.html", "explorer/templates/_partials/kernel_table.html",
               "explorer/static/explorer.css", "explorer/static/study.js", "explorer/static/vendor/svg-pan-zoom-3.6.2.min.js", "explorer/api.py"):
    assert need in names, need
  meta = next(zipfile.ZipFile(wheel).read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
  entry = next(zipfile.ZipFile(wheel).read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
  assert {"Provides-Extra: cuda", "Provides-Extra: notebook", "Provides-Extra: test"} <= set(meta.splitlines())
  assert "kernel-explorer = explorer.cli:main" in entry

def test_installed_alone_it_renders_and_runs(wheel, tmp_path):
  target = tmp_path / "site"
  subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)], check=True, timeout=300)
  env = {**os.environ, "PYTHONPATH": str(target)}
  code = (f"import explorer, explorer.present.render as r; assert explorer.__file__.startswith({str(target)!r}), explorer.__file__; "
          "print(r.environment().get_template('notebook.html').filename)")
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
  assert r.returncode == 0 and r.stdout.strip().startswith(str(target)), r.stderr
  help_ = subprocess.run([sys.executable, "-m", "explorer", "--help"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
  assert help_.returncode == 0 and "trace" in help_.stdout and "study" in help_.stdout

def test_the_compose_file_runs_commands_that_exist():
  """docker-compose.yml (server, Redis, a CPU worker): every explorer command in it parses with the CLI's own parser, and the server
  and the workers share one queue URL, with the broker's password."""
  import yaml
  from explorer.cli.main import build_parser
  compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
  services = compose["services"]
  assert {"redis", "server", "cpu-worker"} <= set(services)
  for name in ("server", "cpu-worker"):
    command = services[name]["command"]
    assert command[0] == "kernel-explorer"
    build_parser().parse_args(command[1:])
    assert services[name]["environment"]["KERNEL_EXPLORER_QUEUE"] == "redis://:${REDIS_PASSWORD}@redis:6379/0"
  assert "--requirepass" in services["redis"]["command"] and "worker" in services["cpu-worker"]["command"]

def test_without_the_queue_extra_a_queue_says_what_to_install(tmp_path):
  """rq and redis are the [queue] extra: the server without a queue never imports them, and asking for a queue without them says
  what to install instead of a traceback."""
  block = "import sys; sys.modules['rq'] = sys.modules['redis'] = None\n"
  serve = block + textwrap.dedent(f"""
    from explorer.settings import Settings
    from explorer.web.app import create_app
    create_app({str(tmp_path / 'a.sqlite3')!r}, settings=Settings.load(env={{}}))  # no queue: fine
    try: create_app({str(tmp_path / 'b.sqlite3')!r}, settings=Settings.load(env={{}}, queue="redis://127.0.0.1:1/0"))
    except ValueError as e: print(e)
  """)
  run = subprocess.run([sys.executable, "-c", serve], capture_output=True, text=True, timeout=120, cwd=REPO)
  assert run.returncode == 0, run.stderr
  assert "pip install 'kernel-explorer[queue]'" in run.stdout
  worker = block + "from explorer.cli import main; sys.exit(main(['worker', '--queue', 'redis://127.0.0.1:1/0']))"
  run = subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True, timeout=120, cwd=REPO)
  assert run.returncode == 2 and "pip install 'kernel-explorer[queue]'" in run.stderr and "Traceback" not in run.stderr

COMPILES = """
import pathlib, sys, jinja2
from explorer.present import render
env = render.environment()
env.bytecode_cache = render._CompiledTemplates(pathlib.Path(sys.argv[1]))
compiled, compile = [], jinja2.Environment.compile
jinja2.Environment.compile = lambda self, *a, **k: (compiled.append(a[1]), compile(self, *a, **k))[1]
env.get_template("base.html")
print(len(compiled))
"""

def test_a_new_process_reads_the_templates_compiled_code_from_disk_and_compiles_a_damaged_one_again(tmp_path):
  """The templates' compiled code is kept on disk (a server start compiled every template, 0.85 CPU s): a second process compiles
  nothing, a damaged file is compiled again, and a directory that cannot be written keeps it in memory only."""
  def compiles(directory: pathlib.Path) -> int:
    r = subprocess.run([sys.executable, "-c", COMPILES, str(directory)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return int(r.stdout.split()[-1])
  cache = tmp_path / "templates"
  assert compiles(cache) == 1 and len(list(cache.iterdir())) == 1
  assert compiles(cache) == 0
  (f,) = cache.iterdir()
  f.write_bytes(f.read_bytes()[:-50])  # its header whole, its code cut short
  assert compiles(cache) == 1 and compiles(cache) == 0
  (tmp_path / "file").write_text("")
  assert compiles(tmp_path / "file" / "templates") == 1  # cannot be made: memory only, no error
