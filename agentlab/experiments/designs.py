"""Memory designs side by side: the peers' architectures as named policies, built from agentlab's own parts.

Every design keeps the same working memory, the aggressive rung's: the session compacts above 1,000 estimated
tokens and keeps the newest 250 verbatim (about one dated session of a LoCoMo conversation, "today"). They differ
in what they keep of the rest and in what they put in the prompt when a question comes:

========================  =================================================================================
``search-tool``           Nothing is written. A pointer replaces the older turns, and a search over every stored
                          turn (:mod:`~agentlab.experiments.turn_search`) adds the turns it finds for the question.
``compact-retrieve``      LangMem's pair: a running summary of what compaction hides (the extractive summarizer;
                          LangMem's ``summarize_messages``) plus the same search over the stored turns, its results
                          put in the prompt before the model answers.
``facts``                 mem0: facts extracted from each turn, kept up to date with ADD / UPDATE / DELETE / NONE
                          decisions, and the facts found for the question (:mod:`~agentlab.experiments.fact_memory`).
``dated-facts``           Zep / Graphiti: the same facts, but a replaced or contradicted fact is closed with a date
                          and stays searchable ("no longer true from ...").
``core-archival``         Letta / MemGPT: a core block per person always in the prompt, plus recall (the stored
                          turns) and archival (passages) searched with the question; summaries for what overflows
                          (:mod:`~agentlab.experiments.core_memory`).
========================  =================================================================================

Each writing design has an offline variant (rule-based, deterministic: the name above) and a Claude variant (the
name with ``-claude``: Claude writes the summaries, the facts, or the core and archival memory), which needs
``ANTHROPIC_API_KEY`` and caches every request. ``search-tool`` writes nothing, so it has no Claude variant.

Question-time retrieval is one swappable :class:`~agentlab.experiments.retrieval.Retrieval` (:data:`RETRIEVAL` by
default): ``with_retrieval(policy, Retrieval("eval:default"))`` gives any design another ranking. The default is
chosen from principles, not on LoCoMo (see :data:`RETRIEVAL`).

Invariants: the names here are registered in :data:`agentlab.experiments.policies.POLICIES` when this module is
imported (``import agentlab.experiments`` does it); every design policy compacts, so ``none`` stays the baseline.
"""

from __future__ import annotations

from dataclasses import replace

from .core_memory import CoreArchival
from .fact_memory import FactsDesign
from .memory_design import PointerSummarizer
from .policies import POLICIES, Compaction, Policy
from .retrieval import Retrieval
from .turn_search import TurnSearch

__all__ = ["DESIGNS", "DESIGN_POLICIES", "RETRIEVAL", "WORKING_MEMORY", "with_retrieval"]

WORKING_MEMORY = Compaction(threshold=1_000, tail_token_budget=250)
"""The working memory every design keeps: the aggressive rung's compaction (see the module docstring)."""

RETRIEVAL = Retrieval("hybrid", k=10, neighbours=1)
"""The default question-time retrieval: the agent's hybrid search (MiniLM and BM25 fused by reciprocal rank, its
own untuned defaults), the 10 best (the reference search tool's result count), each stored turn with one neighbour
on either side (a reply read without the turn it answers is often unreadable). Chosen from these principles, not
on LoCoMo; ``benchmarks/designs_tuning.py`` compares other retrievals on LoCoMo's development conversations
(conv-26, -30, -41, -42) only, and ``benchmarks/designs_bench.py`` reports the other six apart."""

_POINTER = PointerSummarizer()


def _design(name: str, description: str, design: object, summarizer: object = "extractive") -> Policy:
    return Policy(name, description, WORKING_MEMORY, summarizer=summarizer, design=design)  # type: ignore[arg-type]


DESIGN_POLICIES: tuple[Policy, ...] = (
    _design("search-tool", "A search tool over the whole history: recent turns, a pointer for the rest, and the "
            "stored turns found for the question. Writes nothing.", TurnSearch(RETRIEVAL), _POINTER),
    _design("compact-retrieve", "Compaction plus retrieval (LangMem): extractive running summary and recent turns, "
            "plus the stored turns found for the question.", TurnSearch(RETRIEVAL)),
    _design("facts", "Extracted facts with add/update/delete (mem0), rule-based: recent turns, a pointer for the "
            "rest, and the facts found for the question.", FactsDesign(RETRIEVAL), _POINTER),
    _design("dated-facts", "Facts with the date they stopped being true (Zep), rule-based: recent turns, a pointer, "
            "and the facts found for the question.", FactsDesign(RETRIEVAL, dated=True), _POINTER),
    _design("core-archival", "Core memory per person plus recall and archival search (Letta/MemGPT), rule-based: "
            "core blocks, extractive summary, recent turns, and what both searches find.", CoreArchival(RETRIEVAL)),
)
"""The offline designs, in the order of the module docstring's table."""

_CLAUDE: tuple[Policy, ...] = (
    _design("compact-retrieve-claude", "compact-retrieve with Claude writing the summaries (needs a key).",
            TurnSearch(RETRIEVAL), "claude"),
    _design("facts-claude", "facts with Claude extracting and updating them, mem0's two phases (needs a key).",
            FactsDesign(RETRIEVAL, writer="claude"), _POINTER),
    _design("dated-facts-claude", "dated-facts with Claude extracting and updating them (needs a key).",
            FactsDesign(RETRIEVAL, writer="claude", dated=True), _POINTER),
    _design("core-archival-claude", "core-archival with Claude editing core memory, inserting archival passages and "
            "writing the summaries (needs a key).", CoreArchival(RETRIEVAL, writer="claude"), "claude"),
)

DESIGNS: tuple[str, ...] = tuple(p.name for p in DESIGN_POLICIES)
"""Names of the offline designs (``agentlab experiment locomo --policies none,search-tool,...``)."""

POLICIES.update({p.name: p for p in (*DESIGN_POLICIES, *_CLAUDE)})


def with_retrieval(policy: Policy | str, retrieval: Retrieval, *, name: str | None = None) -> Policy:
    """The design ``policy`` with another question-time retrieval, named ``name`` (default ``"<name>+<retrieval>"``,
    e.g. ``"facts+eval-default-k10"``).

    Raises:
        UnknownPolicyError: An unknown policy name.
        InvalidArgumentError: The policy has no design.
    """
    from agentlab.errors import InvalidArgumentError

    from .policies import get_policy

    base = get_policy(policy) if isinstance(policy, str) else policy
    if base.design is None:
        raise InvalidArgumentError(f"Policy {base.name!r} has no memory design to give a retrieval to.")
    import re

    design = _copy(base.design, retrieval)
    label = name or re.sub(r"[^A-Za-z0-9_.+-]+", "-", f"{base.name}+{retrieval.describe()}")[:64]
    return replace(base, name=label, design=design)


def _copy(design: object, retrieval: Retrieval) -> object:
    import copy

    clone = copy.copy(design)
    clone.retrieval = retrieval  # type: ignore[attr-defined]
    return clone
