"""Answer accuracy with Claude: answer each question from a policy's prompt, then grade it with an LLM judge.

This is the J metric of the memory literature: a model answers from what the memory policy left it, a judge
prompt compares the answer with the gold answer and says CORRECT or WRONG, and accuracy is the share judged
CORRECT. :func:`answer` does it for every (policy, question) of a replay made with ``keep_prompts=True``, and
``runs`` times over (the answers are sampled, so a run differs from the next), which gives accuracy with a 95%
interval over runs (Student's t) next to a bootstrap interval over questions.

The answer request is what the policy's model would see: the policy's system prompt (its context blocks) after
the answering instructions, then one user message holding the visible history as a transcript (each turn as
``Speaker: text`` with a ``(date)`` line when the date changes and ``[shares a photo: caption]`` for images;
a compaction summary as it was written), then, for a memory design, what its retrieval found for this question (the
text its recall put in the prompt), and the question. Speaker names and dates come from the stored messages'
metadata; without them a model could not tell who said what.

Only questions with a gold answer are asked (LoCoMo's adversarial category 5 has none). Before anything is
sent the cost estimate of every answer and every judge request is printed, and a ``budget`` below its upper
bound stops the run before the first request. Every request, response and usage row is stored in the request
cache, so a re-run with the same settings costs nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentlab.errors import BudgetExceededError, ExperimentError, InvalidArgumentError

from .batches import Outcome, Request, Runner
from .cache import RequestCache
from .pricing import Estimate, Price

if TYPE_CHECKING:
    import pandas as pd

    from .results import ReplayResults

__all__ = ["ANSWER_INSTRUCTIONS", "JUDGE_TEMPLATE", "QAResults", "answer", "judge_label", "render_transcript"]

ANSWER_INSTRUCTIONS = (
    "You are the memory of an assistant that has followed a long conversation between {speakers}. The user "
    "message shows the conversation as your memory holds it now: older parts may have been replaced by a "
    "summary. Answer the question at the end from it, in a short phrase. When the question asks when something "
    "happened, answer with a date worked out from the dates shown. If the conversation does not say, answer "
    "that it does not say."
)

JUDGE_TEMPLATE = """You are grading an answer to a question about a long conversation.

Question: {question}
Gold answer: {gold}
Answer to grade: {answer}

The answer is CORRECT when it gives the same fact as the gold answer, even in other words, with more detail, \
or as a date written differently that means the same day, month or year. It is WRONG when it gives a different \
fact, leaves out what the gold answer says, or says the conversation does not tell.

Reply with one word: CORRECT or WRONG."""

_LABEL = re.compile(r"\b(CORRECT|WRONG)\b", re.IGNORECASE)
# Two-sided 95% Student's t quantiles for 1..30 degrees of freedom; 1.96 beyond.
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def judge_label(text: str) -> str | None:
    """The judge's verdict: the last ``CORRECT`` or ``WRONG`` in its reply (any case), or None."""
    found = _LABEL.findall(text or "")
    return found[-1].upper() if found else None


def render_transcript(messages: Iterable[Mapping[str, Any]]) -> str:
    """The visible history of a context (see the module docstring) as transcript text."""
    lines: list[str] = []
    date = None
    for m in messages:
        if m.get("kind") == "summary":
            lines.append(f"[Summary of the earlier conversation]\n{m.get('text', '')}\n[End of summary]")
            continue
        if m.get("date") and m["date"] != date:
            date = m["date"]
            lines.append(f"({date})")
        caption = m.get("caption")
        lines.append(f"{m.get('speaker') or 'unknown'}: {m.get('text', '')}"
                     + (f" [shares a photo: {caption}]" if caption else ""))
    return "\n".join(lines)


def _answer_params(context: Any, question: str, speakers: list[str], model: str, max_tokens: int,
                   extra: Mapping[str, Any], retrieved: str | None = None) -> dict[str, Any]:
    names = " and ".join(speakers) if speakers else "several people"
    system = ANSWER_INSTRUCTIONS.format(speakers=names)
    if context.system:
        system += "\n\n" + context.system
    content = [{"type": "text", "text": render_transcript(context.messages)}]
    if retrieved:
        content.append({"type": "text", "text": retrieved})
    content.append({"type": "text", "text": f"Question: {question}"})
    return {**extra, "model": model, "max_tokens": max_tokens, "system": system,
            "messages": [{"role": "user", "content": content}]}


def _judge_params(question: str, gold: str, reply: str, model: str, max_tokens: int,
                  extra: Mapping[str, Any]) -> dict[str, Any]:
    text = JUDGE_TEMPLATE.format(question=question, gold=gold, answer=reply.strip() or "(no answer)")
    return {**extra, "model": model, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}


