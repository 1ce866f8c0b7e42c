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
    # the dashboard, a readonly state view, a context view, a plain agent's dashboard, the 10,000-message tree
    assert len(shown) == 5
    assert all("text/html" in o["data"] for o in shown)  # the static fallback travels with each widget
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "inline error: State update rejected: the state is a dict and turns cannot be negative" in text
    assert "current leaf: True" in text and "frozen prompt stale: False" in text
    assert "'messages': 10001, 'segments': 3" in text
    assert "the context view shows: Prefers oat milk." in text
    assert "fork point:" in text and "shared messages:" in text and "hits: [" in text
    assert "plain agent shows session: 'notes' | picker: True" in text
    frames = [o["data"]["text/plain"] for o in outputs if o.output_type == "execute_result"
              and "text/plain" in o.get("data", {}) and "writer" in o["data"]["text/plain"]]
    assert frames and "tool" in frames[0] and "python" in frames[0]  # the memory timeline's writers
