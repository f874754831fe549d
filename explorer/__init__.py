"""Kernel Explorer: trace a convolution (or any tinygrad program) through tinygrad's pipeline and show every stage.

The Python API's names are here too, loaded on first use so that `import explorer` (the CLI, the server) never imports tinygrad:

    from explorer import capture        # any tinygrad program, in this process (explorer.api.capture)
    from explorer import trace, Trace   # a convolution, in a worker; the result
"""
from typing import Any

API = ("capture", "trace", "Trace", "Captured")

def __getattr__(name: str) -> Any:
  if name in API:
    from explorer import api
    return getattr(api, name)
  if name == "__version__":
    from explorer.version import __version__
    return __version__
  raise AttributeError(f"module 'explorer' has no attribute {name!r}")
