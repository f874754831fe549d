"""What a process that forks trace workers (explorer.tracing.template) pays once for all of them, leaving tinygrad's state as it was:
each backend tinygrad imports to pick its default device, and every rewrite rule compiled. Neither opens a device nor makes a UOp,
so a forked worker records, caches and runs exactly what a fresh one would."""
import contextlib, gc
from tinygrad import Device
from tinygrad.device import ALL_DEVICES
from tinygrad.helpers import DEV
from tinygrad.uop.ops import PatternMatcher
from tinygrad.uop.upat import upat_compile

def import_backends() -> None:
  """tinygrad.runtime.ops_* for DEV's device, or where DEV is unset for every device tinygrad tries for its default (about 0.9 CPU s
  here, most of it NV's and AMD's generated bindings). Loading a driver's library before a fork is safe; initialising it (opening a
  device) is not, and only the forked worker does."""
  for device in [DEV.device] if DEV.device else ALL_DEVICES:
    with contextlib.suppress(Exception): Device.get_class(device)  # a backend this platform lacks fails to import: the worker retries

def compile_rules() -> None:
  """Every rule of every PatternMatcher imported so far compiled into tinygrad's cache of compiled rules (upat_compile: a pure function
  of the rule, cached by it). tinygrad compiles a rule on its first match, in each process: about 0.5 CPU s per trace worker and per
  render process here, 1.3 s for all ~900 rules once. Matchers built later from these rules (pm + pm) find them compiled too."""
  for pm in (o for o in gc.get_objects() if isinstance(o, PatternMatcher)):
    for pat, fxn in pm.patterns:
      with contextlib.suppress(Exception): upat_compile(pat, fxn)  # a rule that fails to compile fails as it would have, at its match

def warm_up() -> None:
  """Both, in a process about to fork workers (explorer.tracing.template_process)."""
  import_backends()
  compile_rules()
