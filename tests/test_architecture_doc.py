"""docs/architecture.md draws the layers the import contract checks, in the same order."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _contract_layers() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    return [{name.strip().removeprefix("agentlab.") for name in layer.split("|")} for layer in layers]


def _drawn_layers() -> list[set[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    chart = re.search(r"```\n(.*?)```", text, re.S)
    assert chart is not None, "the layer chart is the first code block"
    rows = [re.split(r"\s{2,}", line.strip(), maxsplit=1)[0] for line in chart.group(1).splitlines() if line.strip()]
    return [{name.strip() for name in row.split("|")} for row in rows]


def test_the_chart_names_the_contracts_layers_top_down() -> None:
    assert _drawn_layers() == _contract_layers()


def test_every_subpackage_is_in_the_contract() -> None:
    named = set().union(*_contract_layers())
    packages = {p.parent.name for p in (ROOT / "agentlab").glob("*/__init__.py")}
    assert packages <= named
