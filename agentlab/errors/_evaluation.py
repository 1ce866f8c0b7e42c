"""Errors of datasets and evaluations."""

from __future__ import annotations

from agentlab.errors._base import AgentlabError

__all__ = ["DatasetError", "EmptySelectionError", "EvaluationError", "UnknownCategoryError"]


class DatasetError(AgentlabError, ValueError):
    """A dataset file or frame is not in the expected format."""


class EvaluationError(AgentlabError, ValueError):
    """An evaluation cannot run as asked (a selection, a strategy option, saved results)."""


class UnknownCategoryError(EvaluationError):
    """A question category that the dataset does not have; the message lists the ones it has, with their names."""


class EmptySelectionError(EvaluationError):
    """The chosen categories, question ids and limit leave no question with evidence to score."""
