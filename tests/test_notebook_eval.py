"""notebooks/06-retrieval-eval.ipynb runs headless, top to bottom, and draws its comparison plot."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "06-retrieval-eval.ipynb"


@pytest.mark.slow
class TestRetrievalNotebook:
    def test_it_runs_and_shows_the_table_and_the_figure(self, agentlab_home):
        nbformat = pytest.importorskip("nbformat")
        nbclient = pytest.importorskip("nbclient")
        notebook = nbformat.read(NOTEBOOK, as_version=4)
        assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
        client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": str(NOTEBOOK.parent)}})
        client.execute()
        outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
        assert not [o for o in outputs if o.output_type == "error"]
        rich = [o for o in outputs if o.output_type in ("execute_result", "display_data")]
        assert any("image/png" in o.get("data", {}) for o in rich), "the recall@k figure was not drawn"
        tables = [o["data"]["text/html"] for o in rich if "text/html" in o.get("data", {})]
        assert any("dense-text" in t and "hybrid" in t and "recall@5" in t for t in tables)
        assert any("names" in t for t in tables)
