"""The one package that touches tinygrad internals. A tinygrad upgrade should only need changes here. Its modules, by concern:
environment (tinygrad's settings, set before its import), rewritelog (tinygrad's rewrite log as plain data, and each rule's source),
recording (tracking switches, passes, the live log), graphs (a stored blob's graphs through tinygrad's viewer), provenance, pipeline
(tensor graph, scheduler, the schedule's calls and buffers), opts (optimization settings, opts by hand), custom_rewrites, codegen,
loops, specs, register_pressure, line_maps, kernel_analysis, runtime, clocks (how kernels and schedules are timed), profile (tinygrad's
profiler: the host's work over time), devices (devices and renderers) and nvrtc.
Callers use the names re-exported here: `from explorer.tracing import tg`.

Import it first in a fresh process: tinygrad swaps in its tracking PatternMatcher at import time, so the environment must be
set before. With VIZ unset (a trace worker), every named graph_rewrite is recorded (TRACK_MATCH_STATS=2), without VIZ's
profiling and stack traces, which cost more than the tracking itself. A process that sets VIZ gets tinygrad's own behaviour:
VIZ=0 is a plain, untracked tinygrad (renders for other targets, timing, benchmarks' baselines). PARALLEL=0 (compile in this
process, where the rewrites are recorded) unless the user set it; a BEAM search alone compiles its candidates in tinygrad's pool of
untracked processes, as plain tinygrad does (tg.opts.recording_beam). tinygrad's disk cache of compiles stays as tinygrad has it
(CCACHE): a trace compiles what tinygrad would, and says which kernels came from the cache (explorer.tracing.pipeline.trace); studies
time compiles afresh (compile_seconds).
"""
import atexit
from explorer.tracing.tg import environment  # noqa: F401 - first: tinygrad reads the settings it sets when it is imported

# isort: split
import tinygrad
import tinygrad.device
from tinygrad import Device, Tensor, dtypes
from tinygrad.dtype import AddrSpace
from tinygrad.helpers import Context, disable_gc
from tinygrad.uop import ops as uop_ops
from tinygrad.uop.ops import KernelInfo, Ops, PatternMatcher, UOp, UPat
from explorer.blob import MAGIC as REWRITE_LOG_MAGIC, BlobRefused
from explorer.tracing.tg.codegen import (
  CompileFailed,
  CompileTimer,
  ast_key,
  ast_uop_count,
  ast_variables,
  codegen_deviceless,
  codegen_host,
  program_facts,
)
from explorer.tracing.tg.compat import PRE_MATCHER, VERSION as _compat_version, at_least as _at_least, const_column, constant, linearized
from explorer.tracing.tg.custom_rewrites import Rewrite
from explorer.tracing.tg.device_clocks import Clock, ClockFailed, Runnable, clock_for
from explorer.tracing.tg.devices import (
  available_devices,
  default_device,
  device_name,
  fill_ptx,
  host_renderer,
  render_target,
  renderer_arch,
  renderer_device,
  target_name,
  unopened_devices,
  without_beam,
)
from explorer.tracing.tg.kernel_analysis import blob_analysis, program_analysis
from explorer.tracing.tg.nvrtc import nvrtc_compiler
from explorer.tracing.tg.opts import (
  OptRefused,
  check_opts,
  heuristic_opts,
  kernel_axes,
  kernel_outputs,
  kernel_runnables,
  legal_opts,
  opt_context,
  opt_text,
  parse_opt,
  recording_beam,
  with_opts,
)
from explorer.tracing.tg.pipeline import (
  Call,
  JitRun,
  buffer_facts,
  buffer_key,
  call_argument_nums,
  calls,
  copy_ins_outs,
  dims,
  jit_capturing,
  kernel_reads_writes,
  on_jit,
  on_realize,
  op_histogram,
  schedule,
  schedule_keys,
  schedule_with_vars,
  stage_decisions,
  tensor_buffer,
  tensor_device,
  tensor_sink,
)
from explorer.tracing.tg.profile import HostEvents, Profiling, profiling, profiling_paused
from explorer.tracing.tg.provenance import carrying_metadata, kernel_provenance, site_signature, sited_metadata, uop_sites, user_site
from explorer.tracing.tg.recording import (
  LiveLog,
  Pass,
  export_rewrites,
  forget_rewrites_since,
  passes_since,
  take_group_stacks,
  trace_num,
  tracking,
  tracking_enabled,
  tracking_mark,
  tracking_possible,
)
from explorer.tracing.tg.rewrite_blob import RewriteBlob, recorded_sinks
from explorer.tracing.tg.rewritelog import ENCODER_UNSTORED, decode_rewrite_log
from explorer.tracing.tg.runtime import (
  call_at,
  compile_schedule,
  compile_seconds,
  compiled_sources,
  compiler_name,
  fallback_reason,
  has_reduce,
  kernel_calls,
  outputs_kept,
  realize_inputs,
  replay,
  run_schedule,
  runnable,
  runnables,
  synchronizer,
)
from explorer.tracing.tg.specs import has_spec, schedule_calls, spec_check, tensor_spec_check