@dataclass
class QAResults:
    """What :func:`answer` returns.

    Attributes:
        answers: One row per policy x question x run: ``answer``, ``label`` (``CORRECT``, ``WRONG`` or None),
            ``correct`` (1.0/0.0, NaN when unjudged), ``status`` of the answer and judge requests, and the
            answer's ``input_tokens`` / ``output_tokens`` as the API counted them.
        estimate: The estimate printed before sending (answers plus judges, for what the cache lacked).
        spent: USD this call spent (0 when everything came from the cache).
    """

    answers: pd.DataFrame
    estimate: Estimate
    spent: float = 0.0
    runs: int = 1
    meta: dict[str, Any] = field(default_factory=dict)

    def accuracy(self, by: str | None = "category", *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
        """Accuracy per policy (and ``by`` group, with ``"overall"``): mean over runs with a 95% t interval over
        runs (``ci_low``/``ci_high``, None with one run) and a bootstrap interval over questions."""
        import numpy as np
        import pandas as pd

        frame = self.answers.dropna(subset=["correct"]).copy()
        frame["category"] = frame["category"].astype(str)
        groups = [("overall", frame)]
        if by is not None:
            groups = [(g, frame[frame[by] == g]) for g in sorted(frame[by].unique())] + groups
        rows = []
        rng = np.random.default_rng(seed)
        for policy in dict.fromkeys(self.answers["policy"]):
            for group, part in groups:
                part = part[part["policy"] == policy]
                if part.empty:
                    continue
                per_run = part.groupby("run")["correct"].mean().to_numpy()
                per_question = part.groupby(["conversation_id", "question_id"])["correct"].mean().to_numpy()
                mean = float(per_run.mean())
                low = high = None
                if len(per_run) > 1:
                    half = _T95[min(len(per_run) - 1, 30) - 1] * per_run.std(ddof=1) / math.sqrt(len(per_run))
                    low, high = mean - half, mean + half
                n = len(per_question)
                counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot)
                boot = counts @ per_question / n
                rows.append({"policy": policy, by or "group": group, "runs": len(per_run), "n": n, "accuracy": mean,
                             "ci_low": low, "ci_high": high, "boot_low": float(np.percentile(boot, 2.5)),
                             "boot_high": float(np.percentile(boot, 97.5))})
        return pd.DataFrame(rows)


