"""The defaults of the settings a worker's limits are made of, importable without pydantic: a command starts its trace worker from
these (and from the KERNEL_EXPLORER_* variables, validated by explorer.settings when any is set) before it loads anything heavy."""

ENV_PREFIX = "KERNEL_EXPLORER_"  # every setting's variable, and the explorer's own variables besides (a worker's tinygrad, the caches)

TRACE_TIMEOUT_S = 600.0  # wall-clock limit for one worker, in seconds
WORKER_MEMORY_MB = 8192  # memory limit of a worker's processes, in MiB (0: none)
WORKER_NICE = 10         # how far below the caller's CPU priority workers run
MAX_OUTPUT_MB = 256      # largest result a worker may send back, in MiB
