"""Snippets: a short excerpt of a text around the first word that matches a query, the way search hits show.

A match is by stem (a word whose :func:`~agentlab.search._tokenizer.stem` is one of the query's tokens). For ASCII
text the first match is found from the tokens (:func:`~agentlab.search.tokenize`, one C-level pass),
and word boundaries are then computed only inside the excerpt's window, so a snippet costs about the same for a
200-word message as for a 20-word one; other text is split into words in full.
"""

from __future__ import annotations

import re
from itertools import islice

from agentlab.search._tokenizer import first_match, stem, tokenize, word_spans

__all__ = ["snippet"]

_SPACES = re.compile(r"\s+")
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")


def _window(length: int, hit: int | None, width: int) -> tuple[int, int]:
    start = 0 if hit is None else max(0, hit - width // 4)
    end = min(length, start + width)
    return max(0, min(start, end - width)), end


def _ascii_spans(text: str, start: int, end: int) -> list[tuple[int, int, str]]:
    """Whole words of ASCII ``text`` lying inside ``[start, end)``, as ``(start, end, lower-cased word)``."""
    spans = [(m.start(), m.end(), m.group().lower()) for m in _ASCII_WORD.finditer(text, start, end)]
    if spans and spans[0][0] == start and start > 0 and text[start - 1].isalnum():
        spans.pop(0)  # the tail of a word that starts before the window
    if spans and spans[-1][1] == end and end < len(text) and text[end].isalnum():
        spans.pop()  # the head of a word that ends after it
    return spans


def snippet(text: str, query: str, *, width: int = 160, mark: tuple[str, str] | None = None) -> str:
    """A short excerpt of ``text`` around the first token matching ``query`` (by stem).

    Args:
        text: The document text.
        query: The query (tokenized like the index does).
        width: Roughly the excerpt's length in characters; cuts fall on word boundaries.
        mark: Optional ``(before, after)`` strings wrapped around every matching word.

    Returns:
        The excerpt, whitespace collapsed, with "…" where text was cut. Without a match, the start.
    """
    wanted = set(tokenize(query))
    if text.isascii():
        first = first_match(text, wanted)
        hit = None
        if first is not None:
            hit = next(islice(_ASCII_WORD.finditer(text), first, None)).start()
        start, end = _window(len(text), hit, width) if len(text) > width else (0, len(text))
        spans = _ascii_spans(text, start, end) if (len(text) > width or mark is not None) else []
    else:
        every = word_spans(text)
        found = next((s for s in every if stem(s[2]) in wanted), None)
        start, end = _window(len(text), found[0] if found else None, width) if len(text) > width \
            else (0, len(text))
        spans = [s for s in every if s[0] >= start and s[1] <= end]
    if len(text) > width and spans:
        start = spans[0][0] if start > 0 else 0
        end = spans[-1][1] if end < len(text) else end
    pieces, cursor = [], start
    if mark is not None:
        for s_start, s_end, word in spans:
            if s_start >= start and s_end <= end and stem(word) in wanted:
                pieces += [text[cursor:s_start], mark[0], text[s_start:s_end], mark[1]]
                cursor = s_end
    pieces.append(text[cursor:end])
    excerpt = _SPACES.sub(" ", "".join(pieces)).strip()
    return ("…" if start > 0 else "") + excerpt + ("…" if end < len(text) else "")
