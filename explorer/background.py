"""The states and kinds of background work, defined once: the store keeps them (explorer.store.tasks), the web's lifecycle runs them
(explorer.web.services.lifecycle) and the API's models name them (explorer.web.http.models)."""
from __future__ import annotations
from typing import Final, Literal

TaskState = Literal["queued", "running", "done", "error", "interrupted", "unknown"]
QUEUED: Final[TaskState] = "queued"
RUNNING: Final[TaskState] = "running"
DONE: Final[TaskState] = "done"
ERROR: Final[TaskState] = "error"
INTERRUPTED: Final[TaskState] = "interrupted"  # a server stopped before it ended: the row says so, and how to run it again
UNKNOWN: Final[TaskState] = "unknown"  # a stored row whose state this version does not know (an older or damaged database): it says so
ACTIVE: Final[tuple[TaskState, ...]] = (QUEUED, RUNNING)
STATES: Final[tuple[TaskState, ...]] = (QUEUED, RUNNING, DONE, ERROR, INTERRUPTED)  # what work is ever put in

# what some kinds of work are ever in, as their response models say
Recomputed = Literal["queued", "running", "done", "error"]  # work the next view computes again: never shown interrupted
StartedAtOnce = Literal["running", "done", "error", "interrupted", "unknown"]  # a study: it runs from the moment it is accepted

TaskKind = Literal["trace", "study", "enrichment", "opts"]
TRACE: Final[TaskKind] = "trace"
STUDY: Final[TaskKind] = "study"
ENRICHMENT: Final[TaskKind] = "enrichment"
OPTS: Final[TaskKind] = "opts"