if not _at_least(0, 13):  # tinygrad 0.12 schedules ExecItems, not a LINEAR of CALLs: its schedule and runtime under the same names
  from explorer.tracing.tg.v012 import (  # type: ignore[assignment] # noqa: F811
    buffer_facts,
    buffer_key,
    call_at,
    calls,
    compile_schedule,
    compiled_sources,
    kernel_calls,
    outputs_kept,
    replay,
    run_schedule,
    runnable,
    runnables,
    schedule,
    schedule_keys,
    schedule_with_vars,
    tensor_buffer,
  )

# the public names the rest of the explorer uses: it imports tinygrad only through this package
__all__ = [
  # tinygrad's own
  "AddrSpace", "Context", "Device", "disable_gc", "KernelInfo", "Ops", "PatternMatcher", "Tensor", "UOp", "UPat", "dtypes", "TINYGRAD_VERSION",
  # rewrite tracking and the rewrite log
  "tracking", "tracking_enabled", "tracking_possible", "tracking_mark", "forget_rewrites_since", "passes_since", "export_rewrites", "trace_num",
  "take_group_stacks",
  "Pass", "LiveLog", "RewriteBlob", "recorded_sinks", "decode_rewrite_log", "ENCODER_UNSTORED", "REWRITE_LOG_MAGIC", "BlobRefused",
  # the pipeline: tensor graph, schedule, codegen, runtime
  "on_realize", "on_jit", "jit_capturing", "JitRun",
  "tensor_device", "tensor_sink", "op_histogram", "schedule", "schedule_keys", "schedule_with_vars", "stage_decisions",
  "call_argument_nums", "Call", "calls", "dims",
  "buffer_key", "buffer_facts", "tensor_buffer", "copy_ins_outs", "kernel_reads_writes",
  "kernel_provenance", "sited_metadata", "uop_sites", "user_site", "carrying_metadata", "site_signature",
  "CompileFailed", "CompileTimer", "codegen_host", "codegen_deviceless", "program_facts", "ast_uop_count", "ast_key", "ast_variables",
  "Rewrite", "compile_schedule", "run_schedule", "compiled_sources", "realize_inputs", "compile_seconds", "has_reduce",
  "compiler_name", "fallback_reason", "kernel_calls",
  # clocks: how kernels and schedules are timed (explorer.clocks names their methods)
  "Clock", "ClockFailed", "Runnable", "clock_for", "runnable", "runnables", "call_at", "outputs_kept", "replay", "synchronizer",
  # the host's work over time (tinygrad's profiler)
  "HostEvents", "Profiling", "profiling", "profiling_paused",
  # opts
  "opt_context", "OptRefused", "opt_text", "parse_opt", "heuristic_opts", "legal_opts", "with_opts", "check_opts", "kernel_axes",
  "kernel_outputs", "kernel_runnables", "recording_beam",
  # a kernel's analysis
  "spec_check", "has_spec", "tensor_spec_check", "schedule_calls", "program_analysis", "blob_analysis",
  # what differs between the tinygrads (compat)
  "const_column", "constant", "linearized", "PRE_MATCHER",
  # devices, renderers and compilers
  "default_device", "available_devices", "unopened_devices", "device_name", "host_renderer", "render_target", "target_name", "renderer_arch",
  "renderer_device", "without_beam", "fill_ptx", "nvrtc_compiler",
]

TINYGRAD_VERSION = getattr(tinygrad, "__version__", None) or _compat_version

# with tracking on, tinygrad pickles every rewrite (and any profile) to /tmp at exit; the explorer keeps its own copy instead
for _hook in (getattr(uop_ops, "print_match_stats", None), getattr(tinygrad.device, "finalize_profile", None)):
  if _hook is not None: atexit.unregister(_hook)
