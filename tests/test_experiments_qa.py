"""Answer accuracy with Claude: batches through the real SDK (httpx2.MockTransport), cache, budget, judge, CIs."""

from __future__ import annotations

import pytest

import agentlab.experiments as ex
from agentlab.errors import BudgetExceededError, ExperimentError, PricingError
from agentlab.eval import datasets
from agentlab.experiments.batches import Request, Runner
from agentlab.experiments.cache import RequestCache
from agentlab.experiments.pricing import Price, cost_of, estimate, price_for
from agentlab.experiments.qa import judge_label
from tests.anthropic_batches import BatchClaude
from tests.anthropic_mock import ScriptedClaude, invalid_request, overloaded, reply, text, tool_use

TIGHT = ex.Policy("tight", "Compacts above 300 tokens.", ex.Compaction(300, 80))


def responder(body):
    """Answers 'it says so' unless the memory holds a summary; the judge calls 'it says so' CORRECT."""
    content = body["messages"][-1]["content"]
    said = " ".join(b.get("text", "") for b in content)
    if said.startswith("You are grading"):
        return [text("CORRECT" if "Answer to grade: it says so" in said else "WRONG")]
    return [text("I do not know" if "[Summary of the earlier conversation]" in said else "it says so")]


@pytest.fixture(scope="module")
def replayed():
    dataset = datasets.load_bundled()
    return ex.replay(dataset, ["none", TIGHT], conversations=1, keep_prompts=True, progress=False)


def run_qa(replayed, claude, cache, **options):
    lines = []
    options.setdefault("runs", 2)
    result = ex.answer(replayed, client=claude.client(max_retries=0), cache=cache, poll_interval=0,
                       out=lines.append, sleep=lambda s: None, **options)
    return result, lines


