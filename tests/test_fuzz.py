"""The JSON API is exactly its OpenAPI schema: schemathesis (in-process ASGI) with every check it has (its `--checks all`), over every
operation. Each operation gets its schema's examples, the coverage phase's cases (boundary values, missing and wrong values, methods
the schema does not list: 405 with the right Allow) and fuzzed cases, valid and invalid; the stateful test chains the links
schemathesis infers (POST /api/traces -> GET /api/traces/{id}/... -> DELETE /api/traces/{id} -> GET again) for use_after_free and
ensure_resource_availability. ignored_auth and object_level_authorization run and pass by having nothing to check: the schema
declares no security scheme (the access token is a deployment switch; 401 is documented on every operation but /api/health).
schemathesis.toml says why three operations may refuse schema-valid requests with 422; nothing else is relaxed.

Bounded: 25 fuzzed examples per operation (besides its examples and coverage cases) and 50 stateful scenarios of up to 8 steps, so
the file takes well under a few minutes on 2 cores. No trace runs for real: the runner is a stub that stores a small fake trace at
once, and the device list is fixed. The real-trace test pins {trace_id} to the session's real `small` trace (a copy of its store),
so the GET operations see fuzzed refs, kernel numbers and queries on a real trace, expanding graphs in real workers."""
from __future__ import annotations
import pathlib
import tempfile
import time
import tomllib
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.config import SchemathesisConfig
from support import app_over, copy_store, fake_result, minimal_trace
from explorer.settings import Settings
from explorer.web.services.devices import DeviceCatalog
from explorer.web.services.traces import STAGES

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
STATEFUL = settings(max_examples=50, stateful_step_count=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)
CONFIG_FILE = pathlib.Path(__file__).parent.parent / "schemathesis.toml"
CONFIG = SchemathesisConfig.from_path(CONFIG_FILE)  # why five operations may answer 422
SEMANTIC_OPS = ("POST /api/traces", "POST /api/traces/{trace_id}/annotations", "POST /api/studies", "POST /api/classes/{class_id}/answers",
                "POST /api/classes/{class_id}/reveal")

def stub_runner(spec, variant, progress, timeout_s):
  """Every stage reported, a minimal trace returned: jobs finish at once and nothing imports tinygrad."""
  for stage in STAGES: progress(stage, "done", "0.00s")
  return fake_result(minimal_trace(spec, variant))

def stub_study(kind, cases, progress=None, **params):
  """A study that ends at once with no cases: the API's answers, not tinygrad's timings, are under test."""
  return {"study": kind, "cases": []}

FUZZ_SETTINGS = Settings.load(env={}, max_queue=100000, max_classes=100000)  # nothing refused for being full: the fuzz starts thousands

def fuzz_app(db_path: str):
  return app_over(db_path, settings=FUZZ_SETTINGS, runner=stub_runner, devices=DeviceCatalog(lister=lambda timeout_s: ["CPU"]),
                  study_runner=stub_study)

STORES = tempfile.TemporaryDirectory(prefix="ke-fuzz-")  # every app's store of this module, removed when the test process exits

def fresh_app():
  return fuzz_app(str(pathlib.Path(tempfile.mkdtemp(dir=STORES.name)) / "fuzz.sqlite3"))

APP = fresh_app()  # serves the schema
schema = schemathesis.openapi.from_asgi("/openapi.json", APP, config=CONFIG)

@pytest.fixture
def app():
  """A fresh app per test: schemathesis's pytest plugin ends the lifespan of the apps it called after each test, and a stopped app
  (its job manager shut down) takes no more jobs."""
  return fresh_app()

@schema.parametrize()
@EXAMPLES
def test_api_conforms_to_its_schema(case, app):
  case.call_and_validate(app=app)  # no checks named: every registered check runs (the config enables them all)

@pytest.fixture
def real_app(web_db, small_trace, tmp_path):
  """A fresh app per test (as app above) over a copy of the session's store."""
  path = tmp_path / "copy.sqlite3"
  copy_store(web_db, path)
  return fuzz_app(str(path)), small_trace

