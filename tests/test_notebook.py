"""The example notebook runs end to end in a real Jupyter kernel (nbclient, no network), and a trace renders inline."""
from __future__ import annotations
import pathlib
import pytest

NOTEBOOK = pathlib.Path(__file__).resolve().parent.parent / "examples" / "symbolic_constants.ipynb"

@pytest.mark.slow
def test_the_example_notebook_runs_and_shows_traces_inline():
  """Slow: a real Jupyter kernel starts and runs the example notebook's traces."""
  nbformat = pytest.importorskip("nbformat", reason="the notebook extra (pip install .[notebook]) is not installed")
  nbclient = pytest.importorskip("nbclient", reason="the notebook extra (pip install .[notebook]) is not installed")
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
  assert not [o for o in outputs if o.output_type == "error"]
  inline = [o.data["text/html"] for o in outputs if o.output_type == "execute_result" and "text/html" in o.data]
  assert any('class="ke-nb"' in h and "<svg" in h and 'class="hl"' in h for h in inline)  # facts, kernel graph, highlighted sources
  text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
  assert "symbolic: 4 kernels, 0 copies" in text and "materialized: 4 kernels, 3 copies" in text and "matched by role" in text
