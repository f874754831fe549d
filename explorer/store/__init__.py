"""SQLite store: finished traces (trace JSON + rewrite blob) keyed by a content hash, what was computed for them since, caches of laid-out
graphs and diffs, annotations, and the tasks of background work; one module per concern (explorer.store.db.Store composes them).

No tinygrad imports here: the web server uses this package, and the server process must never import tinygrad."""
from explorer.store.connection import StoreError as StoreError, default_db_path as default_db_path
from explorer.store.db import Store as Store
from explorer.store.enrichments import MERGED_KINDS as MERGED_KINDS, add_target_record as add_target_record
from explorer.store.files import MAX_TRACE_FILE_BYTES as MAX_TRACE_FILE_BYTES, find_stored as find_stored, load_trace_file as load_trace_file
from explorer.store.keys import (
                                 DEV_AT_START as DEV_AT_START,
                                 device_key as device_key,
                                 key_of as key_of,
                                 program_key as program_key,
                                 tinygrad_version as tinygrad_version,
                                 trace_key as trace_key,
)
from explorer.store.rewrites import checked_locations as checked_locations
from explorer.store.tasks import MAX_LABEL as MAX_LABEL, capped as capped
from explorer.store.traces import VARIANT_FILTERS as VARIANT_FILTERS, listing_fields as listing_fields
