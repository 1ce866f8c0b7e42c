"""Helpers for the tests that execute notebooks."""

from __future__ import annotations


def outputs_text(notebook) -> str:
    """Everything an executed notebook printed or displayed as text, in order."""
    chunks = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                chunks.append(output["text"])
            elif "data" in output:
                chunks.append(output["data"].get("text/plain", ""))
    return "\n".join(chunks)
