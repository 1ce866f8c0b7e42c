"""Memory-policy experiments: replay conversations under named policies and measure what each one keeps.

``replay(dataset, policies)`` appends every turn of every conversation into a session configured by each
:class:`Policy` (compaction settings, summarizer, context blocks, search strategy) and records, at each
question, the prompt the model would see and where each evidence turn is: verbatim, in a summary, reachable by
search, or lost. ``answer(results)`` asks Claude the questions from those prompts and grades the answers with a
judge (Message Batches by default, cached, with a budget). See :mod:`agentlab.experiments.replaying`,
:mod:`agentlab.experiments.policies` and :mod:`agentlab.experiments.qa`.

This package only re-exports; pandas, the anthropic SDK and the datasets load on first use.
"""

from .policies import DEFAULT_POLICIES, POLICIES, Block, Compaction, Policy, Search, get_policy
from .qa import QAResults, answer
from .replaying import replay
from .results import ReplayResults

__all__ = [
    "DEFAULT_POLICIES",
    "POLICIES",
    "Block",
    "Compaction",
    "Policy",
    "QAResults",
    "ReplayResults",
    "Search",
    "answer",
    "get_policy",
    "replay",
]
