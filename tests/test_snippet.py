"""snippet(): the fast path (tokens first, word boundaries only inside the window) gives what a full split gives."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from agentlab.search._snippet import snippet
from agentlab.search._tokenizer import stem, tokenize, word_spans

_SPACES = re.compile(r"\s+")


def reference(text: str, query: str, width: int = 160, mark: tuple[str, str] | None = None) -> str:
    """The snippet from every word's span: the first stem match, a window around it, cuts on word boundaries."""
    wanted = set(tokenize(query))
    spans = word_spans(text)
    hit = next((s for s in spans if stem(s[2]) in wanted), None)
    start, end = 0, len(text)
    if len(text) > width:
        start = 0 if hit is None else max(0, hit[0] - width // 4)
        end = min(len(text), start + width)
        start = max(0, min(start, end - width))
        inside = [s for s in spans if s[0] >= start and s[1] <= end]
        if inside:
            start = inside[0][0] if start > 0 else 0
            end = inside[-1][1] if end < len(text) else end
    pieces, cursor = [], start
    if mark is not None:
        for s_start, s_end, word in spans:
            if s_start >= start and s_end <= end and stem(word) in wanted:
                pieces += [text[cursor:s_start], mark[0], text[s_start:s_end], mark[1]]
                cursor = s_end
    pieces.append(text[cursor:end])
    excerpt = _SPACES.sub(" ", "".join(pieces)).strip()
    return ("…" if start > 0 else "") + excerpt + ("…" if end < len(text) else "")


WORDS = ["deploy", "deploying", "Friday", "fridays", "art", "state-of-the-art", "x", "naïve", "Crème", "42",
         "the", "a", "running", "ran", "it's", "  ", "\n", ",", "brûlée", "ǅemal"]
texts = st.lists(st.sampled_from(WORDS), max_size=80).map(" ".join)
queries = st.lists(st.sampled_from(WORDS), min_size=0, max_size=3).map(" ".join)


class TestSnippetAgreesWithAFullSplit:
    @settings(max_examples=400, deadline=None)
    @given(texts, queries, st.sampled_from([5, 20, 60, 160]), st.sampled_from([None, ("[", "]")]))
    def test_any_text_query_width_and_mark(self, text, query, width, mark):
        assert snippet(text, query, width=width, mark=mark) == reference(text, query, width, mark)

    def test_a_long_ascii_message_cut_around_a_late_match(self):
        text = " ".join(f"w{i}" for i in range(300)) + " deployment friday " + " ".join(f"v{i}" for i in range(50))
        got = snippet(text, "deployments friday", width=40, mark=("<", ">"))
        assert got == reference(text, "deployments friday", 40, ("<", ">"))
        assert "<deployment> <friday>" in got and got.startswith("…") and got.endswith("…")
