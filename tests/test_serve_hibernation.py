"""Hibernating served agents: the database and caches released while the sockets stay open, woken by the next turn.

Real servers on 127.0.0.1 (uvicorn on a background thread), real sockets, real DuckDB files. A bare websockets
client is used where the exact frames a client receives matter (nothing may arrive on wake).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from typing import ClassVar

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from agentlab import Agent, get_agent, rpc
from agentlab.agent import Connection
from agentlab.agent._agent import live_agent
from agentlab.agent._connection import current_connection
from agentlab.errors import AgentlabError, InvalidArgumentError, StateNotJSONError
from agentlab.serve import AgentClient, start
from agentlab.store._naming import agent_path

STARTS: dict[str, int] = {}


class Sleeper(Agent):
    """Counts its own starts (on_start runs again on every wake) and keeps attachments on its connections."""

    initial_state: ClassVar[dict] = {"count": 0}

    def on_start(self):
        STARTS[self.name] = STARTS.get(self.name, 0) + 1
        self.seen_errors = []

    def on_error(self, error):
        self.seen_errors.append(error)

    def should_connection_be_readonly(self, connection, request):
        return request.query.get("readonly") == "1"

    def should_send_protocol_messages(self, connection, request):
        return request.query.get("protocol") != "0"

    def on_request(self, request):
        return {"state": self.state, "starts": STARTS[self.name]}

    @rpc()
    def add(self, by=1):
        self.set_state({"count": self.state["count"] + by})
        return self.state["count"]

    @rpc()
    def remember(self, value):
        connection = current_connection()
        connection.serialize_attachment(value)
        return connection.id

    @rpc()
    def recall(self):
        connection = current_connection()
        return {"id": connection.id, "attachment": connection.deserialize_attachment()}


class Listener(Sleeper):
    """Overrides on_close, so a client leaving wakes it (as upstream wakes a Durable Object for webSocketClose)."""

    def on_close(self, connection, code, reason):
        self.set_state({**self.state, "closed": code})


class Awake(Sleeper):
    hibernate_when_idle = False


@pytest.fixture
def serve(tmp_path):
    handles = []

    def _start(*classes, **options):
        options.setdefault("root", tmp_path / "served")
        handle = start(list(classes) or [Sleeper], **options)
        handles.append(handle)
        return handle

    yield _start
    for handle in handles:
        handle.stop()


def _ws(handle, cls, name, query=""):
    url = handle.agent_url(cls, name, websocket=True) + query
    return connect(url, open_timeout=10)


def _frames(ws, count, timeout=5.0):
    return [json.loads(ws.recv(timeout=timeout)) for _ in range(count)]


def _call(ws, method, *args, call_id="c1"):
    ws.send(json.dumps({"type": "rpc", "id": call_id, "method": method, "args": list(args)}))
    while True:
        frame = json.loads(ws.recv(timeout=10))
        if frame.get("type") == "rpc" and frame.get("id") == call_id:
            return frame


def _nothing_arrives(ws, seconds=0.3):
    with pytest.raises(TimeoutError):
        ws.recv(timeout=seconds)


def _wait(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


class TestHibernation:
    def test_an_agent_with_idle_clients_hibernates_and_its_file_is_released(self, serve):
        handle = serve(hibernate_after=0.2)
        with AgentClient(handle.url, Sleeper, "idle") as client:
            assert client.call("add", 2) == 2
            assert _wait(lambda: ("sleeper", "idle") in handle.app.hibernated)
            assert live_agent(Sleeper, "idle", root=handle.app.root) is None  # no DuckDB database held
            assert ("sleeper", "idle") not in handle.app.agents
            assert not client.closed and handle.stats()["sockets"] == 1
            assert client.call("add", 1) == 3  # the next frame wakes it, state intact
        assert handle.stats()["hibernations"] >= 1 and handle.stats()["wakes"] >= 1

    def test_waking_sends_the_client_nothing_and_runs_on_start_again(self, serve):
        handle = serve()
        with _ws(handle, Sleeper, "quiet") as ws:
            identity, state, mcp = _frames(ws, 3)
            assert (identity["type"], state, mcp["type"]) == ("cf_agent_identity",
                                                             {"state": {"count": 0}, "type": "cf_agent_state"},
                                                             "cf_agent_mcp_servers")
            first = handle.app.agents[("sleeper", "quiet")]
            starts = STARTS["quiet"]
            assert handle.hibernate(Sleeper, "quiet")
            assert first.closed
            assert _call(ws, "add", 5)["result"] == 5  # the answer is the first and only frame after the wake
            _nothing_arrives(ws)
            assert STARTS["quiet"] == starts + 1
            assert handle.app.agents[("sleeper", "quiet")] is not first

    def test_the_connection_keeps_its_id_and_attachment_across_a_wake(self, serve):
        handle = serve()
        with _ws(handle, Sleeper, "attached") as ws:
            _frames(ws, 3)
            connection_id = _call(ws, "remember", {"user": "ada", "tags": ["a", "b"]})["result"]
            assert handle.hibernate(Sleeper, "attached")
            assert _call(ws, "recall", call_id="c2")["result"] == {"id": connection_id,
                                                                  "attachment": {"user": "ada", "tags": ["a", "b"]}}

    def test_readonly_and_protocol_flags_survive_a_wake(self, serve):
        handle = serve()
        with (_ws(handle, Sleeper, "flags", "?readonly=1") as reader, _ws(handle, Sleeper, "flags", "?protocol=0")
              as silent, _ws(handle, Sleeper, "flags") as writer):
            _frames(reader, 3)
            _frames(writer, 3)
            assert handle.hibernate(Sleeper, "flags")
            reader.send(json.dumps({"type": "cf_agent_state", "state": {"count": 9}}))
            assert _frames(reader, 1) == [{"type": "cf_agent_state_error", "error": "Connection is readonly"}]
            writer.send(json.dumps({"type": "cf_agent_state", "state": {"count": 4}}))
            assert _frames(reader, 1) == [{"state": {"count": 4}, "type": "cf_agent_state"}]
            _nothing_arrives(writer)  # never echoed to its sender, asleep or awake
            _nothing_arrives(silent)  # no protocol frames, before or after
        assert get_agent(Sleeper, "flags", root=handle.app.root).state == {"count": 4}

    def test_a_broadcast_after_a_wake_reaches_every_adopted_client(self, serve):
        handle = serve()
        clients = [AgentClient(handle.url, Sleeper, "room") for _ in range(3)]
        try:
            assert handle.hibernate(Sleeper, "room")
            clients[0].set_state({"count": 7})
            for client in clients[1:]:
                assert client.wait_for(lambda c: c.state == {"count": 7})
        finally:
            for client in clients:
                client.close()

    def test_http_and_a_new_client_wake_it_too(self, serve):
        handle = serve()
        with AgentClient(handle.url, Sleeper, "door") as old:
            old.call("add", 1)
            assert handle.hibernate(Sleeper, "door")
            with urllib.request.urlopen(handle.agent_url(Sleeper, "door"), timeout=10) as response:
                body = json.loads(response.read())
            assert body["state"] == {"count": 1}
            assert handle.hibernate(Sleeper, "door")
            with AgentClient(handle.url, Sleeper, "door") as new:
                assert new.state == {"count": 1}
                new.set_state({"count": 2})
                assert old.wait_for(lambda c: c.state == {"count": 2})


class TestWhatStaysAwake:
    def test_an_agent_with_an_in_process_connection_does_not_hibernate(self, serve):
        handle = serve()
        with AgentClient(handle.url, Sleeper, "watched") as client:
            client.call("add", 1)
            agent = handle.app.agents[("sleeper", "watched")]
            widget = agent.connect()
            assert not handle.hibernate(Sleeper, "watched")
            assert not agent.closed
            widget.close()
            assert handle.hibernate(Sleeper, "watched")

    def test_a_class_can_opt_out_and_an_agent_without_sockets_is_not_hibernated(self, serve):
        handle = serve(Sleeper, Awake, hibernate_after=0.1)
        with AgentClient(handle.url, Awake, "insomniac") as client:
            client.call("add", 1)
            time.sleep(0.5)
            assert not handle.hibernate(Awake, "insomniac")
            assert ("awake", "insomniac") in handle.app.agents
        urllib.request.urlopen(handle.agent_url(Sleeper, "socketless"), timeout=10).read()
        time.sleep(0.5)
        assert ("sleeper", "socketless") in handle.app.agents  # idle_timeout's business, not hibernation's

    def test_the_server_never_hibernates_an_agent_the_notebook_opened(self, serve, tmp_path):
        mine = get_agent(Sleeper, "mine", root=tmp_path / "served")
        handle = serve(hibernate_after=0.1)
        with AgentClient(handle.url, Sleeper, "mine") as client:
            client.call("add", 1)
            time.sleep(0.5)
            assert not handle.hibernate(Sleeper, "mine")
            assert not mine.closed


class TestClosingWhileHibernated:
    def test_a_client_leaving_a_sleeping_agent_does_not_wake_it_without_an_on_close(self, serve):
        handle = serve()
        client = AgentClient(handle.url, Sleeper, "leaver")
        client.call("add", 1)
        assert handle.hibernate(Sleeper, "leaver")
        wakes = handle.stats()["wakes"]
        client.close()
        assert _wait(lambda: handle.stats()["sockets"] == 0)
        time.sleep(0.2)
        assert handle.stats()["wakes"] == wakes

    def test_a_class_with_on_close_is_woken_to_run_it(self, serve):
        handle = serve(Listener)
        client = AgentClient(handle.url, Listener, "listener")
        client.call("add", 1)
        assert handle.hibernate(Listener, "listener")
        client.close()
        assert _wait(lambda: handle.stats()["wakes"] == 1)
        assert _wait(lambda: get_agent(Listener, "listener", root=handle.app.root).state.get("closed") == 1000)

    def test_an_entry_whose_last_client_left_while_asleep_is_forgotten(self, serve):
        handle = serve(hibernate_after=0.1)
        client = AgentClient(handle.url, Sleeper, "gone")
        client.call("add", 1)
        assert _wait(lambda: ("sleeper", "gone") in handle.app.hibernated)
        client.close()
        assert _wait(lambda: handle.stats()["hibernated"] == 0 and handle.stats()["open"] == 0)
        with AgentClient(handle.url, Sleeper, "gone") as again:
            assert again.state == {"count": 1}


class TestWakeFailure:
    def test_a_file_another_process_holds_closes_the_sockets_with_1011_and_loses_nothing(self, serve):
        handle = serve()
        with _ws(handle, Sleeper, "contested") as ws:
            _frames(ws, 3)
            assert _call(ws, "add", 3)["result"] == 3
            assert handle.hibernate(Sleeper, "contested")
            path = agent_path("Sleeper", "contested", handle.app.root)
            holder = subprocess.Popen(
                [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', "
                 "flush=True); time.sleep(60)", str(path)], stdout=subprocess.PIPE, text=True)
            try:
                assert holder.stdout.readline().strip() == "held"
                ws.send(json.dumps({"type": "rpc", "id": "c9", "method": "add", "args": [1]}))
                with pytest.raises(ConnectionClosed) as closed:
                    ws.recv(timeout=10)
                assert closed.value.rcvd.code == 1011 and "could not be woken" in closed.value.rcvd.reason
            finally:
                holder.kill()
                holder.wait()
        with AgentClient(handle.url, Sleeper, "contested") as client:
            assert client.state == {"count": 3}


class TestAttachments:
    def test_an_attachment_is_a_json_copy_and_none_clears_it(self, tmp_path):
        agent = get_agent(Sleeper, "local", root=tmp_path)
        connection = agent.connect()
        value = {"a": [1, 2]}
        connection.serialize_attachment(value)
        value["a"].append(3)
        assert connection.deserialize_attachment() == {"a": [1, 2]}
        copy = connection.deserialize_attachment()
        copy["a"].clear()
        assert connection.deserialize_attachment() == {"a": [1, 2]}
        connection.serialize_attachment(None)
        assert connection.deserialize_attachment() is None

    def test_bad_attachments_are_refused_and_change_nothing(self, tmp_path):
        connection = get_agent(Sleeper, "bad", root=tmp_path).connect()
        connection.serialize_attachment({"kept": True})
        with pytest.raises(StateNotJSONError, match=r'attachment\["when"\]'):
            connection.serialize_attachment({"when": time})
        with pytest.raises(StateNotJSONError, match="lone surrogate"):
            connection.serialize_attachment("\ud800")
        with pytest.raises(InvalidArgumentError, match="at most 16384 bytes"):
            connection.serialize_attachment("x" * 20_000)
        assert connection.deserialize_attachment() == {"kept": True}


class TestAgentLevel:
    def test_hibernate_detaches_served_connections_and_adopt_takes_them_back(self, tmp_path):
        agent = get_agent(Sleeper, "direct", root=tmp_path)
        sent = []
        served = agent.connect(sender=sent.append)
        served.serialize_attachment({"k": 1})
        before = len(sent)
        detached = agent.hibernate()
        assert detached == [served] and served.detached and not served.closed and agent.closed
        again = get_agent(Sleeper, "direct", root=tmp_path)
        again.adopt(detached)
        assert again.connections == [served] and not served.detached and len(sent) == before
        again.set_state({"count": 5})
        assert sent[-1] == {"type": "cf_agent_state", "state": {"count": 5}}
        assert served.deserialize_attachment() == {"k": 1}

    def test_hibernate_refuses_while_an_in_process_connection_is_open(self, tmp_path):
        agent = get_agent(Sleeper, "widget", root=tmp_path)
        agent.connect(sender=lambda frame: None)
        agent.connect()
        with pytest.raises(AgentlabError, match="in-process connection"):
            agent.hibernate()
        assert not agent.closed and len(agent.connections) == 2

    def test_adopt_refuses_connections_it_did_not_detach(self, tmp_path):
        one = get_agent(Sleeper, "one", root=tmp_path)
        two = get_agent(Sleeper, "two", root=tmp_path)
        attached = one.connect(sender=lambda frame: None)
        with pytest.raises(InvalidArgumentError, match="not a connection"):
            two.adopt([attached])
        detached = one.hibernate()
        with pytest.raises(InvalidArgumentError, match="not a connection"):
            two.adopt(detached)
        assert isinstance(detached[0], Connection) and two.connections == []
