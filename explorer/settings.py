"""Every limit and knob in one declarative table (pydantic-settings): environment variables KERNEL_EXPLORER_<NAME>, overridable
by CLI flags (`kernel-explorer serve` has one per setting). docs/reference/settings.md documents each one (a test checks that it does)."""
from __future__ import annotations
import ipaddress
import os
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from explorer import defaults
from explorer.defaults import ENV_PREFIX as ENV_PREFIX
from explorer.targets import TARGETS

MIN_TOKEN_CHARS = 16
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("explorer_settings_environ", default=None)

class _Environ(EnvSettingsSource):
  """The process environment, or the mapping Settings.load was given (tests pass {} to ignore the host's variables)."""
  def _load_env_vars(self) -> Mapping[str, str | None]:
    if (env := _ENVIRON.get()) is None: return super()._load_env_vars()
    return {k.lower(): v for k, v in env.items()}

class Settings(BaseSettings):
  model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

  db: str | None = Field(None, description="SQLite file for stored traces (default: $XDG_DATA_HOME/kernel-explorer/traces.sqlite3)")
  token: str | None = Field(None, min_length=MIN_TOKEN_CHARS, description="access token required when binding beyond loopback "
                            "(header X-Access-Token or cookie ke_token); at least 16 characters: `kernel-explorer token` prints one")
  trusted_proxies: str = Field("", max_length=4096, description="addresses of reverse proxies whose X-Forwarded-For and "
                               "X-Forwarded-Proto headers name the client (comma separated IPs or CIDR networks; empty: none, every "
                               "client is its socket's address, so no client can change its address and escape its per-client share)")
  trace_timeout_s: float = Field(defaults.TRACE_TIMEOUT_S, ge=0, description="wall-clock limit for one worker (a trace, a study variant, "
                                 "a diff measurement, a probe), in seconds")
  worker_memory_mb: int = Field(defaults.WORKER_MEMORY_MB, ge=0, description="memory limit of a worker: each of its processes' data "
                                "size and their resident total, in MiB (0: none)")
  worker_nice: int = Field(defaults.WORKER_NICE, ge=0, description="workers run this much below the server's CPU priority (a Unix "
                           "nice increment; 0: same): pages stay responsive")
  max_output_mb: int = Field(defaults.MAX_OUTPUT_MB, ge=0, description="largest result a worker may send back (trace JSON plus rewrite blob), in MiB")
  memory_budget_mb: int = Field(2048, ge=0, description="largest input+weight+output tensor size a spec may ask for, in MiB")
  queue: str | None = Field(None, description="Redis URL of a job queue (redis://[:password@]host:6379/0): traces, studies and diff "
                           "measurements then run on `kernel-explorer worker` processes, on any machine, instead of this server's "
                           "own workers")
  queue_secret: str | None = Field(None, min_length=MIN_TOKEN_CHARS, description="a secret the server and its queue workers share (at least "
                                  "16 characters): each worker signs its results with it (HMAC-SHA256) and the server refuses a result that is "
                                  "not signed with it, so a worker without it, or anyone else who can write to the broker, cannot answer a job")
  max_workers: int = Field(0, ge=0, description="trace workers running at once (0: the CPU count, at least 1)")
  max_queue: int = Field(16, ge=0, description="traces waiting for a worker before new ones get 503 with a Retry-After")
  background_workers: int = Field(1, ge=0, description="workers that compute, at a lower priority, what a stored trace lacks before a page asks "
                                  "for it: its host records' analyses once it is stored, a kernel's neighbours once the kernel is first viewed "
                                  "(0: none; what a page asks for is computed then)")
  render_ahead: str = Field("cuda,metal", max_length=256, description="other targets a stored trace's kernels are rendered on ahead of "
                            "a page's first view of them (comma separated; empty: none), so that it is read from the store rather than "
                            "computed (about 0.7 s a kernel on this 2-core VM): the first render_beside of them with the trace, the others "
                            "in the background once it is stored (after its host records' analyses; needs background_workers). Any "
                            "other target is computed when first viewed")
  render_beside: int = Field(1, ge=0, description="the first this many of render_ahead's targets are rendered beside the trace itself, a "
                             "process each on another core while the host's codegen runs, so that their records are stored with the trace "
                             "(render_ahead's others once it is stored, and a job queue's traces all of them then; 0: all of them then). "
                             "Each costs the trace a render process's memory and, on a machine with no core to spare, some of its wall time")
  render_ahead_kernels: int = Field(32, ge=0, description="the kernels rendered ahead on each of render_ahead's targets: the first ones in "
                                    "the kernel table's order (a big program's others when first viewed, with their neighbours)")
  freeze_parsed_mb: int = Field(4, ge=0, description="a trace parsed from stored JSON past this many MiB is kept out of the garbage "
                                "collector's walks (gc.freeze, thawed when the server stops): their full collections over a 10,000-kernel "
                                "program held every request 70-110 ms (0: never, for a process that runs many servers, as the tests do)")
  loop_watch: bool = Field(False, description="time every step the event loop runs on its thread's CPU clock and report the longest "
                           "to trusted clients on /api/health (?held_since=T: those since time.monotonic() T), to check that no request "
                           "holds the loop (benchmarks/big_program.py turns it on)")
  switch_interval_ms: float = Field(0.5, gt=0, le=100, description="how long a thread runs before the interpreter lock passes to "
                                    "another that asks for it (sys.setswitchinterval; Python's default is 5): the event loop waits that "
                                    "long behind each thread rendering a page, several times a request")
  max_jobs_per_client: int = Field(4, ge=0, description="traces one client address may have running or waiting at once (0: no limit); "
                                   "past it a new trace gets 429 with a Retry-After, so one client cannot take every worker and queue slot")
  max_waiting_work: int = Field(32, ge=0, description="work of one kind asked for beside traces (hand schedules, a diff's measurements) "
                                "waiting for a worker before more gets 503 with a Retry-After")
  max_work_per_client: int = Field(4, ge=0, description="work of one kind (hand schedules, measurements) one client address may have running "
                                   "or waiting at once (0: no limit); past it 429 with a Retry-After. A free worker goes to the client running the "
                                   "fewest; one client's traces and hand schedules run on all but one worker, so another client finds one at once")
  max_page_work_per_client: int = Field(64, ge=0, description="a page's own lazy parts (a kernel's record on another target, its analysis "
                                        "or compile facts) one client address may have running or waiting at once (0: no limit): they wait "
                                        "their turn, the page saying how many are ahead, so a person reading pages is never refused; past it "
                                        "(a flood) 429 with a Retry-After")
  max_waiting_page_work: int = Field(256, ge=0, description="a page's lazy parts of every client waiting for a worker before more gets 503 "
                                     "with a Retry-After")
  queue_wait_s: float = Field(900.0, ge=0, description="a queued trace that waited longer than this is dropped with a message")
  max_repeats: int = Field(1000, ge=0, description="largest timing repeats or warmup a request may ask for")
  max_beam: int = Field(8, ge=0, description="largest BEAM width a request may ask for")
  max_body_bytes: int = Field(65536, ge=0, description="largest request body, in bytes (413 past it)")
  max_connections: int = Field(256, ge=0, description="requests served at once (idle connections, bodies still arriving, event "
                               "streams and /api/health aside: they have limits of their own) before new ones get 503")
  request_head_timeout_s: float = Field(5.0, ge=0, description="a connection must send a whole request head within this many seconds of "
                                        "opening (or of its last response plus the 30 s keep-alive), else it is closed: idle and half-sent "
                                        "sockets are never held")
  request_body_timeout_s: float = Field(10.0, ge=0, description="a request's whole body must arrive within this many seconds of its head "
                                        "(else 408 and the connection is closed); bodies are read before a request counts against "
                                        "max_connections, so slow bodies hold no request slot (0: no deadline)")
  max_streams: int = Field(64, ge=0, description="live progress streams (server-sent events) open at once, beside max_connections; past it a "
                           "page polls instead (0: no limit)")
  max_streams_per_client: int = Field(8, ge=0, description="live progress streams one client address may hold open at once (0: no limit)")
  class_max_students: int = Field(300, ge=1, le=10_000, description="students one live class holds (each a browser tab following it over "
                                  "an event stream: a classroom behind one address shares no per-client cap); past it a student gets 503")
  max_classes: int = Field(16, ge=1, le=100_000, description="live classes at once; past it starting one gets 503")
  class_idle_hours: float = Field(4.0, gt=0, description="a live class nobody moved for this long ends (its page says so)")
  compile_cache: str = Field("", max_length=4096, description="directory where compile facts are kept, keyed by the kernel's source, "
                             "target, arch and the compilers' identities, so a kernel compiled before is read back instead of compiled "
                             "again (empty: $XDG_CACHE_HOME/kernel-explorer/compile; off: none)")
  graph_node_limit: int = Field(400, ge=0, description="graphs with more nodes are simplified before layout, and the page says so")
  dot_timeout_s: float = Field(20.0, ge=0, description="time limit for one graphviz layout, in seconds")
  graph_timeout_s: float = Field(180.0, ge=0, description="wall-clock limit for expanding one graph in a graph worker, in seconds (the "
                                 "worker is replaced past it)")
  max_graph_queue: int = Field(32, ge=0, description="graph expansions waiting for a graph worker before new ones get 503 with a Retry-After")

  @field_validator("trusted_proxies")
  @classmethod
  def _networks(cls, text: str) -> str:
    for p in _entries(text):
      try: ipaddress.ip_network(p, strict=False)
      except ValueError: raise ValueError(f"{p!r} is not an IP address or network") from None
    return text

  @field_validator("render_ahead")
  @classmethod
  def _targets(cls, text: str) -> str:
    if unknown := [t for t in _entries(text) if t not in TARGETS]: raise ValueError(f"no target {unknown[0]!r}; known: {', '.join(TARGETS)}")
    return text

  @property
  def ahead_targets(self) -> list[str]:
    """render_ahead's targets, in order, each once."""
    return list(dict.fromkeys(_entries(self.render_ahead)))

  @property
  def beside_targets(self) -> tuple[str, ...]:
    """The targets a local trace renders beside itself: render_ahead's first render_beside."""
    return tuple(self.ahead_targets[:int(self.render_beside)])

  @property
  def proxies(self) -> list[str]:
    """The trusted proxies, as uvicorn takes them (forwarded_allow_ips)."""
    return _entries(self.trusted_proxies)

  @classmethod
  def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                 env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                 file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
    return init_settings, _Environ(settings_cls)  # explicit values (flags) win over the environment; no .env or secret files

  @classmethod
  def load(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Defaults, then environment variables (os.environ, or env), then explicit overrides (CLI flags; None is ignored). A bad value
    raises ValueError naming its variable."""
    if unknown := set(overrides) - set(cls.model_fields): raise ValueError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    token = _ENVIRON.set(env)
    try: return cls(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e: raise ValueError(_first_error(e)) from None
    finally: _ENVIRON.reset(token)

  @property
  def workers(self) -> int: return self.max_workers or max(1, os.cpu_count() or 1)

def _entries(text: str) -> list[str]: return [p.strip() for p in text.split(",") if p.strip()]

def _first_error(e: ValidationError) -> str:
  err = e.errors()[0]
  name = ENV_PREFIX + str(err["loc"][0]).upper() if err.get("loc") else "a setting"
  if err.get("type") == "string_too_short" and name.endswith(("TOKEN", "SECRET")):
    return f"{name} must be at least {MIN_TOKEN_CHARS} characters; `kernel-explorer token` prints a fresh one"
  return f"{name}: {err['msg']}, got {err.get('input')!r}"

@dataclass(frozen=True)
class Setting:
  """One row of the settings table (docs/reference/settings.md's, and `serve --help`'s)."""
  name: str
  default: int | float | str | None
  help: str
  kind: type

def _kind(annotation: Any) -> type: return annotation if annotation in (int, float) else str

SETTINGS: tuple[Setting, ...] = tuple(Setting(name, f.default, f.description or "", _kind(f.annotation)) for name, f in Settings.model_fields.items())