class TestAnswering:
    def test_batches_answer_judge_and_store_everything(self, replayed, tmp_path):
        claude = BatchClaude(responder, polls=2)
        cache = RequestCache(tmp_path / "qa.duckdb")
        result, lines = run_qa(replayed, claude, cache)
        n = len(replayed.per_question)  # 2 policies x questions of one conversation, each with an answer
        assert len(result.answers) == 2 * n
        assert claude.created() == 2  # one batch of answers, one of judges
        assert claude.message_requests() == 0
        # create, polled twice in progress, ended, then the SDK's retrieve before reading results
        answers_batch = [p for m, p in claude.calls if m == "GET" and "/results" not in p][:4]
        assert len(set(answers_batch)) == 1
        accuracy = result.accuracy(None).set_index("policy")
        assert accuracy.loc["none", "accuracy"] == 1.0 and accuracy.loc["tight", "accuracy"] == 0.0
        assert accuracy.loc["none", "runs"] == 2 and accuracy.loc["none", "ci_low"] == 1.0
        frames = cache.frames()
        assert len(frames["requests"]) == 4 * n  # answers and judges, two runs each
        assert len(frames["results"]) == 4 * n and set(frames["results"]["result_type"]) == {"succeeded"}
        assert len(frames["usage"]) == 4 * n and frames["usage"]["batch"].all()
        assert frames["usage"]["cost_usd"].gt(0).all()
        assert result.spent == pytest.approx(frames["usage"]["cost_usd"].sum())
        # the estimate came first, then the batches
        assert lines[0].startswith("answers: ") and lines[1].startswith("judges (at most): ")
        assert lines[2].startswith("batch msgbatch_01") and "sent" in lines[2]

    def test_a_rerun_sends_nothing_and_gives_the_same_labels(self, replayed, tmp_path):
        cache = RequestCache(tmp_path / "qa.duckdb")
        first, _ = run_qa(replayed, BatchClaude(responder), cache)
        again = BatchClaude(responder)
        second, lines = run_qa(replayed, again, cache)
        assert again.calls == []
        assert second.spent == 0.0 and second.answers["cached"].all()
        assert list(second.answers["label"]) == list(first.answers["label"])
        assert "expected $0.00" in lines[0] and lines[0].startswith("answers: 0 requests")

    def test_a_cache_given_as_a_path_is_released_afterwards(self, replayed, tmp_path):
        path = tmp_path / "released.duckdb"
        run_qa(replayed, BatchClaude(responder), str(path), runs=1)
        reopened = RequestCache(path)  # a second store on a file still held would raise StoreInUseError
        assert len(reopened.frames()["usage"]) == 2 * len(replayed.per_question)
        reopened.close()

    def test_the_prompt_is_the_policys_visible_history_and_the_question(self, replayed):
        claude = BatchClaude(responder)
        run_qa(replayed, claude, None, runs=1)
        tight = [r for r in claude.requests if "Summary of the earlier" in r["messages"][0]["content"][0]["text"]]
        assert tight, "the compacting policy's prompt holds its summary"
        body = claude.requests[0]
        transcript, question = body["messages"][0]["content"]
        assert question["text"].startswith("Question: ") and "Priya: " in transcript["text"]
        assert "Priya and Tomas" in body["system"]

    def test_a_partly_failed_batch_retries_transient_errors_only(self, replayed):
        def outcome(custom_id, params, attempt):
            if "system" not in params:
                return "succeeded"  # judge requests
            said = params["messages"][-1]["content"][-1]["text"]
            if "cello" in said.lower():
                return ("errored", "invalid_request_error")
            if attempt == 0 and "dog" in said.lower():
                return ("errored", "api_error")
            return "succeeded"

        claude = BatchClaude(responder, outcome=outcome)
        result, lines = run_qa(replayed, claude, None, runs=1)
        status = result.answers.set_index(["policy", "question"])["answer_status"]
        cello = [k for k in status.index if "cello" in k[1].lower()]
        dog = [k for k in status.index if "dog" in k[1].lower()]
        assert cello and dog
        assert {status[k] for k in cello} == {"errored"}  # final: never resent
        assert {status[k] for k in dog} == {"succeeded"}  # retried in a second answer batch
        assert claude.created() == 3  # answers, the retry, judges
        assert any("errored" in line for line in lines)
        assert result.answers.loc[result.answers["answer_status"] == "errored", "label"].isna().all()
        errored = result.answers[result.answers["answer_status"] == "errored"]
        assert (errored["judge_status"].isna()).all()

    def test_an_expired_batch_is_sent_again_until_the_attempts_run_out(self, replayed):
        expire_first = BatchClaude(responder, outcome=lambda cid, params, attempt: "expired" if attempt == 0
                                   else "succeeded")
        result, lines = run_qa(replayed, expire_first, None, runs=1)
        assert (result.answers["answer_status"] == "succeeded").all()
        assert any("expired" in line for line in lines)
        always = BatchClaude(responder, outcome=lambda cid, params, attempt: "expired")
        result, _ = run_qa(replayed, always, None, runs=1, max_attempts=2)
        assert (result.answers["answer_status"] == "expired").all() and always.created() == 2
        assert result.answers["label"].isna().all()

    def test_an_expired_batch_ends_like_the_api_says(self):
        claude = BatchClaude(responder, polls=0, outcome=lambda cid, params, attempt: "expired")
        client = claude.client(max_retries=0)
        batch = client.messages.batches.create(requests=[{"custom_id": "a", "params": {
            "model": "claude-haiku-5-5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}}])
        ended = client.messages.batches.retrieve(batch.id)
        assert ended.processing_status == "ended" and ended.request_counts.expired == 1
        assert ended.ended_at == ended.expires_at
        assert [r.result.type for r in client.messages.batches.results(batch.id)] == ["expired"]

    def test_direct_mode_uses_messages_create_at_full_price(self, replayed):
        claude = BatchClaude(responder)
        cache = RequestCache(None)
        result, _ = run_qa(replayed, claude, cache, runs=1, mode="direct")
        assert claude.created() == 0 and claude.message_requests() == 2 * len(result.answers)
        assert not cache.frames()["usage"]["batch"].any()
        assert result.accuracy(None).set_index("policy").loc["none", "accuracy"] == 1.0

    def test_direct_mode_retries_an_overload_and_records_a_refusal(self, replayed):
        seen = []

        def flaky(body):
            said = body["messages"][-1]["content"][-1]["text"].lower()
            if "system" in body and "cello" in said:
                return invalid_request("max_tokens: Field required")
            if "system" in body and "dog" in said and not seen:
                seen.append(1)
                return overloaded()
            return responder(body)

        claude = BatchClaude(flaky)
        cache = RequestCache(None)
        result, _ = run_qa(replayed, claude, cache, runs=1, mode="direct")
        status = result.answers.set_index("question")["answer_status"]
        assert {s for q, s in status.items() if "cello" in q.lower()} == {"errored"}
        assert {s for q, s in status.items() if "dog" in q.lower()} == {"succeeded"}
        errors = cache.frames()["results"].query("result_type == 'errored'")["error_type"]
        assert set(errors) == {"invalid_request_error", "overloaded_error"}

    def test_dry_run_sends_nothing(self, replayed):
        claude = BatchClaude(responder)
        result, _ = run_qa(replayed, claude, None, dry_run=True)
        assert claude.calls == [] and result.answers.empty and result.estimate.requests > 0

    def test_a_replay_without_prompts_is_refused(self):
        results = ex.replay(datasets.load_bundled(), ["none"], conversations=1, progress=False)
        with pytest.raises(ExperimentError, match="keep_prompts=True"):
            ex.answer(results, client=object(), cache=None)


class TestBudget:
    def test_actual_costs_below_the_bound_let_the_run_go_on(self, tmp_path):
        requests = [Request.make("answer", {"model": "claude-haiku-5-5", "max_tokens": 1000, "messages": [
            {"role": "user", "content": [{"type": "text", "text": f"question {i} " + "word " * 2000}]}]})
            for i in range(4)]
        one = estimate([requests[0].params], batch=True).upper_usd
        claude = BatchClaude(responder)  # short answers: far below the bound
        runner = Runner(claude.client(max_retries=0), RequestCache(None), budget=one * 2.5, max_batch_requests=1,
                        poll_interval=0, sleep=lambda s: None, out=None)
        assert all(o.status == "succeeded" for o in runner.run(requests).values())
        assert claude.created() == 4 and runner.spent <= one * 2.5  # all four sent, and still within the cap

    def test_an_estimate_over_the_budget_stops_before_anything_is_sent(self, replayed):
        claude = BatchClaude(responder)
        with pytest.raises(BudgetExceededError, match="Nothing more was sent") as raised:
            run_qa(replayed, claude, None, budget=0.0001)
        assert claude.calls == [] and raised.value.spent == 0.0

    def test_the_budget_is_checked_before_each_batch(self, tmp_path):
        cache = RequestCache(tmp_path / "b.duckdb")
        requests = [Request.make("answer", {"model": "claude-haiku-5-5", "max_tokens": 1000, "messages": [
            {"role": "user", "content": [{"type": "text", "text": f"question {i} " + "word " * 2000}]}]})
            for i in range(4)]
        one = estimate([requests[0].params], batch=True)
        tokens_in = int(one.input_tokens * 1.3)

        def expensive(body):  # every answer costs what the upper bound allows
            return reply(text("long answer"), usage={"input_tokens": tokens_in, "output_tokens": 1000})

        claude = BatchClaude(expensive)
        runner = Runner(claude.client(max_retries=0), cache, budget=one.upper_usd * 2.5, max_batch_requests=1,
                        poll_interval=0, sleep=lambda s: None, out=None)
        with pytest.raises(BudgetExceededError) as raised:
            runner.run(requests)
        # two batches fit under the cap; before the third the run finished them, and their actual cost left
        # no room for a third
        assert claude.created() == 2 and raised.value.unsent == 2
        assert runner.spent == pytest.approx(2 * one.upper_usd, rel=0.01) and runner.spent <= one.upper_usd * 2.5
        assert len(cache.frames()["usage"]) == 2
        later = BatchClaude(responder, seed=1)  # another server session: other batch ids
        done = Runner(later.client(max_retries=0), cache, poll_interval=0, sleep=lambda s: None, out=None).run(requests)
        assert all(o.status == "succeeded" for o in done.values())
        assert later.created() == 1 and len(later.requests) == 2  # only what the first run did not receive

    def test_an_interrupted_run_resumes_polling_its_batch(self, tmp_path):
        cache = RequestCache(tmp_path / "r.duckdb")
        requests = [Request.make("answer", {"model": "claude-haiku-5-5", "max_tokens": 10, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hello"}]}]})]
        claude = BatchClaude(responder, polls=5)

        def interrupted(seconds):
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            Runner(claude.client(max_retries=0), cache, poll_interval=1, sleep=interrupted, out=None).run(requests)
        assert claude.created() == 1
        lines = []
        outcome = Runner(claude.client(max_retries=0), cache, poll_interval=0, sleep=lambda s: None,
                         out=lines.append).run(requests)
        assert claude.created() == 1 and outcome[requests[0].key].status == "succeeded"
        assert "resuming" in lines[0]


class TestPricing:
    def test_prices_match_by_prefix_and_an_unknown_model_is_an_error(self):
        assert price_for("claude-haiku-5-5") == Price(0.10, 0.50, 0.50, 2.50)
        assert price_for("claude-sonnet-5-5-20261001").input == 2.0
        assert price_for("claude-opus-5").output == 25.0 and price_for("claude-opus-5-5").output == 20.0
        with pytest.raises(PricingError, match="--price IN,OUT"):
            price_for("gpt-9")
        assert price_for("gpt-9", {"gpt-9": Price(1, 2)}).output == 2

    def test_cost_applies_the_batch_discount_cache_rates_and_the_long_prompt_tier(self):
        usage = {"input_tokens": 1_000_000, "output_tokens": 100_000}
        assert cost_of("claude-sonnet-5-5", usage, batch=False) == pytest.approx(2.0 + 1.0)
        assert cost_of("claude-sonnet-5-5", usage, batch=True) == pytest.approx(1.5)
        cached = {"input_tokens": 0, "cache_read_input_tokens": 1_000_000, "cache_creation_input_tokens": 0,
                  "output_tokens": 0}
        assert cost_of("claude-sonnet-5-5", cached, batch=False) == pytest.approx(0.2)
        small = cost_of("claude-haiku-5-5", {"input_tokens": 50_000, "output_tokens": 0}, batch=False)
        large = cost_of("claude-haiku-5-5", {"input_tokens": 200_000, "output_tokens": 0}, batch=False)
        assert small == pytest.approx(0.005) and large == pytest.approx(0.1)
        assert cost_of("unknown-model", usage, batch=False) is None

    def test_the_upper_bound_covers_max_tokens_and_the_tokenizer_margin(self):
        body = {"model": "claude-sonnet-5-5", "max_tokens": 1000,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "word " * 1000}]}]}
        e = estimate([body], batch=False)
        assert e.requests == 1 and e.max_output_tokens == 1000
        assert e.upper_usd == pytest.approx((e.input_tokens * 1.3 * 2 + 1000 * 10) / 1e6)
        assert e.expected_usd < e.upper_usd


class TestJudge:
    @pytest.mark.parametrize("reply_text, label", [
        ("CORRECT", "CORRECT"), ("wrong", "WRONG"), ("The answer is correct.\n\nCORRECT", "CORRECT"),
        ("Not CORRECT; WRONG", "WRONG"), ("I cannot tell", None), ("INCORRECT", None),
    ])
    def test_the_label_is_the_last_verdict_word(self, reply_text, label):
        assert judge_label(reply_text) == label


class TestClaudeWhileReplaying:
    def test_a_claude_summarizer_is_cached_so_a_rerun_sends_nothing(self, tmp_path):
        dataset = datasets.load_bundled()
        policy = ex.Policy("tight-claude", "Claude summaries.", ex.Compaction(300, 80), summarizer="claude")
        claude = ScriptedClaude(default=reply(text("Priya learns the cello with Mrs. Okafor.")))
        cache = RequestCache(tmp_path / "s.duckdb")
        first = ex.replay(dataset, [policy], conversations=1, client=claude.client(), cache=cache, progress=False)
        sent = len(claude.requests)
        assert sent >= 2 and (first.per_question["compactions"] > 0).all()
        assert set(first.per_question["summary_match"]) == {"fuzzy>=0.6"}
        again = ScriptedClaude()  # no script: any request would fail
        second = ex.replay(dataset, [policy], conversations=1, client=again.client(), cache=cache, progress=False)
        assert again.requests == [] and second.per_question.equals(first.per_question)

    def test_a_memory_writer_fills_the_block_that_the_next_prompt_shows(self):
        dataset = datasets.load_bundled()
        memory = ex.Block("memory", "Facts", 500)
        policy = ex.Policy("remember", "Writes memory.", blocks=(memory,), memory_writer="claude")
        claude = ScriptedClaude(default=reply(tool_use("set_context", {"label": "memory",
                                                                       "content": "Priya plays the cello."})))
        results = ex.replay(dataset, [policy, "none"], conversations=1, client=claude.client(), cache=None,
                            keep_prompts=True, progress=False)
        sessions = len(dataset.conversations[0].sessions)
        assert len(claude.requests) == sessions
        assert [t["name"] for t in claude.requests[0]["tools"]] == ["set_context"]
        context = next(v for k, v in results.contexts.items() if k[0] == "remember")
        assert "Priya plays the cello." in context.system
        rows = results.per_question.groupby("policy")["prompt_tokens"].first()
        assert rows["remember"] > rows["none"]
