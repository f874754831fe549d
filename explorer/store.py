"""SQLite store: finished traces (trace JSON + rewrite blob) keyed by a content hash, and a cache of laid-out graphs.

No tinygrad imports here: the web server uses this module, and the server process must never import tinygrad.
"""
from __future__ import annotations
import array, hashlib, importlib.metadata, itertools, json, os, pathlib, re, sqlite3, threading, time
from typing import Any, Callable
from explorer.blob import MAGIC as BLOB_MAGIC, BlobRefused, check_locations, read_plain
from explorer.spec import ENRICH_ANALYSIS, ENRICH_FACTS, ENRICH_TARGET, NOT_SET, ConvSpec, SpecError, Variant, knobs

SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
  id TEXT PRIMARY KEY,
  created REAL NOT NULL,
  preset TEXT,
  label TEXT NOT NULL,
  status TEXT NOT NULL,
  summary TEXT NOT NULL,
  trace TEXT NOT NULL,
  rewrites BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS traces_created ON traces(created);
CREATE TABLE IF NOT EXISTS graph_cache (
  key TEXT PRIMARY KEY,
  trace_id TEXT NOT NULL,
  ref TEXT NOT NULL,
  kind TEXT NOT NULL,
  body TEXT NOT NULL,
  created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS graph_cache_trace ON graph_cache(trace_id);
CREATE TABLE IF NOT EXISTS diff_cache (
  key TEXT PRIMARY KEY,
  a TEXT NOT NULL,
  b TEXT NOT NULL,
  kind TEXT NOT NULL,
  body TEXT NOT NULL,
  created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS diff_cache_a ON diff_cache(a);
CREATE INDEX IF NOT EXISTS diff_cache_b ON diff_cache(b);
CREATE TABLE IF NOT EXISTS annotations (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  trace_id TEXT NOT NULL,
  anchor_kind TEXT NOT NULL,
  anchor TEXT NOT NULL,
  text TEXT NOT NULL,
  created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS annotations_trace ON annotations(trace_id);
CREATE TABLE IF NOT EXISTS target_rewrites (
  trace_id TEXT NOT NULL,
  target TEXT NOT NULL,
  rewrites BLOB NOT NULL,
  PRIMARY KEY (trace_id, target)
);
CREATE TABLE IF NOT EXISTS enrichments (
  trace_id TEXT NOT NULL,
  kernel INTEGER NOT NULL,
  target TEXT NOT NULL,
  kind TEXT NOT NULL,
  value TEXT NOT NULL,
  created REAL NOT NULL,
  PRIMARY KEY (trace_id, kernel, target, kind)
);
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  status TEXT NOT NULL,
  label TEXT NOT NULL,
  request TEXT NOT NULL,
  owner TEXT NOT NULL,
  error TEXT,
  created REAL NOT NULL,
  started REAL,
  finished REAL
);
CREATE TABLE IF NOT EXISTS studies (
  id TEXT PRIMARY KEY,
  kind TEXT NOT NULL,
  label TEXT NOT NULL,
  status TEXT NOT NULL,
  request TEXT NOT NULL,
  owner TEXT NOT NULL,
  result TEXT,
  error TEXT,
  created REAL NOT NULL,
  finished REAL
);
CREATE INDEX IF NOT EXISTS studies_created ON studies(created);
"""
JOB_FIELDS = ("id", "status", "label", "request", "owner", "error", "created", "started", "finished")
UNFINISHED = ("queued", "running")
STUDY_FIELDS = ("id", "kind", "label", "status", "request", "owner", "error", "created", "finished")

class StoreError(RuntimeError):
  """A stored row cannot be read back (corrupt or from an incompatible version): the message says which and why."""

def default_db_path() -> pathlib.Path:
  base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
  return pathlib.Path(base) / "kernel-explorer" / "traces.sqlite3"

_installed: list[tuple[str, str]] = []  # (the metadata directory tinygrad's version was read from, that version)

def tinygrad_version() -> str:
  """The installed tinygrad's version, which trace ids follow. Package metadata is read again only once the directory it was read
  from is gone (an upgrade replaces it): finding it walks sys.path, which cost a third of the server's time under load (every home
  page keys the built-in tours)."""
  if _installed and os.path.isdir(_installed[0][0]): return _installed[0][1]
  try: dist = importlib.metadata.distribution("tinygrad")
  except importlib.metadata.PackageNotFoundError: return "unknown"
  if (where := getattr(dist, "_path", None)) is not None: _installed[:] = [(str(where), dist.version)]
  return dist.version

# tinygrad's DEV override as this process started with it: tinygrad itself sets DEV in the environment once it has picked a default
# device in this process (for the processes it spawns), which a capture() in a notebook does, and a trace's id must not change then
DEV_AT_START = os.environ.get("DEV")

def device_key(variant: Variant) -> str:
  """The device a trace will run on, as far as it is known without importing tinygrad: the variant's, else tinygrad's DEV
  override (as the process started), else "default" (the best device of this host; CPU here, a GPU on a GPU host, so not the same
  key as an explicit CPU)."""
  return variant.device or DEV_AT_START or "default"

def trace_key(spec: ConvSpec, variant: Variant) -> str:
  """Content hash of what determines a trace: spec, variant (notes aside), tinygrad version and device. Known before running."""
  # fields added since the first release count only off the value they had then (Knob.unkeyed): earlier ids stay the same
  later = {name: list(k.unkeyed) if isinstance(k.unkeyed, tuple) else k.unkeyed for name, (_, k) in knobs().items() if k.unkeyed is not NOT_SET}
  variant_fields = {k: v for k, v in variant.to_dict().items() if k not in ("notes", "device") and later.get(k, object()) != v}
  payload = {"spec": spec.to_dict(), "variant": variant_fields, "tinygrad": tinygrad_version(), "device": device_key(variant)}
  return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

def program_key(trace: dict) -> str:
  """A captured program's id: the content hash of its name, the kernels it ran (their AST keys), the variant, tinygrad and device."""
  payload = {"program": (trace.get("program") or {}).get("name"), "kernels": [k.get("ast_key") for k in trace["kernels"]],
             "variant": {k: v for k, v in trace["variant"].items() if k != "notes"}, "tinygrad": trace["env"]["tinygrad"],
             "device": trace["env"]["device"]}
  return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]

