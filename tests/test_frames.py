"""Analysis exports (agentlab/frames.py): each frame's columns and values on small hand-built trees."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentlab.agent._agent import Agent, get_agent
from agentlab.chat._usage import Usage, record_usage
from agentlab.context._tokens import JS_WHITESPACE, estimate_message_tokens, estimate_string_tokens
from agentlab.session._manager import SessionManager
from agentlab.session._session import Session
from agentlab.session.duckdb import _frames as frames
from agentlab.session.duckdb._frame_columns import string_tokens

MESSAGE_COLUMNS = ["session_id", "seq", "id", "parent_id", "role", "created_at", "depth", "branch_id", "is_leaf",
                   "on_current_branch", "n_parts", "part_kinds", "text", "tokens", "covered_by_compaction"]


def text(mid: str, role: str, words: str, **extra) -> dict:
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": words}], **extra}


@pytest.fixture
def agent(tmp_path):
    a = get_agent(Agent, "frames", root=tmp_path)
    yield a
    a.close()


@pytest.fixture
def tree(agent):
    """u1 -> a1 -> t1 -> {a2 (older), a2b -> u3 (current)}; overlay X covers a1..t1, overlay Y covers a2 only."""
    s = Session(agent)
    s.append_message(text("u1", "user", "Hello world"))
    s.append_message({"id": "a1", "role": "assistant", "parts": [
        {"type": "thinking", "thinking": "let me look", "signature": "sig"},
        {"type": "text", "text": "Looking it up"},
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "weather", "n": 1.5}}]})
    s.append_message({"id": "t1", "role": "user", "parts": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny 😀"}]})
    s.append_message(text("a2", "assistant", "It is sunny."))
    s.append_message(text("a2b", "assistant", "Sunny,\u00a0warm."), parent_id="t1")
    s.append_message(text("u3", "user", "thanks"))
    x = s.add_compaction("tool chatter", "a1", "t1")
    y = s.add_compaction("old reply", "a2", "a2")
    return s, x, y


def frame(session, name="messages_df"):
    return getattr(session, name)().set_index("id") if name == "messages_df" else getattr(session, name)()


class TestMessagesFrame:
    def test_has_one_row_per_message_with_the_documented_columns(self, tree):
        s, _, _ = tree
        df = s.messages_df()
        assert list(df.columns) == MESSAGE_COLUMNS
        assert list(df["id"]) == ["u1", "a1", "t1", "a2", "a2b", "u3"]
        assert list(df["seq"]) == sorted(df["seq"])

    def test_tree_columns_follow_the_parent_pointers(self, tree):
        df = frame(tree[0])
        assert df["depth"].to_dict() == {"u1": 0, "a1": 1, "t1": 2, "a2": 3, "a2b": 3, "u3": 4}
        # a branch continues through the oldest child; the younger sibling a2b starts its own
        assert df["branch_id"].to_dict() == {"u1": "u1", "a1": "u1", "t1": "u1", "a2": "u1", "a2b": "a2b",
                                             "u3": "a2b"}
        assert df.index[df["is_leaf"]].tolist() == ["a2", "u3"]
        assert df.index[df["on_current_branch"]].tolist() == ["u1", "a1", "t1", "a2b", "u3"]
        assert df.loc["u1", "parent_id"] is None or df["parent_id"].isna()["u1"]

    def test_parts_text_and_tokens_match_the_message_functions(self, tree):
        s, _, _ = tree
        df = frame(s)
        assert df.loc["a1", "n_parts"] == 3
        assert list(df.loc["a1", "part_kinds"]) == ["thinking", "text", "tool_use"]
        assert df.loc["a1", "text"] == "Looking it up"
        assert df.loc["t1", "text"] == ""
        for mid in df.index:
            assert df.loc[mid, "tokens"] == estimate_message_tokens([s.get_message(mid)]), mid

    def test_covered_by_compaction_follows_the_overlay_rule(self, tree):
        _, x, y = tree
        covered = frame(tree[0])["covered_by_compaction"].to_dict()
        assert {k: (v if isinstance(v, str) else None) for k, v in covered.items()} == {
            "u1": None, "a1": x.id, "t1": x.id, "a2": y.id, "a2b": None, "u3": None}

    def test_a_fork_shows_its_shared_path_and_its_own_rows(self, tree, agent):
        _s, _x, _ = tree
        info = SessionManager(agent).fork("", "a1", "what if")
        fork = Session(agent, info.id)
        fork.append_message(text("f1", "user", "another question"))
        df = frame(fork)
        assert df.index.tolist() == ["u1", "a1", "f1"]
        assert df["session_id"].tolist() == ["", "", info.id]
        assert df["depth"].tolist() == [0, 1, 2]
        assert df["branch_id"].tolist() == ["u1", "u1", "u1"]
        assert df["is_leaf"].tolist() == [False, False, True]
        assert df["on_current_branch"].all()
        assert df["covered_by_compaction"].isna().all()  # overlay X ends at t1, which is not on the fork's path

    def test_the_agent_frame_lists_every_stored_row_once(self, tree, agent):
        info = SessionManager(agent).fork("", "a1", "what if")
        Session(agent, info.id).append_message(text("f1", "user", "another question"))
        df = frames.frame_to_pandas(frames.messages(agent)).set_index("id")  # a plain Agent has no messages_df
        assert df.index.tolist() == ["u1", "a1", "t1", "a2", "a2b", "u3", "f1"]
        assert df.loc["f1", "depth"] == 2 and df.loc["f1", "session_id"] == info.id
        assert df.loc["u3", "on_current_branch"] and not df.loc["a2", "on_current_branch"]

    def test_the_arrow_variant_returns_the_same_rows_without_pandas(self, tree):
        s, _, _ = tree
        table = s.messages_df.arrow()
        assert isinstance(table, pa.Table)
        assert table.column_names == MESSAGE_COLUMNS
        assert table.column("id").to_pylist() == s.messages_df()["id"].tolist()

    def test_an_empty_session_gives_an_empty_frame_with_the_columns(self, agent):
        df = Session(agent, "nobody").messages_df()
        assert list(df.columns) == MESSAGE_COLUMNS and len(df) == 0


ODD_PARTS: list[dict[str, Any]] = [
    {"type": "reasoning", "reasoning": "hmm"},
    {"type": "tool-search", "toolCallId": "c1", "input": {"q": 1}, "output": {"hits": [1, 2.0]}},
    {"type": "dynamic-tool", "toolCallId": "c2", "toolName": "x", "input": "raw", "result": None},
    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "block"}], "is_error": True},
    {"type": "tool_use", "id": "t", "name": "n", "input": {"2": "digit key first", "a": 1e-7, "b": 10.0}},
    {"type": "tool_use", "id": "t", "name": "n", "input": 2.0},
    {"type": "tool_result", "tool_use_id": "t", "content": '{"a": 1.0} is a string that looks like JSON'},
    {"type": "tool-x", "toolCallId": "c", "input": -0.5, "output": None, "result": [1e21, 12345678901234567890]},
    {"type": "image", "source": {"type": "base64", "data": "AAAA"}},
    {"type": "redacted_thinking", "data": "xyz"},
    {"type": "custom", "text": None, "result": "ignored because text is present"},
    {"type": "custom", "result": {"nested": True}},
    {"type": "text", "text": "tab\there\u2028line\ufeffbom\x1cfile-sep \U0001F600 emoji"},
]


class TestTokenEstimates:
    @pytest.mark.parametrize("part", ODD_PARTS, ids=[f"{i}-{p['type']}" for i, p in enumerate(ODD_PARTS)])
    def test_every_part_shape_counts_as_the_python_estimate(self, agent, part):
        s = Session(agent)
        message = {"id": "m", "role": "assistant", "parts": [part]}
        s.append_message(message)
        assert s.messages_df()["tokens"].tolist() == [estimate_message_tokens([s.get_message("m")])]

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.one_of(st.none(), st.text(alphabet=st.sampled_from(
        list("ab1.\t\n\r\x0b\x0c\x1c\x1f\x85é“😀") + list(JS_WHITESPACE)), max_size=40)), max_size=30))
    @example([" 1", None])  # a string before a trailing null once lost its last byte
    def test_the_vectorised_string_estimate_equals_the_python_one(self, values):
        assert string_tokens(pa.array(values, pa.string())).tolist() == [estimate_string_tokens(v) for v in values]

    def test_a_sliced_array_is_estimated_from_its_own_bytes(self):
        values = ["word " * 50, "x" * 400, "Hello world", "", "😀😀"]
        assert string_tokens(pa.array(values).slice(1, 3)).tolist() == [100, 3, 0]


class TestBranchesFrame:
    def test_one_row_per_leaf_with_lengths_and_divergence(self, tree):
        df = tree[0].branches_df().set_index("leaf_id")
        assert df.index.tolist() == ["a2", "u3"]
        assert df["branch_id"].to_dict() == {"a2": "u1", "u3": "a2b"}
        assert df["length"].to_dict() == {"a2": 4, "u3": 5}
        assert df["branch_messages"].to_dict() == {"a2": 4, "u3": 2}
        assert df.loc["u3", "diverges_from"] == "t1" and df["diverges_from"].isna()["a2"]
        assert df["is_current"].to_dict() == {"a2": False, "u3": True}

    def test_tokens_are_the_history_estimate_of_each_path(self, tree):
        s, _, _ = tree
        df = s.branches_df().set_index("leaf_id")
        for leaf in ("a2", "u3"):
            assert df.loc[leaf, "tokens"] == estimate_message_tokens(s.get_history(leaf))
            raw = [s.get_message(m) for m in s.tree.path_ids("", leaf)]
            assert df.loc[leaf, "raw_tokens"] == estimate_message_tokens(raw)
        assert df["compactions"].to_dict() == {"a2": 2, "u3": 1}
        assert df["hidden_messages"].to_dict() == {"a2": 3, "u3": 2}
        assert df["compacted"].all()


class TestCompactionsFrame:
    def test_each_overlay_has_its_range_branch_and_whether_it_applies(self, tree):
        _, x, y = tree
        df = tree[0].compactions_df().set_index("id")
        assert df.index.tolist() == [x.id, y.id]
        assert df["kind"].tolist() == ["compaction", "compaction"]
        assert df["from_message_id"].tolist() == ["a1", "a2"] and df["to_message_id"].tolist() == ["t1", "a2"]
        assert df["branch_id"].to_dict() == {x.id: "u1", y.id: "u1"}
        assert df["applied"].to_dict() == {x.id: True, y.id: False}
        assert df["summary_chars"].tolist() == [len("tool chatter"), len("old reply")]
        assert df.loc[x.id, "summary_tokens"] == estimate_message_tokens(
            [{"parts": [{"type": "text", "text": "tool chatter"}]}])

    def test_compact_records_tokens_trigger_and_failed_runs(self, agent):
        s = Session(agent)
        s.append_messages([text(f"m{i}", "user" if i % 2 == 0 else "assistant", f"turn number {i} " * 5)
                           for i in range(8)])
        s.on_compaction(lambda history: {"from_message_id": history[1]["id"], "to_message_id": history[4]["id"],
                                         "summary": "short"})
        done = s.compact()
        s.on_compaction(lambda history: None)
        s.compact()

        def boom(history):
            raise RuntimeError("summarizer down")

        s.on_compaction(boom)
        s.on_compaction_error(lambda exc: None)
        s.compact()
        df = s.compactions_df()
        assert df["kind"].tolist() == ["compaction", "noop", "error"]
        first = df.iloc[0]
        assert first["id"] == done["id"] and first["trigger"] == "manual" and first["messages_covered"] == 4
        assert first["compression_ratio"] == pytest.approx(first["tokens_before"] / first["tokens_after"])
        assert df.iloc[2]["error_type"] == "RuntimeError" and df.iloc[2]["error"] == "summarizer down"
        assert len(s.compactions_df(events=False)) == 1


class TestTokensFrame:
    def test_the_saw_tooth_replays_appends_and_compactions(self, agent):
        s = Session(agent)
        s.on_compaction(lambda h: {"from_message_id": h[0]["id"], "to_message_id": h[-3]["id"], "summary": "gist"})
        s.compact_after(60)
        for i in range(10):
            s.append_message(text(f"m{i}", "user", "one two three four five six seven eight nine ten"))
        df = s.tokens_df()
        assert list(df.columns) == ["step", "seq", "kind", "message_id", "compaction_id", "appends",
                                    "history_tokens", "prompt_tokens", "tokens", "threshold"]
        assert (df["kind"] == "append").sum() == 10
        recorded = s.compactions_df(events=False).set_index("id")
        drops = df[df["kind"] == "compaction"]
        assert len(drops) == len(recorded) > 0
        for _, row in drops.iterrows():
            before = df.iloc[row["step"] - 1]
            assert before["kind"] == "append" and before["tokens"] == recorded.loc[row["compaction_id"],
                                                                                 "tokens_before"]
            assert row["tokens"] == recorded.loc[row["compaction_id"], "tokens_after"] < before["tokens"]
            assert row["appends"] == before["appends"]
        assert df["tokens"].iloc[-1] == s.estimate_tokens()
        assert (df["threshold"] == 60).all()

    def test_tokens_needs_a_session(self, agent):
        with pytest.raises(TypeError, match="Session"):
            frames.tokens(agent)


class TestToolCallsFrame:
    def test_calls_are_joined_with_their_results(self, agent):
        s = Session(agent)
        s.append_message(text("u", "user", "go"))
        s.append_message({"id": "a", "role": "assistant", "parts": [
            {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "x"}},
            {"type": "tool_use", "id": "t2", "name": "fetch", "input": {}},
            {"type": "tool_use", "id": "t3", "name": "never", "input": {"z": 1}}]})
        s.append_message({"id": "r", "role": "user", "metadata": {"tool_durations_ms": {"t1": 12.5}}, "parts": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "found it"},
            {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "404"}],
             "is_error": True}]})
        s.append_message({"id": "sdk", "role": "assistant", "parts": [
            {"type": "tool-weather", "toolCallId": "c1", "state": "output-available", "input": {"city": "Oslo"},
             "output": "rain"},
            {"type": "dynamic-tool", "toolName": "calc", "toolCallId": "c2", "state": "output-error",
             "input": {"x": 1}, "errorText": "division by zero"}]})
        df = s.tool_calls_df().set_index("tool_use_id")
        assert df.index.tolist() == ["t1", "t2", "t3", "c1", "c2"]
        assert df["tool_name"].tolist() == ["search", "fetch", "never", "weather", "calc"]
        assert json.loads(df.loc["t1", "input"]) == {"q": "x"}
        assert df.loc["t1", "result"] == "found it" and json.loads(df.loc["t2", "result"]) == [
            {"type": "text", "text": "404"}]
        assert df["is_error"].tolist()[:2] == [False, True] and df["is_error"].isna()["t3"]
        assert df.loc["t1", "result_message_id"] == "r" and df.loc["t1", "duration_ms"] == 12.5
        assert df["duration_ms"].isna()["t2"]
        assert df.loc["c1", "result"] == "rain" and not df.loc["c1", "is_error"]
        assert df.loc["c2", "is_error"] and df.loc["c2", "error_text"] == "division by zero"


class TestBlocksAndUsageFrames:
    def test_blocks_list_each_configured_block_with_its_size(self, agent):
        s = Session(agent).with_context("memory", description="facts", max_tokens=100)
        s.with_context("rules", type("Fixed", (), {"get": lambda self: "be brief"})())
        s.set_block("memory", "the user likes tea")
        df = s.blocks_df().set_index("label")
        assert df.index.tolist() == ["memory", "rules"]
        assert df["kind"].tolist() == ["writable", "readonly"]
        assert df.loc["memory", "tokens"] == estimate_string_tokens("the user likes tea")
        assert df.loc["memory", "budget_used"] == pytest.approx(df.loc["memory", "tokens"] / 100)
        assert df.loc["memory", "description"] == "facts" and df.loc["rules", "content"] == "be brief"
        assert df["updated_at"].notna()["memory"] and df["updated_at"].isna()["rules"]

    def test_a_session_without_blocks_gives_an_empty_frame(self, agent):
        df = Session(agent).blocks_df()
        assert len(df) == 0 and "tokens" in df.columns

    def test_a_chat_agent_offers_the_agent_frames_as_properties(self, tmp_path):
        from agentlab.chat import ChatAgent

        chat = get_agent(ChatAgent, "chatty", root=tmp_path)
        try:
            record_usage(chat.store, Usage(10, 5, 2, 1, 1), session_id="", model="claude-x", purpose="turn")
            assert chat.usage_df()["input_tokens"].tolist() == [10]
            assert chat.usage_df.arrow().num_rows == 1
            assert chat.messages_df().empty and "session_id" in chat.messages_df().columns
            assert not hasattr(Agent, "messages_df")  # the agent layer knows no frames
        finally:
            chat.close()

    def test_usage_rows_come_from_the_usage_table(self, agent):
        record_usage(agent.store, Usage(10, 5, 2, 1, 1), session_id="", model="claude-x", purpose="turn")
        record_usage(agent.store, Usage(7, 3, 0, 0, 1), session_id="other", purpose="compaction")
        assert frames.usage(agent).column("input_tokens").to_pylist() == [10, 7]
        df = Session(agent).usage_df()
        assert df[["input_tokens", "output_tokens", "cache_read_tokens", "model"]].values.tolist() == [
            [10, 5, 2, "claude-x"]]


class TestTokensPlot:
    def test_the_saw_tooth_has_a_marker_per_compaction_and_the_threshold(self, agent):
        import matplotlib

        matplotlib.use("Agg")
        from agentlab.frames import plot

        s = Session(agent)
        s.on_compaction(lambda h: {"from_message_id": h[0]["id"], "to_message_id": h[-3]["id"], "summary": "gist"})
        s.compact_after(60)
        for i in range(10):
            s.append_message(text(f"m{i}", "user", "one two three four five six seven eight nine ten"))
        figure = plot.tokens(s)
        ax = figure.axes[0]
        line = ax.lines[0]
        assert list(line.get_ydata()) == s.tokens_df()["tokens"].tolist()
        markers = ax.collections[0].get_offsets()
        assert len(markers) == len(s.get_compactions()) > 0
        assert [tuple(map(float, ax.lines[1].get_ydata()))] == [(60.0, 60.0)]
        assert ax.get_xlabel() == "messages appended"
