"""notebooks/04-widgets.ipynb runs headless (nbclient, a real kernel) and shows the three widgets."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "04-widgets.ipynb"
WIDGET = "application/vnd.jupyter.widget-view+json"


@pytest.mark.slow
def test_the_widgets_notebook_runs_and_displays_its_widgets(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "store the notebook without outputs"
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    shown = [o for o in outputs if o.output_type == "execute_result" and WIDGET in o.get("data", {})]
    assert len(shown) == 4  # the dashboard, a readonly state view, a context view, the 10,000-message tree
    assert all("text/html" in o["data"] for o in shown)  # the static fallback travels with each widget
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "inline error: State update rejected: the state is a dict and turns cannot be negative" in text
    assert "current leaf: True" in text and "frozen prompt stale: False" in text
    assert "'messages': 10001, 'segments': 3" in text
