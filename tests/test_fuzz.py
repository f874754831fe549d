"""The JSON API fuzzed against its own OpenAPI schema (schemathesis, in-process ASGI): no input gets a 5xx. Bounded: 25 examples
per operation. No trace runs for real: the runner is a stub that stores a small fake trace at once. The first test meets random ids
everywhere; the second pins {trace_id} to the session's real `small` trace (a copy of its store), so the graph, kernel, tour,
roofline and annotation endpoints see fuzzed refs, kernel numbers and queries on a real trace, expanding graphs in real workers."""
from __future__ import annotations
import pathlib, sqlite3, tempfile
from types import SimpleNamespace
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from explorer.settings import Settings
from explorer.web.app import create_app
from explorer.web.jobs import STAGES

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)

def stub_runner(spec, variant, progress, timeout_s):
  """Every stage reported, a minimal trace returned: jobs finish at once and nothing imports tinygrad."""
  for stage in STAGES: progress(stage, "done", "0.00s")
  trace = {"spec": spec.to_dict(), "preset": None, "variant": variant.to_dict(), "label": f"{spec.label()} | {variant.label()}", "status": "ok",
           "env": {"device": "CPU", "tinygrad": "0.14.0", "host": "fuzz", "python": "3.11", "created": "now"}, "failures": [], "notes": [],
           "stage_seconds": {s: 0.0 for s in STAGES}, "tensor_graph": None, "scheduler": None, "schedule": [], "buffers": [], "kernels": [],
           "totals": {"kernels": 0, "buffers": 0, "copies": 0, "flops": 0, "bytes": 0, "compile_s": 0, "codegen_s": 0, "time_s": None}, "error": None}
  return SimpleNamespace(trace=trace, rewrites=b"")

FUZZ_SETTINGS = Settings.load(env={}, max_queue=100000)
APP = create_app(str(pathlib.Path(tempfile.mkdtemp(prefix="ke-fuzz-")) / "fuzz.sqlite3"), settings=FUZZ_SETTINGS, runner=stub_runner)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)

def no_server_error(case, response) -> None:
  assert response.status_code < 500, (f"{case.method} {case.path} path={case.path_parameters} query={case.query} body={case.body!r:.300}: "
                                      f"{response.status_code} {response.text[:300]}")

@schema.parametrize()
@EXAMPLES
def test_api_has_no_server_errors(case):
  no_server_error(case, case.call())

@pytest.fixture(scope="module")
def real_app(web_db, small_trace, tmp_path_factory):
  path = tmp_path_factory.mktemp("fuzz-real") / "copy.sqlite3"
  with sqlite3.connect(web_db) as src, sqlite3.connect(path) as dst: src.backup(dst)
  return create_app(str(path), settings=FUZZ_SETTINGS, runner=stub_runner), small_trace

@schema.include(method="GET", path_regex=r"\{trace_id\}").parametrize()
@EXAMPLES
def test_a_real_trace_fuzzed_has_no_server_errors(case, real_app):
  app, trace_id = real_app
  case.path_parameters = {**(case.path_parameters or {}), "trace_id": trace_id}
  no_server_error(case, case.call(app=app))

def test_the_fuzz_covers_the_api():
  paths = {result.ok().path for result in schema.get_all_operations()}
  assert {"/api/traces", "/api/traces/{trace_id}/graphs/{ref}", "/api/traces/{trace_id}/kernels/{n}", "/api/traces/{trace_id}/annotations"} <= paths
