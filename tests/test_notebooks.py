"""Every notebook in notebooks/ runs headless from top to bottom, and is stored without outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.notebook_utils import outputs_text

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_is_stored_without_outputs(path):
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_notebook_has_a_test_that_runs_it_and_checks_its_output(path):
    """Each notebook is executed once, by a test that also checks what it shows (no second, blind run)."""
    tests = Path(__file__).parent
    runners = [t for t in tests.glob("test_*.py") if path.name in t.read_text() and t.name != Path(__file__).name]
    runners += [Path(__file__)] if path.name == "02-branching.ipynb" else []
    assert runners, f"no test runs {path.name}"


@pytest.mark.slow
def test_the_branching_notebook_shows_branches_search_and_compaction(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(Path(__file__).parent.parent / "notebooks" / "02-branching.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = outputs_text(notebook)
    for expected in [
        "replies to q1: ['r1', 'r2', 'r3']",
        "latest leaf:   r3",
        "latest leaf: a5",
        "messages on the current branch: 10",
        "on current branch=False",
        "phrase 'twice a week': ['r3']",
        "only on r2's branch:    ['r2']",
        "compacted q2 .. a4",
        "compaction_",
        "messages covered: 6",
        "stored rows are unchanged: 12 messages",
        "other branches are not affected: ['q1', 'r2']",
    ]:
        assert expected in text, expected