def key_of(trace: dict) -> str:
  """The id a recorded trace is stored under: trace_key for a convolution, program_key for a captured program."""
  if trace.get("spec") is None: return program_key(trace)
  return trace_key(ConvSpec.from_dict(trace["spec"]), Variant.from_dict(trace["variant"]))

def trace_summary(trace: dict) -> dict:
  """The few fields the recent-traces list shows, kept in their own column so listing never parses whole traces."""
  totals, variant = trace.get("totals") or {}, trace.get("variant") or {}
  return {"label": trace.get("label"), "preset": trace.get("preset"), "status": trace.get("status"), "kernels": totals.get("kernels"),
          "time_s": (totals.get("time_s") or {}).get("median"),
          "algo": "program" if trace.get("program") else variant.get("algo"), "device": (trace.get("env") or {}).get("device"),
          "failures": len(trace.get("failures") or []), "tinygrad": (trace.get("env") or {}).get("tinygrad"),
          **{k: variant.get(k) for k in VARIANT_FILTERS if k != "algo"}, "targets": variant.get("targets")}

# library search: fields kept in the summary column (older rows: read from the trace itself)
VARIANT_FILTERS = ("algo", "wino_impl", "tile", "staging", "consts", "opt")

def _field(name: str) -> str:
  return f"COALESCE(json_extract(summary, '$.{name}'), json_extract(trace, '$.variant.{name}'))"

def _like(text: str) -> str: return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"

def add_target_record(kernel: dict, target: str, rec: dict) -> None:
  """One kernel's record for `target` (or {"error": ...} where its codegen failed), with its source kept in `sources` too."""
  if "error" in rec: kernel.setdefault("source_errors", {})[target] = rec["error"]
  else: kernel.setdefault("targets", {})[target], kernel.setdefault("sources", {})[target] = rec, rec["source"]

MERGED_KINDS = (ENRICH_TARGET, ENRICH_ANALYSIS, ENRICH_FACTS)  # the enrichments a stored trace is read with (Store._enriched)

def checked_locations(blob: bytes) -> None:
  """StoreError when a rewrite blob in the data format names a rule location outside tinygrad and the explorer (explorer.blob); other
  bytes are kept as they are (a reader refuses what it cannot decode)."""
  if not blob.startswith(BLOB_MAGIC): return
  try: check_locations(read_plain(blob))
  except BlobRefused as e: raise StoreError(f"refused to store it: {e}") from None

