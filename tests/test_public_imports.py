"""The README, the notebooks and the docs import only public names: no module whose name starts with an underscore."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INTERNAL_IMPORT = re.compile(r"(?:from|import)\s+agentlab(?:\.\w+)*\._\w+")


def _texts() -> dict[str, str]:
    texts = {"README.md": (ROOT / "README.md").read_text()}
    for path in sorted((ROOT / "docs").glob("*.md")):
        texts[str(path.relative_to(ROOT))] = path.read_text()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        texts[str(path.relative_to(ROOT))] = "\n".join("".join(cell["source"]) for cell in cells)
    return texts


def test_the_pattern_finds_an_internal_import() -> None:
    assert INTERNAL_IMPORT.search("from agentlab.chat._offline import OfflineClaude")
    assert INTERNAL_IMPORT.search("import agentlab.session.duckdb._tree as tree")
    assert not INTERNAL_IMPORT.search("from agentlab.chat import OfflineClaude")
    assert not INTERNAL_IMPORT.search("from agentlab import ChatAgent")


def test_docs_and_notebooks_import_public_names_only() -> None:
    texts = _texts()
    assert "README.md" in texts and any(name.endswith(".ipynb") for name in texts)
    found = {name: INTERNAL_IMPORT.findall(text) for name, text in texts.items()}
    assert {name: hits for name, hits in found.items() if hits} == {}
