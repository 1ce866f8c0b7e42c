"""Memory-policy experiments: replay conversations under named policies and measure what each one keeps.

``replay(dataset, policies)`` appends every turn of every conversation into a session configured by each
:class:`Policy` (compaction settings, summarizer, context blocks, search strategy) and records, at each
question, the prompt the model would see and where each evidence turn is: verbatim, in a summary, reachable by
search, or lost. Memory designs (:mod:`agentlab.experiments.designs`: mem0's facts, Zep's dated facts, Letta's core
and archival memory, compaction plus retrieval, a search tool) are policies too, with what their own retrieval puts
in the prompt measured the same way. ``answer(results)`` asks Claude the questions from those prompts and grades the
answers with a judge (Message Batches by default, cached, with a budget). See :mod:`agentlab.experiments.replaying`,
:mod:`agentlab.experiments.policies` and :mod:`agentlab.experiments.qa`.

This package only re-exports; pandas, the anthropic SDK and the datasets load on first use.
"""

from .core_memory import CoreArchival
from .designs import DESIGN_POLICIES, DESIGNS, WORKING_MEMORY, with_retrieval
from .fact_memory import FactMemory, FactsDesign
from .memory_design import MemoryDesign, PointerSummarizer
from .policies import DEFAULT_POLICIES, POLICIES, Block, Compaction, Policy, Search, get_policy
from .qa import QAResults, answer
from .replaying import replay
from .results import ReplayResults
from .retrieval import Retrieval
from .turn_search import TurnSearch

__all__ = [
    "DEFAULT_POLICIES",
    "DESIGNS",
    "DESIGN_POLICIES",
    "POLICIES",
    "WORKING_MEMORY",
    "Block",
    "Compaction",
    "CoreArchival",
    "FactMemory",
    "FactsDesign",
    "MemoryDesign",
    "PointerSummarizer",
    "Policy",
    "QAResults",
    "ReplayResults",
    "Retrieval",
    "Search",
    "TurnSearch",
    "answer",
    "get_policy",
    "replay",
    "with_retrieval",
]