class Store:
  """One SQLite file (WAL mode); one connection per thread."""
  def __init__(self, path: str | os.PathLike | None = None):
    self.path = pathlib.Path(path) if path is not None else default_db_path()
    self.path.parent.mkdir(parents=True, exist_ok=True)
    self._local = threading.local()
    with self._conn() as c: c.executescript(SCHEMA)

  def _conn(self) -> sqlite3.Connection:
    conn = getattr(self._local, "conn", None)
    if conn is None:
      conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
      conn.execute("PRAGMA journal_mode=WAL")
      conn.execute("PRAGMA synchronous=NORMAL")
      self._local.conn = conn
    return conn

  def close(self) -> None:
    if (conn := getattr(self._local, "conn", None)) is not None: conn.close(); self._local.conn = None

  # ***** traces *****

  def put_trace(self, trace_id: str, trace: dict, rewrites: bytes, target_rewrites: dict[str, bytes] | None = None) -> None:
    """The trace, the host's rewrite blob and each other target's, in one transaction: a stored trace is never half-written. A blob
    whose rule locations name a file outside tinygrad and the explorer is refused (StoreError), nothing kept."""
    for blob in (rewrites, *(target_rewrites or {}).values()): checked_locations(blob)
    row = (trace_id, time.time(), trace.get("preset"), trace.get("label") or trace_id, trace.get("status") or "ok", json.dumps(trace_summary(trace)),
           json.dumps(trace, default=str), rewrites)
    c = self._conn()
    c.execute("BEGIN IMMEDIATE")
    try:
      c.execute("INSERT OR REPLACE INTO traces (id, created, preset, label, status, summary, trace, rewrites) VALUES (?,?,?,?,?,?,?,?)", row)
      c.execute("DELETE FROM target_rewrites WHERE trace_id = ?", (trace_id,))
      c.execute("DELETE FROM enrichments WHERE trace_id = ?", (trace_id,))  # they were the replaced trace's
      c.executemany("INSERT INTO target_rewrites (trace_id, target, rewrites) VALUES (?,?,?)",
                    [(trace_id, t, b) for t, b in (target_rewrites or {}).items()])
      c.execute("COMMIT")
    except BaseException:
      c.execute("ROLLBACK")
      raise

  def put_target_records(self, trace_id: str, target: str, records: dict[int, dict], key: str, rewrites: bytes, ran_by: str | None = None) -> bool:
    """Kernels' records on a target computed after the trace (an enrichment, explorer.tracing.enrich.compute_target: {kernel: record or
    {"error"}}), the rewrite blob they address (under `key`, which the records name) and where they were computed (ran_by, NAME@HOST:
    env.ran_on.targets), in one transaction; False (nothing kept) when the trace is gone. StoreError for a blob naming files elsewhere."""
    checked_locations(rewrites)
    c, now = self._conn(), time.time()
    c.execute("BEGIN IMMEDIATE")
    try:
      if not self.has_trace(trace_id):
        c.execute("ROLLBACK")
        return False
      c.executemany("INSERT OR REPLACE INTO enrichments (trace_id, kernel, target, kind, value, created) VALUES (?,?,?,?,?,?)",
                    [(trace_id, n, target, ENRICH_TARGET, json.dumps({"record": rec, "ran_by": ran_by}), now) for n, rec in records.items()])
      c.execute("INSERT OR REPLACE INTO target_rewrites (trace_id, target, rewrites) VALUES (?,?,?)", (trace_id, key, rewrites))
      c.execute("COMMIT")
    except BaseException:
      c.execute("ROLLBACK")
      raise
    return True

  def has_trace(self, trace_id: str) -> bool:
    return self._conn().execute("SELECT 1 FROM traces WHERE id = ?", (trace_id,)).fetchone() is not None

  def trace_version(self, trace_id: str) -> tuple | None:
    """What a parsed copy of the trace is good for (None: no such trace): its row's time, and the count and latest time of the
    enrichments merged into it. Cheap (an index lookup): a cache asks it before each use."""
    return self._conn().execute(
      "SELECT t.created, (SELECT count(*) FROM enrichments e WHERE e.trace_id = t.id AND e.kind IN (?, ?, ?)), "
      "(SELECT max(created) FROM enrichments e WHERE e.trace_id = t.id AND e.kind IN (?, ?, ?)) FROM traces t WHERE t.id = ?",
      (*MERGED_KINDS, *MERGED_KINDS, trace_id)).fetchone()

  def get_trace(self, trace_id: str) -> dict | None:
    row = self._conn().execute("SELECT trace FROM traces WHERE id = ?", (trace_id,)).fetchone()
    if row is None: return None
    from pydantic_core import from_json  # here, not at import: a trace worker never loads pydantic (and reads no stored trace)
    try: trace = from_json(row[0])  # a third faster than json.loads on a big program's tens of megabytes
    except (ValueError, TypeError) as e: raise StoreError(f"stored trace {trace_id} is corrupt: its JSON does not parse ({e})") from None
    if not isinstance(trace, dict) or "spec" not in trace or "kernels" not in trace:
      raise StoreError(f"stored trace {trace_id} is corrupt: it is not a Kernel Explorer trace")
    return self._enriched(trace_id, trace)

  # ***** enrichments: what was computed for a stored trace after it ran (explorer.tracing.enrich), a row per kernel, target and kind *****

  def put_enrichments(self, trace_id: str, kind: str, values: dict[tuple[int, str], Any]) -> bool:
    """{(kernel, target): value} of one kind, in one transaction; False (nothing kept) when the trace is gone."""
    c, now = self._conn(), time.time()
    c.execute("BEGIN IMMEDIATE")
    try:
      if not self.has_trace(trace_id):
        c.execute("ROLLBACK")
        return False
      c.executemany("INSERT OR REPLACE INTO enrichments (trace_id, kernel, target, kind, value, created) VALUES (?,?,?,?,?,?)",
                    [(trace_id, k, t, kind, json.dumps(v), now) for (k, t), v in values.items()])
      c.execute("COMMIT")
    except BaseException:
      c.execute("ROLLBACK")
      raise
    return True

  def enrichments(self, trace_id: str, kind: str) -> dict[tuple[int, str], Any]:
    rows = self._conn().execute("SELECT kernel, target, value FROM enrichments WHERE trace_id = ? AND kind = ?", (trace_id, kind)).fetchall()
    out = {}
    for kernel, target, value in rows:
      try: out[(int(kernel), str(target))] = json.loads(value)
      except (json.JSONDecodeError, TypeError, ValueError): continue  # a corrupt row is computed again on the next view
    return out

  def _enriched(self, trace_id: str, trace: dict) -> dict:
    """The stored trace with what was computed for it since, in place: other targets' records (kernels[i].targets, with where they
    ran, env.ran_on.targets), then the records' analyses and compile facts."""
    kernels = {k.get("index"): k for k in trace["kernels"] if isinstance(k, dict)}
    for (kernel, target), got in sorted(self.enrichments(trace_id, ENRICH_TARGET).items()):
      if (k := kernels.get(kernel)) is None or not isinstance(got, dict) or not isinstance(rec := got.get("record"), dict): continue
      if target not in (k.get("targets") or {}): add_target_record(k, target, rec)
      if isinstance(by := got.get("ran_by"), str): trace.setdefault("env", {}).setdefault("ran_on", {}).setdefault("targets", {})[target] = by
    for kind, put in ((ENRICH_ANALYSIS, lambda rec, v: rec.update(v)), (ENRICH_FACTS, lambda rec, v: rec.__setitem__("compile", v))):
      for (kernel, target), value in self.enrichments(trace_id, kind).items():
        rec = ((kernels.get(kernel) or {}).get("targets") or {}).get(target)
        if isinstance(rec, dict) and isinstance(value, dict): put(rec, value)
    return trace

  def get_rewrites(self, trace_id: str, target: str | None = None) -> bytes | None:
    """The host's rewrite blob, or another target's (by its key: the target's name for one rendered with the trace, the key a record
    computed on first view names, `cuda@3f2a...`)."""
    if target is None: row = self._conn().execute("SELECT rewrites FROM traces WHERE id = ?", (trace_id,)).fetchone()
    else: row = self._conn().execute("SELECT rewrites FROM target_rewrites WHERE trace_id = ? AND target = ?", (trace_id, target)).fetchone()
    if row is None: return None
    if not isinstance(row[0], bytes): raise StoreError(f"stored rewrite blob of trace {trace_id} is corrupt: not bytes")
    return row[0]

  def recent(self, limit: int = 50) -> list[dict]:
    rows = self._conn().execute("SELECT id, created, preset, label, status, summary FROM traces ORDER BY created DESC LIMIT ?", (limit,)).fetchall()
    return [self._row(*r) for r in rows]

  @staticmethod
  def _row(trace_id: str, created: float, preset: str | None, label: str, status: str, summary: str) -> dict:
    try: extra = json.loads(summary)
    except json.JSONDecodeError: extra = {}
    return {**(extra if isinstance(extra, dict) else {}), "id": trace_id, "created": created, "preset": preset, "label": label, "status": status}

  def study_traces(self) -> dict[str, str]:
    """Trace id -> the id of the finished study that made it (a study traces each of its variants: they belong to its page)."""
    rows = self._conn().execute("SELECT s.id, json_extract(r.value, '$.trace_id') FROM studies s, json_each(s.result, '$.cases') c, "
                                "json_each(c.value, '$.rows') r WHERE s.status = 'done' AND json_valid(s.result)").fetchall()
    return {str(t): str(sid) for sid, t in rows if t}

  def search(self, text: str | None = None, preset: str | None = None, device: str | None = None, status: str | None = None,
             limit: int = 25, offset: int = 0, studies: bool = True, **variant: str | None) -> tuple[list[dict], int]:
    """Stored traces, newest first, filtered by label/id text, preset, device, status and variant fields (opt=beam: any width);
    studies=False leaves out the traces a finished study made (its page lists them). Returns (one page of rows shaped like recent(),
    the number of matches)."""
    if unknown := set(variant) - set(VARIANT_FILTERS): raise ValueError(f"unknown filter(s): {', '.join(sorted(unknown))}")
    where, args = [], []
    if text and "\x00" in text: where.append("0")  # SQLite's LIKE ends a pattern at NUL ("%" matched all); no label holds one
    elif text: where.append("(label LIKE ? ESCAPE '\\' OR id LIKE ? ESCAPE '\\')"); args += [_like(text), _like(text)]
    if preset: where.append("preset IS ?" if preset != "custom" else "preset IS NULL"); args += [preset] if preset != "custom" else []
    if status: where.append("status = ?"); args.append(status)
    if device: where.append("json_extract(summary, '$.device') = ?"); args.append(device)
    for k, v in variant.items():
      if not v: continue
      if k == "opt" and v == "beam": where.append(f"{_field(k)} LIKE 'beam:%'")
      else: where.append(f"{_field(k)} = ?"); args.append(v)
    if not studies and (made := list(self.study_traces())):
      where.append(f"id NOT IN ({','.join('?' * len(made))})"); args += made
    cond = f"WHERE {' AND '.join(where)}" if where else ""
    c = self._conn()
    total = c.execute(f"SELECT COUNT(*) FROM traces {cond}", args).fetchone()[0]
    rows = c.execute(f"SELECT id, created, preset, label, status, summary FROM traces {cond} ORDER BY created DESC LIMIT ? OFFSET ?",
                     [*args, limit, offset]).fetchall()
    return [self._row(*r) for r in rows], total

  def facets(self) -> dict[str, list[str]]:
    """The values each library filter takes in this store (for its drop-downs)."""
    c, out = self._conn(), {}
    for name, expr in [("preset", "COALESCE(preset, 'custom')"), ("device", "json_extract(summary, '$.device')"), ("status", "status"),
                       *((k, _field(k)) for k in VARIANT_FILTERS)]:
      out[name] = sorted(str(v) for (v,) in c.execute(f"SELECT DISTINCT {expr} FROM traces").fetchall() if v is not None)
    return out

  def delete_trace(self, trace_id: str) -> bool:
    """Drop a trace with its cached graphs and every cached diff it is a side of. False: there was no such trace."""
    c = self._conn()
    gone = c.execute("DELETE FROM traces WHERE id = ?", (trace_id,)).rowcount > 0
    c.execute("DELETE FROM graph_cache WHERE trace_id = ?", (trace_id,))
    c.execute("DELETE FROM diff_cache WHERE a = ? OR b = ?", (trace_id, trace_id))
    c.execute("DELETE FROM annotations WHERE trace_id = ?", (trace_id,))
    c.execute("DELETE FROM target_rewrites WHERE trace_id = ?", (trace_id,))
    c.execute("DELETE FROM enrichments WHERE trace_id = ?", (trace_id,))
    if gone: c.execute("DELETE FROM jobs WHERE id = ?", (trace_id,))  # its finished job's status goes with it (GET .../status: 404)
    return gone

  # ***** jobs: every accepted trace request, written when accepted: queued -> running -> done | error | interrupted *****

  def put_job(self, job_id: str, label: str, request: dict, owner: str) -> None:
    """A job accepted now (a re-run replaces the row of the earlier attempt)."""
    self._conn().execute("INSERT OR REPLACE INTO jobs (id, status, label, request, owner, created) VALUES (?, 'queued', ?, ?, ?, ?)",
                         (job_id, label, json.dumps(request), owner, time.time()))

  def job_started(self, job_id: str) -> None:
    self._conn().execute("UPDATE jobs SET status = 'running', started = ? WHERE id = ?", (time.time(), job_id))

  def job_finished(self, job_id: str, status: str, error: str | None = None) -> None:
    self._conn().execute("UPDATE jobs SET status = ?, error = ?, finished = ? WHERE id = ?", (status, error, time.time(), job_id))

  def get_job(self, job_id: str) -> dict | None:
    row = self._conn().execute(f"SELECT {', '.join(JOB_FIELDS)} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None: return None
    job = dict(zip(JOB_FIELDS, row))
    try: job["request"] = json.loads(job["request"])
    except json.JSONDecodeError: job["request"] = None
    return job

  def unfinished_jobs(self, owner: str) -> list[dict]:
    """The queued and running jobs of this owner, oldest first."""
    ids = [i for (i,) in self._conn().execute(f"SELECT id FROM jobs WHERE status IN {UNFINISHED} AND owner = ? ORDER BY created", (owner,))]
    return [job for i in ids if (job := self.get_job(i)) is not None]

  def interrupt_jobs(self, owner_gone: Callable[[str], bool], error: str) -> int:
    """Marks queued and running jobs whose owner process is gone as interrupted; returns how many."""
    c = self._conn()
    rows = c.execute(f"SELECT id, owner FROM jobs WHERE status IN {UNFINISHED}").fetchall()
    gone = [job_id for job_id, owner in rows if owner_gone(owner)]
    for job_id in gone: c.execute(f"UPDATE jobs SET status = 'interrupted', error = ?, finished = ? WHERE id = ? AND status IN {UNFINISHED}",
                                  (error, time.time(), job_id))
    return len(gone)

  def reopen_jobs(self, owner: str, error: str) -> int:
    """Jobs of this owner that were interrupted with this error (queued on a job queue, seen by a server without one) are queued
    again, for a server with the job queue to follow; returns how many."""
    return self._conn().execute("UPDATE jobs SET status = 'queued', error = NULL, finished = NULL WHERE owner = ? AND status = 'interrupted' "
                                "AND error = ?", (owner, error)).rowcount

  # ***** studies (explorer.analysis.study): accepted -> running -> done | error | interrupted; a done one keeps its result for good *****

  def put_study(self, study_id: str, kind: str, label: str, request: dict, owner: str) -> None:
    self._conn().execute("INSERT INTO studies (id, kind, label, status, request, owner, created) VALUES (?, ?, ?, 'running', ?, ?, ?)",
                         (study_id, kind, label, json.dumps(request), owner, time.time()))

  def study_finished(self, study_id: str, status: str, result: dict | None = None, error: str | None = None) -> None:
    self._conn().execute("UPDATE studies SET status = ?, result = ?, error = ?, finished = ? WHERE id = ?",
                         (status, None if result is None else json.dumps(result, default=str), error, time.time(), study_id))

  def get_study(self, study_id: str) -> dict | None:
    row = self._conn().execute(f"SELECT {', '.join(STUDY_FIELDS)}, result FROM studies WHERE id = ?", (study_id,)).fetchone()
    if row is None: return None
    study = dict(zip(STUDY_FIELDS + ("result",), row))
    try: study["request"], study["result"] = json.loads(study["request"]), study["result"] and json.loads(study["result"])
    except json.JSONDecodeError as e: raise StoreError(f"study {study_id} is corrupt ({e})") from None
    return study

  def running_studies(self, owner: str) -> list[dict]:
    """The running studies of this owner, oldest first (without results)."""
    ids = [i for (i,) in self._conn().execute("SELECT id FROM studies WHERE status = 'running' AND owner = ? ORDER BY created", (owner,))]
    return [study for i in ids if (study := self.get_study(i)) is not None]

  def recent_studies(self, limit: int = 50) -> list[dict]:
    """Newest first, without their results."""
    rows = self._conn().execute(f"SELECT {', '.join(STUDY_FIELDS)} FROM studies ORDER BY created DESC LIMIT ?", (limit,)).fetchall()
    return [{**dict(zip(STUDY_FIELDS, r)), "request": json.loads(r[4])} for r in rows]

  def interrupt_studies(self, owner_gone: Callable[[str], bool], error: str) -> int:
    """Marks running studies whose owner process is gone as interrupted; returns how many."""
    c = self._conn()
    gone = [i for i, owner in c.execute("SELECT id, owner FROM studies WHERE status = 'running'").fetchall() if owner_gone(owner)]
    for study_id in gone: self.study_finished(study_id, "interrupted", error=error)
    return len(gone)

  def reopen_studies(self, owner: str, error: str) -> int:
    """Studies of this owner that were interrupted with this error run again, as far as the store says (reopen_jobs' twin)."""
    return self._conn().execute("UPDATE studies SET status = 'running', error = NULL, finished = NULL WHERE owner = ? AND status = 'interrupted' "
                                "AND error = ?", (owner, error)).rowcount

  # ***** graph cache: expanded graph JSON and laid-out SVG, per trace and graph reference *****

  def put_cached(self, trace_id: str, ref: str, kind: str, body: Any) -> None:
    text = body if isinstance(body, str) else json.dumps(body)
    self._conn().execute("INSERT OR REPLACE INTO graph_cache (key, trace_id, ref, kind, body, created) VALUES (?,?,?,?,?,?)",
                         (f"{trace_id}:{kind}:{ref}", trace_id, ref, kind, text, time.time()))

  def get_cached(self, trace_id: str, ref: str, kind: str) -> str | None:
    row = self._conn().execute("SELECT body FROM graph_cache WHERE key = ?", (f"{trace_id}:{kind}:{ref}",)).fetchone()
    return None if row is None else row[0]

  def get_cached_json(self, trace_id: str, ref: str, kind: str) -> Any:
    if (text := self.get_cached(trace_id, ref, kind)) is None: return None
    try: return json.loads(text)
    except json.JSONDecodeError as e: raise StoreError(f"cached {kind} {ref} of trace {trace_id} is corrupt ({e})") from None

  def clear_cache(self, trace_id: str | None = None) -> None:
    if trace_id is None: self._conn().execute("DELETE FROM graph_cache")
    else: self._conn().execute("DELETE FROM graph_cache WHERE trace_id = ?", (trace_id,))

  # ***** annotations: a teacher's notes pinned to a tour step, a graph node or a source line of a trace *****

  def annotations(self, trace_id: str) -> list[dict]:
    """The trace's notes, oldest first: {id, trace_id, anchor_kind (step|node|line), anchor, text, created}."""
    rows = self._conn().execute("SELECT id, trace_id, anchor_kind, anchor, text, created FROM annotations WHERE trace_id = ? ORDER BY created, id",
                                (trace_id,)).fetchall()
    return [dict(zip(("id", "trace_id", "anchor_kind", "anchor", "text", "created"), r)) for r in rows]

  def add_annotation(self, trace_id: str, anchor_kind: str, anchor: str, text: str, max_per_trace: int | None = None) -> dict | None:
    """Stores one note; None (and nothing stored) when the trace already has max_per_trace notes."""
    c, now = self._conn(), time.time()
    c.execute("BEGIN IMMEDIATE")
    try:
      if max_per_trace is not None and c.execute("SELECT count(*) FROM annotations WHERE trace_id = ?", (trace_id,)).fetchone()[0] >= max_per_trace:
        c.execute("ROLLBACK")
        return None
      cur = c.execute("INSERT INTO annotations (trace_id, anchor_kind, anchor, text, created) VALUES (?,?,?,?,?)",
                      (trace_id, anchor_kind, anchor, text, now))
      c.execute("COMMIT")
    except BaseException:
      c.execute("ROLLBACK")
      raise
    return {"id": cur.lastrowid, "trace_id": trace_id, "anchor_kind": anchor_kind, "anchor": anchor, "text": text, "created": now}

  def delete_annotation(self, trace_id: str, note_id: int) -> bool:
    return self._conn().execute("DELETE FROM annotations WHERE trace_id = ? AND id = ?", (trace_id, note_id)).rowcount > 0

  # ***** diff cache: structural diffs, graph diffs, timings and output comparisons of two traces *****

  def put_diff(self, a: str, b: str, kind: str, body: Any) -> None:
    self._conn().execute("INSERT OR REPLACE INTO diff_cache (key, a, b, kind, body, created) VALUES (?,?,?,?,?,?)",
                         (f"{a}:{b}:{kind}", a, b, kind, json.dumps(body, default=str), time.time()))

  def get_diff(self, a: str, b: str, kind: str) -> Any:
    row = self._conn().execute("SELECT body FROM diff_cache WHERE key = ?", (f"{a}:{b}:{kind}",)).fetchone()
    if row is None: return None
    try: return json.loads(row[0])
    except (json.JSONDecodeError, TypeError) as e: raise StoreError(f"cached diff {kind} of traces {a} and {b} is corrupt ({e})") from None

  def clear_diffs(self, a: str | None = None, b: str | None = None) -> None:
    if a is None: self._conn().execute("DELETE FROM diff_cache")
    else: self._conn().execute("DELETE FROM diff_cache WHERE a = ? AND b = ?", (a, b if b is not None else a))

# ***** a trace named on the command line: a JSON file or a stored id (both kernel-explorer diff and export take either) *****

MAX_TRACE_FILE_BYTES = 256 << 20  # a trace file is refused above this, before it is read (a 1,000-kernel program's is tens of MiB)
MAX_TRACE_DEPTH = 64              # JSON nesting a trace file may have (a trace's own is under 10)
MAX_TRACE_INT = 1 << 63           # the magnitude a trace's integers stay below
# what is not an array's or object's bracket outside a string, in runs: linear, as no part can fail once begun (an unterminated string
# runs to the end: a retry from each of its quotes would be quadratic) and possessive (no backtracking state kept over a long string)
_NOT_NESTING = re.compile(rb'(?:[^"\[\]{}]++|"[^"\\]*+(?:\\.?[^"\\]*+)*+(?:"|\Z))++', re.S)
_NESTING = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff"), bytes(set(range(256)) - set(b"[{]}"))  # opening +1, closing -1 (as int8)
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")

def load_trace_file(path: str) -> dict:
  """A trace JSON file, as `kernel-explorer trace --json` or the web API writes it; SpecError (one line) when it is not one: too big
  (refused before it is read), not UTF-8, not JSON, nested too deep, numbers beyond a trace's, or a trace whose references break."""
  try: return _trace_of(_read_json(path), path)
  except SpecError: raise
  except RecursionError: raise SpecError(f"trace file {path} is nested too deeply to read") from None
  except MemoryError: raise SpecError(f"trace file {path} does not fit in memory here") from None
  except (KeyError, IndexError, TypeError, ValueError) as e:  # a file this version's checks let through and its readers trip on
    raise SpecError(f"trace file {path} does not read as a trace: {type(e).__name__}: {e}"[:300].replace("\n", " ")) from None

def _mib(n: int) -> str: return f"{n / (1 << 20):.4g} MiB"

def _read_json(path: str) -> Any:
  """The file's JSON, its size bounded before it is read, its nesting before it is parsed, its numbers as they are parsed."""
  try:
    if (size := os.stat(path).st_size) > MAX_TRACE_FILE_BYTES:
      raise SpecError(f"trace file {path} is {_mib(size)}, over the {_mib(MAX_TRACE_FILE_BYTES)} a trace file may be")
    with open(path, "rb") as f: data = f.read(MAX_TRACE_FILE_BYTES + 1)
  except OSError as e: raise SpecError(f"cannot read the trace file {path}: {e}") from None
  if len(data) > MAX_TRACE_FILE_BYTES: raise SpecError(f"trace file {path} grew over the {_mib(MAX_TRACE_FILE_BYTES)} a trace file may be")
  try: text = data.decode("utf-8")
  except UnicodeDecodeError as e: raise SpecError(f"trace file {path} is not UTF-8: byte {e.start} ({data[e.start]:#04x}): {e.reason}") from None
  if _nesting(data, MAX_TRACE_DEPTH) > MAX_TRACE_DEPTH:
    raise SpecError(f"trace file {path} nests arrays and objects deeper than the {MAX_TRACE_DEPTH} levels a trace file may")
  del data
  def integer(s: str) -> int:
    if len(digits := s.lstrip("-")) > 19 or abs(n := int(s)) >= MAX_TRACE_INT:  # int() of a long one is refused, or slow
      raise SpecError(f"trace file {path} holds the integer {s[:20]}{'...' if len(s) > 20 else ''} ({len(digits)} digits), beyond the 2**63 "
                      "a trace's integers stay within")
    return n
  def number(s: str) -> float:
    if len(s) > 64: raise SpecError(f"trace file {path} holds a number of {len(s)} characters: {s[:20]}...")
    return float(s)  # Infinity and NaN as JSON's writers (ours too: an error against a zero reference) write them; the schema bounds fields
  try: got = json.loads(text, parse_int=integer, parse_float=number)
  except json.JSONDecodeError as e: raise SpecError(f"cannot read the trace file {path}: {e}") from None
  if _ESCAPED_SURROGATE.search(text) and _has_surrogate(got):  # valid JSON, but no UTF-8 text: an export could not write it
    raise SpecError(f"trace file {path} holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape), which is not text")
  return got

def _nesting(data: bytes, limit: int) -> int:
  """How deep JSON's arrays and objects nest in data, outside its strings (read to limit + 1 at most): linear, without recursion."""
  marks, depth, peak, chunk = memoryview(array.array("b", _NOT_NESTING.sub(b"", data).translate(*_NESTING))), 0, 0, 1 << 16
  for at in range(0, len(marks), chunk):  # a chunk at a time: a deep file is refused at its start
    if (peak := max(peak, max(itertools.accumulate(marks[at:at + chunk], initial=depth)))) > limit: break
    depth += sum(marks[at:at + chunk])
  return peak

def _has_surrogate(value: Any) -> bool:
  """Whether any string (key or value) in parsed JSON holds a UTF-16 surrogate, walked without recursion."""
  todo = [value]
  while todo:
    v = todo.pop()
    if isinstance(v, str) and _SURROGATE.search(v): return True
    if isinstance(v, dict): todo += [*v.keys(), *v.values()]
    elif isinstance(v, list): todo += v
  return False

def _trace_of(t: Any, path: str) -> dict:
  if isinstance(t, dict) and "trace" in t and "kernels" not in t: t = t["trace"]  # a wrapped trace (the web API's shape)
  if not isinstance(t, dict) or not {"spec", "kernels", "buffers", "schedule", "env"} <= set(t):
    raise SpecError(f"{path} is not a Kernel Explorer trace (run `kernel-explorer trace ... --json PATH`)")
  from explorer.schema import validate_trace  # pydantic: only where a file is read
  return dict(validate_trace({k: v for k, v in t.items() if k not in ("id", "url")}, path))  # a file is data from elsewhere: checked

def find_stored(trace_id: str, db: str | None, what: str) -> tuple[Store, dict, bytes | None]:
  """The store, the trace and its rewrite blob for an argument that names a stored trace id; SpecError ("{what}, and ...") when
  there is none, or when its row is corrupt."""
  path = db or default_db_path()
  if not os.path.isfile(path): raise SpecError(f"{what}, and there is no trace store at {path}")
  try:
    store = Store(path)
    if (trace := store.get_trace(trace_id)) is None: raise SpecError(f"{what}, and not a trace id stored in {path}")
    return store, trace, store.get_rewrites(trace_id)
  except StoreError as e: raise SpecError(str(e)) from None