def answer(
    results: ReplayResults,
    *,
    runs: int = 3,
    model: str | None = None,
    judge_model: str | None = None,
    categories: Iterable[int | str] | None = None,
    client: Any = None,
    cache: Any = "default",
    mode: str = "batch",
    budget: float | None = None,
    prices: Mapping[str, Price] | None = None,
    max_tokens: int = 1024,
    judge_max_tokens: int = 512,
    request_fields: Mapping[str, Any] | None = None,
    dry_run: bool = False,
    poll_interval: float = 30.0,
    out: Callable[[str], Any] | None = print,
    **runner_options: Any,
) -> QAResults:
    """Answer every question of a replay from each policy's prompt with Claude, and judge each answer.

    Args:
        results: A replay made with ``keep_prompts=True``.
        runs: How many times each question is answered (and judged).
        model, judge_model: Model ids (default: the settings' model for both).
        categories: Only these categories (default: every question with a gold answer).
        client: An ``anthropic.Anthropic`` client (default: built from the settings; needs a key unless
            ``dry_run``).
        cache: The request cache (``"default"``, a path, ``None`` for memory, or a RequestCache).
        mode: ``"batch"`` (Message Batches, half price) or ``"direct"``.
        budget: Most USD to spend; checked against the estimate's upper bound before anything is sent, and
            before each batch.
        prices: Extra or replacement prices.
        max_tokens, judge_max_tokens: Output limits (thinking tokens count towards them).
        request_fields: Extra Messages API fields for every request (e.g. ``{"output_config": {"effort": "low"}}``).
        dry_run: Print the estimate and return without sending anything.
        poll_interval: Seconds between batch polls.
        out: Where the estimate and progress lines go.
        runner_options: Passed to :class:`~agentlab.experiments.batches.Runner` (``max_attempts``, ``sleep`` ...).

    Raises:
        ExperimentError: The replay kept no prompts.
        BudgetExceededError: The estimate's upper bound, or the next batch, is over the budget.
        PricingError: A model has no known price.
        NoApiKeyError: No client and no key (unless ``dry_run``).
    """
    if results.contexts is None:
        raise ExperimentError("This replay kept no prompts; run replay(..., keep_prompts=True) before answer().")
    if not isinstance(runs, int) or isinstance(runs, bool) or runs < 1:
        raise InvalidArgumentError(f"runs must be a whole number of 1 or more, not {runs!r}.")
    from agentlab.chat import resolve_settings

    model = str(model or resolve_settings().model)
    judge_model = str(judge_model or model)
    extra = dict(request_fields or {})
    wanted = None if categories is None else {str(c) for c in categories}
    emit = out or (lambda line: None)
    if client is None and not dry_run:
        from agentlab.chat import build_client

        client = build_client(resolve_settings())
    runner = Runner(client, cache, mode=mode, budget=budget, prices=prices, poll_interval=poll_interval, out=out,
                    **runner_options)

    owned = not isinstance(cache, RequestCache)  # a cache opened here is closed again, so others may use it
    try:
        items = []  # (row, answer request)
        for row in results.per_question.itertuples(index=False):
            question = results.questions.get((row.conversation_id, row.question_id))
            if question is None or question.answer is None or (wanted is not None and str(row.category) not in wanted):
                continue
            context = results.contexts[(row.policy, row.conversation_id, row.asked_after)]
            params = _answer_params(context, question.question, results.speakers.get(row.conversation_id, []), model,
                                    max_tokens, extra, getattr(context, "retrieved", {}).get(row.question_id))
            for run in range(runs):
                items.append((row, question, run, Request.make("answer", params, run)))
        answers = [r for *_, r in items]
        # Judge requests depend on the answers. For answers in the cache they are known exactly (and may be cached
        # too); for the others a placeholder answer as long as the answer's whole output limit stands in (the most
        # such a judge request can cost), one per answer: placeholders must not merge into one request.
        known = runner.cache.succeeded(r.key for r in answers)
        placeholder = "x " * max_tokens
        judges_upper = [Request.make("judge", _judge_params(
            q.question, q.answer, Outcome(r.key, "succeeded", known[r.key]).text if r.key in known
            else placeholder + r.key, judge_model, judge_max_tokens, extra), run) for _, q, run, r in items]
        first = runner.estimate(answers)
        second = runner.estimate(judges_upper)
        total = first + second
        emit(f"answers: {first}")
        emit(f"judges (at most): {second}")
        if dry_run:
            return QAResults(_answer_frame([]), total, 0.0, runs, {"model": model, "dry_run": True})
        if budget is not None and total.upper_usd > budget:
            raise BudgetExceededError(0.0, total.upper_usd, budget, total.requests)

        got = runner.run(answers)
        judge_requests: dict[str, Request] = {}
        for _row, question, run, request in items:
            outcome = got[request.key]
            if outcome.status == "succeeded":
                judge_requests[request.key] = Request.make(
                    "judge", _judge_params(question.question, question.answer, outcome.text, judge_model,
                                           judge_max_tokens, extra), run)
        judged = runner.run(judge_requests.values())
        records = []
        for row, question, run, request in items:
            outcome = got[request.key]
            judge = judged.get(judge_requests[request.key].key) if request.key in judge_requests else None
            records.append(_record(row, question, run, outcome, judge))
        frame = _answer_frame(records)
        emit(f"spent ${runner.spent:.2f}; {int(frame['label'].notna().sum()):,} of {len(frame):,} answers judged")
        return QAResults(frame, total, runner.spent, runs, {"model": model, "judge_model": judge_model, "mode": mode})
    finally:
        if owned:
            runner.cache.close()


def _record(row: Any, question: Any, run: int, outcome: Outcome, judge: Outcome | None) -> dict[str, Any]:
    usage = (outcome.message or {}).get("usage") or {}
    label = judge_label(judge.text) if judge is not None and judge.status == "succeeded" else None
    return {
        "policy": row.policy, "conversation_id": row.conversation_id, "question_id": row.question_id,
        "category": row.category, "run": run, "question": question.question, "gold": question.answer,
        "answer": outcome.text if outcome.status == "succeeded" else None, "label": label,
        "correct": None if label is None else float(label == "CORRECT"), "answer_status": outcome.status,
        "judge_status": None if judge is None else judge.status, "prompt_tokens": row.prompt_tokens,
        "input_tokens": usage.get("input_tokens"), "output_tokens": usage.get("output_tokens"),
        "cached": outcome.cached,
    }


def _answer_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    columns = ["policy", "conversation_id", "question_id", "category", "run", "question", "gold", "answer", "label",
               "correct", "answer_status", "judge_status", "prompt_tokens", "input_tokens", "output_tokens", "cached"]
    frame = pd.DataFrame(records, columns=columns)
    frame["correct"] = frame["correct"].astype(float)
    return frame