# GET only: a POST on the real trace would start real probes and measurements (tinygrad workers, many seconds each), a DELETE would
# leave the rest of the run without it; the stub app above covers those operations. A schema of its own, without CONFIG: include()
# on a schema whose config names operations keeps every operation (schemathesis 4.32), and no GET needs CONFIG's exceptions (its
# checks' settings, which every operation has, it does).
CHECKS_ONLY = SchemathesisConfig.from_dict({"checks": tomllib.loads(CONFIG_FILE.read_text())["checks"]})
real_schema = schemathesis.openapi.from_asgi("/openapi.json", APP, config=CHECKS_ONLY).include(method="GET", path_regex=r"\{trace_id\}")

@real_schema.parametrize()
@EXAMPLES
def test_a_real_trace_conforms_to_the_schema(case, real_app):
  app, trace_id = real_app
  case.path_parameters = {**(case.path_parameters or {}), "trace_id": trace_id}
  case.call_and_validate(app=app)

def settle(app, timeout_s: float = 60.0) -> None:
  """Until the app's trace jobs and measurements are over: the next step meets a stored trace, not a queued one, so a scenario's
  responses (and the links hypothesis follows from them) do not depend on timing, and hypothesis can replay it."""
  deadline = time.monotonic() + timeout_s
  svc = app.state.services
  def busy() -> bool: return bool(svc.jobs.tasks.running or svc.jobs.followed.running or svc.diffs.measures.running or svc.studies.running())
  while busy() and time.monotonic() < deadline: time.sleep(0.005)

class StatefulAPI(schema.as_state_machine()):  # type: ignore[misc]
  """Each scenario on a fresh app (a clean store): POST /api/traces, then what its links lead to, every check after each step."""
  def setup(self) -> None: self.app = fresh_app()
  def get_call_kwargs(self, case) -> dict: return {"app": self.app}
  def after_call(self, response, case) -> None:
    super().after_call(response, case)
    settle(self.app)

class TestStatefulAPI(StatefulAPI.TestCase):  # type: ignore[misc,valid-type]
  """About 40 s of CPU here (200 s before an app's templates were compiled once per process): 50 scenarios of up to 8 calls, every
  check after each call, each scenario on an app of its own so that hypothesis can replay it from a clean store."""
  settings = STATEFUL

def test_the_fuzz_covers_the_api_with_every_check():
  ops = [result.ok() for result in schema.get_all_operations()]
  paths = {op.path for op in ops}
  assert {"/api/traces", "/api/traces/{trace_id}/graphs/{ref}", "/api/traces/{trace_id}/kernels/{n}", "/api/traces/{trace_id}/annotations",
          "/api/traces/{trace_id}/roofline/probe", "/api/studies", "/api/studies/{study_id}"} <= paths
  real = {op.label for op in ops if op.method == "get" and "{trace_id}" in op.path}
  assert {result.ok().label for result in real_schema.get_all_operations()} == real
  load_all_checks()
  for op in ops:
    config = schema.config.checks_config_for(operation=op, phase=None)
    assert all(config.get_by_name(name=name).enabled for name in CHECKS.get_all_names()), op.label
    assert ("422" in config.positive_data_acceptance.expected_statuses) == (op.label in SEMANTIC_OPS), op.label
  for checked in (schema, real_schema):  # an invalid value past the URL's 8 KiB is refused with 414, before any operation
    for op in (result.ok() for result in checked.get_all_operations()):
      assert "414" in checked.config.checks_config_for(operation=op, phase=None).negative_data_rejection.expected_statuses, op.label
  raw = APP.openapi()
  assert "HTTPValidationError" not in str(raw), "FastAPI's default 422 body is not what this app sends"
  for path, methods in raw["paths"].items():
    for method, op in methods.items():
      assert {"400", "403", "413", "414"} <= set(op["responses"]), f"{method} {path}: the guards' answers are documented"
      for code, resp in op["responses"].items():
        body = "/ValidationErrorBody" if code == "422" else "/ErrorBody"
        if code >= "400": assert resp["content"]["application/json"]["schema"]["$ref"].endswith(body), f"{method} {path}: {code}"
