"""notebooks/07-memory-policies.ipynb runs headless, offline, on a small subset, and shows its tables and figures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.notebook_utils import outputs_text

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "07-memory-policies.ipynb"
LOCOMO = Path(os.environ.get("AGENTLAB_LOCOMO") or
              Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "locomo" / "locomo10.json")


@pytest.mark.slow
class TestMemoryPoliciesNotebook:
    def test_it_replays_draws_the_frontier_and_estimates_the_cost_offline(self, tmp_path, monkeypatch):
        nbformat = pytest.importorskip("nbformat")
        nbclient = pytest.importorskip("nbclient")
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # the dry run: nothing is sent
        if LOCOMO.is_file():
            monkeypatch.setenv("AGENTLAB_LOCOMO", str(LOCOMO))
        notebook = nbformat.read(NOTEBOOK, as_version=4)
        assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
        parameters = notebook.cells[1]
        assert "CONVERSATIONS = None" in parameters.source
        parameters.source = parameters.source.replace("CONVERSATIONS = None", "CONVERSATIONS = 2")  # a subset
        nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
        outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
        assert not [o for o in outputs if o.output_type == "error"]
        text = outputs_text(notebook)
        name = "locomo" if LOCOMO.is_file() else "agentlab-mini"
        assert f"dataset {name}" in text
        assert "ReplayResults(dataset=" in text and "'none', 'aggressive', 'moderate', 'gentle'" in text
        assert "evidence turns lost at a compaction" in text and "cited by: " in text
        assert "answers: " in text and "requests via Message Batches (50% off)" in text
        rich = [o for o in outputs if o.output_type in ("execute_result", "display_data")]
        assert sum("image/png" in o.get("data", {}) for o in rich) == 2  # the frontier and the distance panels
        tables = "\n".join(o["data"].get("text/plain", "") for o in rich)
        for column in ("tokens_vs_none", "in_summary", "searchable", "evidence_dropped_from_summary",
                       "fuzzy>=0.6", "long-head"):
            assert column in tables, column
