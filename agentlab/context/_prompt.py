"""The system prompt rendered from context blocks, byte for byte as upstream's ``renderPrompt``.

Each block becomes a section framed by two lines of 46 ``═`` (U+2550) around a header, followed by the content:

    ══════…
    MEMORY (Facts) [0% — 5/1100 tokens] [writable]
    ══════…
    User likes coffee.

Sections are joined by a blank line (``"\\n\\n"``) and the result has no trailing newline. The header is the
upper-cased label, then `` (description)`` if there is one, then the usage ``[pct% — tokens/max tokens]`` if
``max_tokens`` is set and non-zero, then exactly one tag with precedence searchable > loadable > readonly >
writable. Empty readonly blocks are left out; empty writable, skill and search blocks still render their frame.

Invariants: rendering is pure and deterministic; the percentage uses JavaScript's ``Math.round`` (half rounds up,
``js_round``), never Python's banker's ``round``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from agentlab.context._tokens import js_number_to_string

__all__ = ["SEPARATOR", "ContextBlock", "js_round", "render_block", "render_prompt"]

SEPARATOR = "\u2550" * 46


@dataclass(frozen=True)
class ContextBlock:
    """A loaded context block, as the prompt renderer sees it.

    Attributes:
        label: The block's label (upper-cased in the header).
        description: Optional description, shown in parentheses.
        content: The loaded text ("" when the provider returned nothing).
        tokens: ``estimate_string_tokens(content)``, computed by the loader.
        max_tokens: The write budget; None or 0 hides the usage percentage.
        writable: True if the block accepts writes (its provider has ``set``).
        is_skill: True for a skill collection (``[loadable]``).
        is_searchable: True for a searchable block (``[searchable]``).
    """

    label: str
    description: str | None = None
    content: str = ""
    tokens: int = 0
    max_tokens: int | None = None
    writable: bool = False
    is_skill: bool = False
    is_searchable: bool = False


def js_round(x: float) -> float | int:
    """JavaScript's ``Math.round``: the nearest integer, halves rounded up (2.5 -> 3, -2.5 -> -2).

    Computed as ``floor(x)`` plus one when the fraction is at least 0.5, which is exact for every double (the naive
    ``floor(x + 0.5)`` gives 1 for 0.49999999999999994). NaN and infinities are returned unchanged.
    """
    if not math.isfinite(x):
        return x
    whole = math.floor(x)
    return whole + 1 if x - whole >= 0.5 else whole


def _tag(block: ContextBlock) -> str:
    if block.is_searchable:
        return "[searchable]"
    if block.is_skill:
        return "[loadable]"
    if not block.writable:
        return "[readonly]"
    return "[writable]"


def render_block(block: ContextBlock) -> str | None:
    """One block's section (frame, header, content), or None for an empty readonly block."""
    if not block.content and not block.writable and not block.is_searchable and not block.is_skill:
        return None
    header = block.label.upper()
    if block.description:
        header += f" ({block.description})"
    max_tokens = block.max_tokens
    if max_tokens and not (isinstance(max_tokens, float) and math.isnan(max_tokens)):
        pct = js_round(block.tokens / max_tokens * 100)
        header += (
            f" [{js_number_to_string(pct)}% \u2014 {js_number_to_string(block.tokens)}"
            f"/{js_number_to_string(max_tokens)} tokens]"
        )
    header += " " + _tag(block)
    return f"{SEPARATOR}\n{header}\n{SEPARATOR}\n{block.content or ''}"


def render_prompt(blocks: Iterable[ContextBlock]) -> str:
    """Render the system prompt from blocks in their configured order.

    Args:
        blocks: Loaded blocks, in insertion order.

    Returns:
        The sections joined by ``"\\n\\n"``, with no trailing newline; ``""`` if nothing rendered.
    """
    sections = (render_block(b) for b in blocks)
    return "\n\n".join(s for s in sections if s is not None)
