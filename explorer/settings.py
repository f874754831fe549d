"""Every limit and knob in one declarative table: environment variables KERNEL_EXPLORER_<NAME>, overridable by CLI flags.
The README documents each one (a test checks that it does)."""
from __future__ import annotations
import os
from dataclasses import dataclass, field, fields

ENV_PREFIX = "KERNEL_EXPLORER_"

@dataclass(frozen=True)
class Setting:
  name: str
  default: int | float | str | None
  help: str

SETTINGS: tuple[Setting, ...] = (
  Setting("db", None, "SQLite file for stored traces (default: $XDG_DATA_HOME/kernel-explorer/traces.sqlite3)"),
  Setting("token", None, "access token required when binding beyond loopback (header X-Access-Token or cookie ke_token)"),
  Setting("trace_timeout_s", 600.0, "wall-clock limit for one worker (a trace, a study variant, a diff measurement, a probe), in seconds"),
  Setting("worker_memory_mb", 8192, "memory limit of a worker: each of its processes' data size and their resident total, in MiB (0: none)"),
  Setting("worker_nice", 10, "workers run this much below the server's CPU priority (a Unix nice increment; 0: same): pages stay responsive"),
  Setting("max_output_mb", 256, "largest result a worker may send back (trace JSON plus rewrite blob), in MiB"),
  Setting("memory_budget_mb", 2048, "largest input+weight+output tensor size a spec may ask for, in MiB"),
  Setting("max_workers", 0, "trace workers running at once (0: the CPU count, at least 1)"),
  Setting("max_queue", 16, "traces waiting for a worker before new ones get 503 with a Retry-After"),
  Setting("queue_wait_s", 900.0, "a queued trace that waited longer than this is dropped with a message"),
  Setting("max_repeats", 1000, "largest timing repeats or warmup a request may ask for"),
  Setting("max_beam", 8, "largest BEAM width a request may ask for"),
  Setting("max_body_bytes", 65536, "largest request body, in bytes (413 past it)"),
  Setting("max_connections", 256, "requests served at once (open event streams included; idle connections and /api/health aside) "
          "before new ones get 503"),
  Setting("request_head_timeout_s", 5.0, "a connection must send a whole request head within this many seconds of opening (or of its last "
          "response plus the 30 s keep-alive), else it is closed: idle and half-sent sockets are never held"),
  Setting("graph_node_limit", 400, "graphs with more nodes are simplified before layout, and the page says so"),
  Setting("dot_timeout_s", 20.0, "time limit for one graphviz layout, in seconds"),
  Setting("graph_timeout_s", 180.0, "wall-clock limit for expanding one graph in a graph worker, in seconds (the worker is replaced past it)"),
  Setting("max_graph_queue", 32, "graph expansions waiting for a graph worker before new ones get 503 with a Retry-After"),
)

MIN_TOKEN_CHARS = 16

def _parse(s: Setting, raw: str) -> int | float | str:
  if s.name == "token" and len(raw) < MIN_TOKEN_CHARS:
    raise ValueError(f"{ENV_PREFIX}TOKEN must be at least {MIN_TOKEN_CHARS} characters; `kernel-explorer token` prints a fresh one")
  if isinstance(s.default, bool) or s.default is None or isinstance(s.default, str): return raw
  try: value = type(s.default)(raw)
  except ValueError: raise ValueError(f"{ENV_PREFIX}{s.name.upper()} must be a {type(s.default).__name__}, got {raw!r}") from None
  if value < 0: raise ValueError(f"{ENV_PREFIX}{s.name.upper()} must not be negative, got {raw!r}")
  return value

@dataclass(frozen=True)
class Settings:
  values: dict = field(default_factory=dict)

  def __getattr__(self, name: str):
    if name in ("values",) or name.startswith("__"): raise AttributeError(name)
    if name not in BY_NAME: raise AttributeError(f"no setting {name!r}")
    return self.values.get(name, BY_NAME[name].default)

  @classmethod
  def load(cls, env: dict[str, str] | None = None, **overrides) -> Settings:
    """Defaults, then environment variables, then explicit overrides (CLI flags); None overrides are ignored."""
    env = os.environ if env is None else env
    values = {s.name: _parse(s, env[k]) for s in SETTINGS if (k := ENV_PREFIX + s.name.upper()) in env}
    if unknown := set(overrides) - set(BY_NAME): raise ValueError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    values.update({k: _parse(BY_NAME[k], v) if isinstance(v, str) else v for k, v in overrides.items() if v is not None})
    return cls(values)

  @property
  def workers(self) -> int: return self.max_workers or max(1, os.cpu_count() or 1)

BY_NAME = {s.name: s for s in SETTINGS}
assert not {f.name for f in fields(Settings)} & set(BY_NAME)
