"""Agent state: lazy initial state, validation, JSON checks, broadcast order, connections."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import pytest

from agentlab import NOT_SET, Agent, get_agent
from agentlab.errors import (
    ConnectionClosedError,
    DiskFullError,
    ReadonlyConnectionError,
    StateNotJSONError,
    StateRejectedError,
)


class Game(Agent):
    initial_state = {"players": [], "round": 0}

    def __init__(self, *args, **kwargs):
        self.events: list[tuple] = []
        super().__init__(*args, **kwargs)

    def validate_state_change(self, next_state, source):
        self.events.append(("validate", next_state))
        if isinstance(next_state, dict) and next_state.get("round", 0) < 0:
            raise ValueError("round cannot be negative")

    def on_state_changed(self, state, source):
        self.events.append(("changed", state, source if isinstance(source, str) else "connection"))


class Plain(Agent):
    pass


class Grumpy(Agent):
    initial_state = 1

    def on_state_changed(self, state, source):
        raise RuntimeError("listener broke")


class TestLazyState:
    def test_initial_state_is_set_through_the_full_path_on_first_access(self, tmp_path):
        game = get_agent(Game, "g", root=tmp_path)
        assert game.events == []  # lazy: nothing happened at open
        assert game.state == {"players": [], "round": 0}
        assert [e[0] for e in game.events] == ["validate", "changed"]
        assert game.sql("SELECT state, source FROM agent_state") == [
            {"state": '{"players":[],"round":0}', "source": "server"}
        ]

    def test_no_initial_state_means_none_and_no_row(self, tmp_path):
        agent = get_agent(Plain, "p", root=tmp_path)
        assert agent.state is None and not agent.has_state
        assert agent.sql("SELECT count(*) AS n FROM agent_state") == [{"n": 0}]

    @pytest.mark.parametrize("value", [0, "", None, False, [], {}])
    def test_falsy_values_are_valid_states(self, tmp_path, value):
        agent = get_agent(Plain, "p", root=tmp_path)
        agent.set_state(value)
        agent.close()
        again = get_agent(Plain, "p", root=tmp_path)
        assert again.has_state and again.state == value

    def test_returned_state_is_a_copy(self, tmp_path):
        game = get_agent(Game, "g", root=tmp_path)
        game.state["players"].append("mallory")
        assert game.state["players"] == []

    def test_unparseable_stored_state_falls_back_to_initial_state(self, tmp_path):
        game = get_agent(Game, "g", root=tmp_path)
        game.set_state({"players": ["a"], "round": 2})
        game.sql("UPDATE agent_state SET state = ?", "{not json")
        game.close()
        again = get_agent(Game, "g", root=tmp_path)
        with pytest.warns(UserWarning, match="not valid JSON"):
            assert again.state == {"players": [], "round": 0}


class TestSetState:
    def test_order_is_validate_persist_broadcast_then_notify(self, tmp_path):
        game = get_agent(Game, "g", root=tmp_path)
        _ = game.state
        game.events.clear()
        seen_at_broadcast = []
        game.connect(on_state=lambda s: seen_at_broadcast.append(game.sql("SELECT state FROM agent_state")[0]["state"]))
        seen_at_broadcast.clear()  # the state frame sent on connect
        game.set_state({"players": ["ann"], "round": 1})
        assert [e[0] for e in game.events] == ["validate", "changed"]
        assert seen_at_broadcast == ['{"players":["ann"],"round":1}']  # persisted before broadcast

    def test_a_rejected_change_stores_and_broadcasts_nothing(self, tmp_path):
        game = get_agent(Game, "g", root=tmp_path)
        game.set_state({"players": ["ann"], "round": 1})
        frames = []
        game.connect(on_message=frames.append)
        frames.clear()
        with pytest.raises(StateRejectedError, match="round cannot be negative") as info:
            game.set_state({"players": [], "round": -1})
        assert isinstance(info.value.__cause__, ValueError)
        assert frames == []
        assert game.state == {"players": ["ann"], "round": 1}
        assert "changed" not in [e[0] for e in game.events[-1:]]

    def test_listener_errors_go_to_on_error_and_never_roll_back(self, tmp_path):
        agent = get_agent(Grumpy, "g", root=tmp_path)
        with pytest.warns(UserWarning, match="listener broke"):
            agent.set_state(5)
        assert agent.state == 5

    @pytest.mark.parametrize(
        ("bad", "path"),
        [
            ({"players": [1, 2, {3}]}, 'state["players"][2]'),
            ({"score": math.nan}, 'state["score"]'),
            ({"score": math.inf}, 'state["score"]'),
            ({"when": object()}, 'state["when"]'),
            ({1: "int key"}, "state[1]"),
            ((1, 2), "state"),
            ({"s": "bad \ud800 surrogate"}, 'state["s"]'),
        ],
    )
    def test_non_json_state_names_the_path_and_keeps_the_old_state(self, tmp_path, bad, path):
        game = get_agent(Game, "g", root=tmp_path)
        game.set_state({"players": ["ann"], "round": 1})
        with pytest.raises(StateNotJSONError) as info:
            game.set_state(bad)
        assert info.value.path == path
        assert game.state == {"players": ["ann"], "round": 1}

    def test_circular_state_is_refused(self, tmp_path):
        agent = get_agent(Plain, "p", root=tmp_path)
        loop: dict = {"a": []}
        loop["a"].append(loop)
        with pytest.raises(StateNotJSONError, match="cycle") as info:
            agent.set_state(loop)
        assert info.value.path == 'state["a"][0]'
        assert not agent.has_state

    def test_shared_but_acyclic_values_are_fine(self, tmp_path):
        agent = get_agent(Plain, "p", root=tmp_path)
        shared = [1, 2]
        agent.set_state({"a": shared, "b": shared})
        assert agent.state == {"a": [1, 2], "b": [1, 2]}

    def test_very_deep_nesting_is_a_typed_error_not_a_crash(self, tmp_path):
        agent = get_agent(Plain, "p", root=tmp_path)
        deep: list = []
        for _ in range(10_000):
            deep = [deep]
        with pytest.raises(StateNotJSONError, match="nesting"):
            agent.set_state(deep)

    def test_merge_and_reset(self, tmp_path):
        game = get_agent(Game, "g", root=tmp_path)
        assert game.merge_state({"round": 3}) == {"players": [], "round": 3}
        game.reset_state()
        assert game.state == {"players": [], "round": 0}
        plain = get_agent(Plain, "p", root=tmp_path)
        plain.merge_state({"a": 1})
        plain.reset_state()
        assert plain.state is None and not plain.has_state
        assert Plain.initial_state is NOT_SET

    def test_merge_needs_a_dict_state(self, tmp_path):
        agent = get_agent(Plain, "p", root=tmp_path)
        agent.set_state([1])
        with pytest.raises(Exception, match="needs a dict state"):
            agent.merge_state({"a": 1})
        assert agent.state == [1]


class TestConnections:
    def test_connect_sends_identity_then_state(self, tmp_path):
        game = get_agent(Game, "g", root=tmp_path)
        frames = []
        game.connect(on_message=frames.append)
        assert frames == [
            {"name": "g", "agent": "game", "type": "cf_agent_identity", "stateFollows": True},
            {"state": {"players": [], "round": 0}, "type": "cf_agent_state"},
        ]

    def test_identity_says_no_state_follows_when_there_is_none(self, tmp_path):
        frames = []
        get_agent(Plain, "p", root=tmp_path).connect(on_message=frames.append)
        assert frames == [{"name": "p", "agent": "plain", "type": "cf_agent_identity"}]

    def test_changes_reach_every_connection_except_the_source(self, tmp_path):
        game = get_agent(Game, "g", root=tmp_path)
        a_seen, b_seen = [], []
        a = game.connect(on_state=a_seen.append)
        game.connect(on_state=b_seen.append)
        a_seen.clear(), b_seen.clear()
        a.set_state({"players": ["a"], "round": 1})
        assert a_seen == [] and b_seen == [{"players": ["a"], "round": 1}]
        assert game.events[-1] == ("changed", {"players": ["a"], "round": 1}, "connection")
        game.set_state({"players": [], "round": 2})
        assert a_seen == [{"players": [], "round": 2}]

    def test_readonly_connection_cannot_write(self, tmp_path):
        game = get_agent(Game, "g", root=tmp_path)
        ro = game.connect(readonly=True)
        with pytest.raises(ReadonlyConnectionError, match="Connection is readonly"):
            ro.set_state({"players": ["x"], "round": 9})
        assert game.state == {"players": [], "round": 0}

    def test_protocol_frames_from_a_client(self, tmp_path):
        """Spec case 20: a rejected client update gets an error frame; a valid one is stored."""
        game = get_agent(Game, "g", root=tmp_path)
        frames = []
        client = game.connect(on_message=frames.append)
        frames.clear()
        with pytest.warns(UserWarning, match="round cannot be negative"):
            client.receive({"type": "cf_agent_state", "state": {"players": [], "round": -1}})
        assert frames == [{"type": "cf_agent_state_error", "error": "State update rejected"}]
        assert game.state == {"players": [], "round": 0}
        frames.clear()
        client.receive({"type": "cf_agent_state", "state": {"players": ["z"], "round": 1}})
        assert frames == [] and game.state == {"players": ["z"], "round": 1}
        ro_frames = []
        ro = game.connect(readonly=True, on_message=ro_frames.append)
        ro_frames.clear()
        ro.receive({"type": "cf_agent_state", "state": {"players": [], "round": 5}})
        assert ro_frames == [{"type": "cf_agent_state_error", "error": "Connection is readonly"}]
        assert game.state == {"players": ["z"], "round": 1}

    def test_closed_connections_get_nothing_and_cannot_write(self, tmp_path):
        game = get_agent(Game, "g", root=tmp_path)
        seen = []
        conn = game.connect(on_state=seen.append)
        seen.clear()
        conn.close()
        game.set_state({"players": [], "round": 4})
        assert seen == [] and conn not in game.connections
        with pytest.raises(ConnectionClosedError):
            conn.set_state({"players": [], "round": 5})

    def test_a_broken_client_callback_does_not_break_the_writer(self, tmp_path):
        game = get_agent(Game, "g", root=tmp_path)
        _ = game.state

        def broken(state):
            raise RuntimeError("widget crashed")

        with pytest.warns(UserWarning, match="widget crashed"):
            game.connect(on_state=broken)  # the initial state frame already fails
        with pytest.warns(UserWarning, match="widget crashed"):
            game.set_state({"players": [], "round": 7})
        assert game.state["round"] == 7


class TestDurability:
    def test_state_survives_a_restart_in_another_process(self, tmp_path):
        game = get_agent(Game, "persist", root=tmp_path)
        game.set_state({"players": ["ann", "bob"], "round": 12})
        game.close()
        code = textwrap.dedent(
            """
            import json, sys
            from agentlab import Agent, get_agent
            class Game(Agent):
                initial_state = {"players": [], "round": 0}
            g = get_agent(Game, "persist", root=sys.argv[1])
            print(json.dumps(g.state))
            g.set_state({"players": ["carol"], "round": 13})
            """
        )
        result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
        assert result.stdout.strip() == '{"players": ["ann", "bob"], "round": 12}', result.stderr
        assert get_agent(Game, "persist", root=tmp_path).state == {"players": ["carol"], "round": 13}


class TestGroupCommit:
    """defer_state_writes: what a server does, storing several changes as one before any frame announces them."""

    def _stored(self, agent):
        return agent.store.conn.execute("SELECT state FROM agent_state").fetchall()  # the file, past any hold

    def test_changes_are_held_until_the_next_statement_and_stored_as_one(self, tmp_path):
        agent = get_agent(Plain, "grouped", root=tmp_path)
        agent.set_state({"n": 0})
        writes = []
        agent.defer_state_writes(writes.append)
        for n in range(1, 6):
            agent.set_state({"n": n})
        assert agent.state == {"n": 5} and agent.holds_state_write
        assert self._stored(agent) == [('{"n":0}',)] and writes == []
        assert agent.sql("SELECT count(*) AS k FROM agent_state")[0]["k"] == 1  # any statement stores it first
        assert writes == [True] and not agent.holds_state_write
        assert self._stored(agent) == [('{"n":5}',)]

    def test_close_and_write_held_state_store_it(self, tmp_path):
        agent = get_agent(Plain, "closing", root=tmp_path)
        writes = []
        agent.defer_state_writes(writes.append)
        agent.set_state({"n": 1})
        assert agent.write_held_state() and not agent.write_held_state()
        agent.set_state({"n": 2})
        agent.close()
        assert writes == [True, True]
        assert get_agent(Plain, "closing", root=tmp_path).state == {"n": 2}

    def test_a_failed_write_is_reported_and_the_state_read_from_the_file_again(self, tmp_path, monkeypatch):
        import agentlab.agent._agent as agent_module

        agent = get_agent(Plain, "failing", root=tmp_path)
        agent.set_state({"n": 0})
        writes = []
        agent.defer_state_writes(writes.append)
        agent.set_state({"n": 1})

        def full(*args):
            raise DiskFullError(str(agent.path), "committing a write")

        monkeypatch.setattr(agent_module, "write_state_row", full)  # as a full disk would answer
        with pytest.raises(DiskFullError):
            agent.write_held_state()
        monkeypatch.undo()
        assert writes == [False] and agent.state == {"n": 0} and not agent.holds_state_write

    def test_writing_one_by_one_again_stores_what_is_held(self, tmp_path):
        agent = get_agent(Plain, "undeferred", root=tmp_path)
        agent.defer_state_writes(lambda stored: None)
        agent.set_state({"n": 3})
        agent.defer_state_writes(None)
        assert self._stored(agent) == [('{"n":3}',)]
        agent.set_state({"n": 4})
        assert self._stored(agent) == [('{"n":4}',)]


def test_rpc_results_get_the_state_check() -> None:
    """One JSON check: what state refuses, an RPC result is refused for too (a lone surrogate included)."""
    from agentlab.agent import check_json
    from agentlab.errors import InvalidArgumentError
    from agentlab.serve.rpc import check_json as check_result

    for bad in ({"s": "bad \ud800 surrogate"}, [float("nan")], {1: "key"}, (1, 2)):
        with pytest.raises(StateNotJSONError):
            check_json(bad)
        with pytest.raises(InvalidArgumentError, match="result is not JSON"):
            check_result(bad, "result")
    check_result({"fine": ["é", 1, 2.5, None, True]}, "result")
