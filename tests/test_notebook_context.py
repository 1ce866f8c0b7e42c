"""notebooks/03-context-memory.ipynb runs headless and shows what it claims (prompt, every tool, unload)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.notebook_utils import outputs_text

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "03-context-memory.ipynb"


def test_the_notebook_is_stored_without_outputs():
    import nbformat

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.mark.slow
def test_the_notebook_runs_headless_and_calls_every_tool(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = outputs_text(notebook)
    for expected in [
        "SOUL [readonly]",
        "MEMORY (Facts about the user) [5% \u2014 10/200 tokens] [writable]",
        "SKILLS [loadable]",
        "KNOWLEDGE (Project notes) [searchable]",
        "Written to memory. Usage: 3% (5/200 tokens)",
        'Error: Block "memory" exceeds maxTokens: 260 > 200',
        'Error: Block "soul" is readonly',
        'Indexed "deploy-day" in knowledge.',
        "[deploy-day] (score ",
        "Not found: haiku",
        'Unloaded "pirate" from skills. Context reclaimed.',
        "in history now:  [skill unloaded: pirate]",
        "refreshed prompt mentions Lisbon: True",
    ]:
        assert expected in text, expected
    assert "Traceback" not in text
