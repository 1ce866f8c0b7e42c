"""notebooks/05-compaction-analysis.ipynb runs headless and shows the saw-tooth and the evidence it keeps."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "05-compaction-analysis.ipynb"


@pytest.mark.slow
class TestCompactionNotebook:
    def test_it_compacts_repeatedly_and_draws_both_figures(self, tmp_path, monkeypatch):
        nbformat = pytest.importorskip("nbformat")
        nbclient = pytest.importorskip("nbclient")
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # the offline, extractive path
        notebook = nbformat.read(NOTEBOOK, as_version=4)
        assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
        # Run from a folder with no ../shared next to it: the bundled dataset stands in for LoCoMo.
        nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
        outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
        assert not [o for o in outputs if o.output_type == "error"]
        text = "\n".join(o.get("text", "") for o in outputs if o.output_type == "stream")
        assert "dataset agentlab-mini" in text and "summarizer: ExtractiveSummarizer" in text
        assert int(re.search(r"compactions: (\d+)", text).group(1)) >= 2
        rich = [o for o in outputs if o.output_type in ("execute_result", "display_data")]
        assert sum("image/png" in o.get("data", {}) for o in rich) == 2
        tables = "\n".join(o["data"].get("text/plain", "") for o in rich)
        assert "visible verbatim" in tables and "quoted in summary" in tables and "share visible now" in tables
