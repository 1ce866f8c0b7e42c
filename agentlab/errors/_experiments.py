"""Errors of experiments: memory policies, pricing, budgets, batches."""

from __future__ import annotations

from agentlab.errors._base import AgentlabError

__all__ = ["BatchError", "BudgetExceededError", "ExperimentError", "PricingError", "UnknownPolicyError"]


class ExperimentError(AgentlabError):
    """A memory-policy experiment cannot run as asked (a policy, a dataset point, a request cache)."""


class UnknownPolicyError(ExperimentError, KeyError):
    """No memory policy by this name. ``name`` holds it and the message lists the known ones."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        super().__init__(f"No memory policy named {name!r}; known policies: {', '.join(known)}. "
                         "Pass a Policy object to use your own.")

    def __str__(self) -> str:  # KeyError would print the repr of the whole message
        return str(self.args[0])


class PricingError(ExperimentError):
    """No price is known for a model, so the cost of a run cannot be estimated before it is sent."""


class BudgetExceededError(ExperimentError):
    """Sending the next requests could cost more than the budget allows; nothing more was sent.

    ``spent`` is what this run has already spent (USD), ``needed`` the upper bound of what was about to be sent,
    ``budget`` the cap. Results received so far stay in the request cache, so a re-run does not pay for them again.
    """

    def __init__(self, spent: float, needed: float, budget: float, unsent: int) -> None:
        self.spent, self.needed, self.budget, self.unsent = spent, needed, budget, unsent
        super().__init__(
            f"Budget ${budget:.2f} would be exceeded: ${spent:.2f} spent so far, up to ${needed:.2f} more for the "
            f"next {unsent:,} requests. Nothing more was sent; raise the budget or ask for fewer questions or runs "
            "(answers already received are cached and cost nothing on a re-run)."
        )


class BatchError(ExperimentError):
    """A Message Batch could not be created, polled or read (the API refused it or it never ended)."""
