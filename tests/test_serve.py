"""agentlab.serve: routing, hooks, the state protocol and RPC, one owner per root, turns, idle close.

Real servers on 127.0.0.1 (uvicorn on a background thread), real sockets, real DuckDB files. Clients are
agentlab's AgentClient and, where exact bytes matter, a bare websockets client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from websockets.sync.client import connect

from agentlab import Agent, Session, get_agent, rpc
from agentlab.errors import (
    AgentConnectionError,
    RpcError,
    RpcTimeoutError,
    ServeConfigError,
    ServeRootLockedError,
)
from agentlab.serve import AgentClient, app, start


class Recorder(Agent):
    """Keeps what its hooks saw, so tests can assert on it."""

    initial_state = {"count": 0}

    def on_start(self):
        self.errors, self.messages, self.closes, self.connects = [], [], [], []

    def on_error(self, error):
        self.errors.append(error)

    def validate_state_change(self, next_state, source):
        if next_state.get("count", 0) < 0:
            raise ValueError("count must be >= 0")

    def should_connection_be_readonly(self, connection, request):
        return request.query.get("readonly") == "1"

    def should_send_protocol_messages(self, connection, request):
        return request.query.get("protocol") != "0"

    def on_connect(self, connection, request):
        self.connects.append(request.path)

    def on_message(self, connection, message):
        self.messages.append(message)

    def on_close(self, connection, code, reason):
        self.closes.append(code)

    def on_request(self, request):
        if request.path == "/echo":
            return {"method": request.method, "body": request.json(), "query": request.query}
        if request.path == "/text":
            return "plain text"
        if request.path == "/boom":
            raise RuntimeError("the hook broke")
        if request.path == "/state":
            return self.state
        if request.path == "/bump":
            self.set_state({"count": self.state["count"] + 1})
            return self.state
        return None

    @rpc()
    def add(self, by=1):
        self.set_state({"count": self.state["count"] + by})
        return self.state["count"]

    @rpc()
    async def add_later(self, by):
        await asyncio.sleep(0.01)
        self.set_state({"count": self.state["count"] + by})
        return self.state["count"]

    @rpc(streaming=True)
    def countdown(self, stream, start):
        for value in range(start, 0, -1):
            stream.send(value)
        stream.end("liftoff")

    @rpc(streaming=True)
    def breaks_midway(self, stream):
        stream.send(1)
        raise RuntimeError("broke after one chunk")

    @rpc()
    def fails(self):
        raise ValueError("always fails")

    @rpc()
    def not_json(self):
        return {1, 2}

    @rpc()
    def lone_surrogate(self):
        return {"text": "half \ud800 a pair"}  # json.dumps accepts it; no UTF-8 frame can carry it

    @rpc()
    def slow(self, seconds, label):
        began = time.monotonic()
        time.sleep(seconds)
        return [label, began, time.monotonic()]

    def hidden(self):
        return "not marked"


class ChatRoom(Agent):
    pass


@pytest.fixture
def serve(tmp_path):
    handles = []

    def _start(*classes, **options):
        options.setdefault("root", tmp_path / "served")
        handle = start(list(classes) or [Recorder], **options)
        handles.append(handle)
        return handle

    yield _start
    for handle in handles:
        handle.stop()


def _get(url, data=None, method=None, headers=None):
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _served(handle, cls, name):
    return get_agent(cls, name, root=handle.app.root)


class TestRouting:
    def test_an_unknown_class_is_a_404_with_a_json_error_and_no_file(self, serve):
        handle = serve()
        status, headers, body = _get(f"{handle.url}/agents/nobody/x")
        assert status == 404 and headers["content-type"] == "application/json"
        assert "No agent class 'nobody'" in json.loads(body)["error"]
        with pytest.raises(AgentConnectionError) as caught:
            AgentClient(handle.url, "Nobody", "x")
        assert caught.value.status == 404
        assert not (handle.app.root / "nobody").exists()

    def test_a_bad_name_or_a_path_outside_the_prefix_is_a_404(self, serve):
        handle = serve()
        status, _, body = _get(f"{handle.url}/agents/recorder/bad%01name")
        assert status == 404 and "control character" in json.loads(body)["error"]
        status, _, body = _get(f"{handle.url}/elsewhere/recorder/x")
        assert status == 404 and "/agents/<class>/<name>" in json.loads(body)["error"]
        status, _, _ = _get(f"{handle.url}/agents/recorder/%ff")
        assert status == 404
        assert not (handle.app.root / "recorder").exists()

    def test_names_are_percent_decoded_and_cannot_leave_their_folder(self, serve):
        handle = serve()
        for name in ["../../etc/passwd", "user 42 ü", ".."]:
            with AgentClient(handle.url, Recorder, name) as client:
                assert client.name == name
            path = _served(handle, Recorder, name).path
            assert path.parent == handle.app.root / "recorder"
        assert sorted(p.name for p in handle.app.root.iterdir()) == [".agentlab-serve.lock", "recorder"]

    def test_classes_are_reached_by_their_kebab_case_name(self, serve):
        handle = serve(Recorder, ChatRoom)
        with AgentClient(f"{handle.url}/agents/chat-room/lobby", wait=True) as client:
            assert (client.agent, client.name) == ("chat-room", "lobby")
        assert handle.agent_url(ChatRoom, "a b") == f"{handle.url}/agents/chat-room/a%20b"

    def test_classes_that_cannot_be_served_are_refused_up_front(self, tmp_path):
        class Recorder_(Agent):
            pass

        Recorder_.__name__ = "RECORDER"
        with pytest.raises(ServeConfigError, match="both serve at /recorder"):
            app([Recorder, Recorder_], root=tmp_path)
        with pytest.raises(ServeConfigError, match="Only Agent subclasses"):
            app([dict], root=tmp_path)
        with pytest.raises(ServeConfigError, match="at least one"):
            app([], root=tmp_path)
        with pytest.raises(ServeConfigError, match="idle_timeout"):
            app(Recorder, root=tmp_path, idle_timeout=0)


class TestHooks:
    def test_before_hooks_can_refuse_before_the_agent_is_touched(self, serve):
        from starlette.responses import JSONResponse

        seen = []

        def gate(conn, route):
            seen.append((type(conn).__name__, route.class_name, route.name))
            if conn.headers.get("authorization") != "Bearer ok":
                return JSONResponse({"error": "who are you?"}, status_code=401)
            return None

        handle = serve(on_before_connect=gate, on_before_request=gate)
        with pytest.raises(AgentConnectionError) as caught:
            AgentClient(handle.url, Recorder, "secret")
        assert caught.value.status == 401 and "who are you?" in str(caught.value)
        status, _, body = _get(f"{handle.url}/agents/recorder/secret/state")
        assert (status, json.loads(body)) == (401, {"error": "who are you?"})
        assert not (handle.app.root / "recorder").exists()  # refused before any file was opened
        with AgentClient(handle.url, Recorder, "secret", headers={"Authorization": "Bearer ok"}) as client:
            assert client.state == {"count": 0}
        status, _, body = _get(f"{handle.url}/agents/recorder/secret/state", headers={"Authorization": "Bearer ok"})
        assert (status, json.loads(body)) == (200, {"count": 0})
        assert seen[0] == ("WebSocket", "recorder", "secret") and seen[1][0] == "Request"

    def test_async_before_hooks_are_awaited(self, serve):
        from starlette.responses import PlainTextResponse

        async def gate(conn, route):
            await asyncio.sleep(0)
            return PlainTextResponse("closed today", status_code=403) if route.name == "shut" else None

        handle = serve(on_before_request=gate)
        assert _get(f"{handle.url}/agents/recorder/shut")[0] == 403
        assert _get(f"{handle.url}/agents/recorder/open/state")[0] == 200

    def test_on_request_answers_http(self, serve):
        handle = serve()
        base = f"{handle.url}/agents/recorder/web"
        status, headers, body = _get(f"{base}/echo?x=1", data=b'{"a": [1]}', method="POST")
        assert status == 200 and headers["content-type"] == "application/json"
        assert json.loads(body) == {"method": "POST", "body": {"a": [1]}, "query": {"x": "1"}}
        assert _get(f"{base}/text")[2] == b"plain text"
        assert _get(base)[:1] == (404,) and _get(base)[2] == b"Not implemented"  # upstream's default
        status, _, body = _get(f"{base}/boom")
        assert (status, json.loads(body)) == (500, {"error": "the hook broke"})
        assert [str(e) for e in _served(handle, Recorder, "web").errors] == ["the hook broke"]

    def test_an_oversized_request_body_is_refused(self, serve):
        handle = serve(max_message_bytes=1000)
        status, _, body = _get(f"{handle.url}/agents/recorder/web/echo", data=b"x" * 5000, method="POST")
        assert status == 413 and "at most 1000 bytes" in json.loads(body)["error"]

    def test_cors_answers_preflights_and_marks_answers(self, serve):
        handle = serve(cors=True)
        status, headers, _ = _get(f"{handle.url}/agents/recorder/web/state", method="OPTIONS")
        assert status == 200 and headers["access-control-allow-origin"] == "*"
        assert headers["access-control-allow-methods"] == "GET, POST, HEAD, OPTIONS"
        _, headers, _ = _get(f"{handle.url}/agents/recorder/web/state")
        assert headers["access-control-allow-origin"] == "*"

    def test_no_cors_headers_unless_asked(self, serve):
        handle = serve()
        _, headers, _ = _get(f"{handle.url}/agents/recorder/web/state")
        assert "access-control-allow-origin" not in {k.lower() for k in headers}

    def test_connect_message_and_close_hooks_run_with_the_connection(self, serve):
        handle = serve()
        with AgentClient(f"{handle.url}/agents/recorder/hooks/sub/path") as client:
            client.send("hello")
            client.send(b"\x00\x01")
            client.call("add", 0)  # a round trip: the frames before it were handled
        agent = _served(handle, Recorder, "hooks")
        deadline = time.monotonic() + 5
        while not agent.closes and time.monotonic() < deadline:
            time.sleep(0.01)
        assert agent.connects == ["/sub/path"]
        assert agent.messages == ["hello", b"\x00\x01"]
        assert agent.closes == [1000]
        assert agent.connections == []


class TestProtocol:
    def test_connect_frames_are_identity_state_then_mcp(self, serve):
        handle = serve()
        with connect(handle.agent_url(Recorder, "p", websocket=True)) as ws:
            frames = [ws.recv(timeout=5) for _ in range(3)]
        assert frames == [
            '{"name":"p","agent":"recorder","type":"cf_agent_identity","stateFollows":true}',
            '{"state":{"count":0},"type":"cf_agent_state"}',
            '{"mcp":{"prompts":[],"resources":[],"servers":{},"tools":[]},"type":"cf_agent_mcp_servers"}',
        ]

    def test_a_change_reaches_the_others_and_is_not_echoed(self, serve):
        handle = serve()
        a, b = AgentClient(handle.url, Recorder, "s"), AgentClient(handle.url, Recorder, "s")
        seen_by_a = []
        a.on_state = lambda state, source: seen_by_a.append((state, source))
        a.set_state({"count": 3})
        assert b.wait_for(lambda c: c.state == {"count": 3})
        a.call("add", 0)  # a round trip on a: an echo would have arrived before the answer
        assert seen_by_a == [({"count": 3}, "client"), ({"count": 3}, "server")]  # the second from add()
        assert _served(handle, Recorder, "s").state == {"count": 3}

    def test_updates_that_queue_up_are_stored_as_one_and_all_reach_the_others_in_order(self, serve, monkeypatch):
        import agentlab.agent._agent as agent_module

        writes = []
        real = agent_module.write_state_row
        monkeypatch.setattr(agent_module, "write_state_row", lambda *a: (writes.append(a[1]), real(*a)))
        handle = serve()
        url = handle.agent_url(Recorder, "burst", websocket=True)
        with contextlib.ExitStack() as stack:
            senders = [stack.enter_context(connect(url)) for _ in range(8)]
            other = stack.enter_context(connect(url))
            for ws in [*senders, other]:
                [ws.recv(timeout=5) for _ in range(3)]
            writes.clear()
            for i in range(25):  # sent without waiting: turns of eight sockets queue up behind each other
                for k, ws in enumerate(senders):
                    ws.send(json.dumps({"type": "cf_agent_state", "state": {"count": 100 * k + i}}))
            seen = [json.loads(other.recv(timeout=10))["state"]["count"] for _ in range(200)]
        assert sorted(seen) == sorted(100 * k + i for k in range(8) for i in range(25))
        for k in range(8):
            assert [n for n in seen if n // 100 == k] == [100 * k + i for i in range(25)]
        assert len(writes) < 200  # grouped
        assert writes[-1] == json.dumps({"count": seen[-1]}, separators=(",", ":"))  # the last one stored
        assert _served(handle, Recorder, "burst").state == {"count": seen[-1]}

    def test_no_frame_or_answer_announces_a_state_change_before_it_is_stored(self, serve):
        # The stored row is read on the agent's own connection, past the held write, the moment each frame or
        # answer arrives: what a crash at that moment would leave in the file.
        handle = serve()
        url = handle.agent_url(Recorder, "gated", websocket=True)
        agent = None

        def stored():
            return json.loads(agent.store.conn.execute("SELECT state FROM agent_state").fetchone()[0])

        with connect(url) as caller, connect(url) as watcher:
            for ws in (caller, watcher):
                [ws.recv(timeout=5) for _ in range(3)]
            agent = _served(handle, Recorder, "gated")
            for i in range(1, 6):  # set after an await, on the server's event loop
                caller.send(json.dumps({"type": "rpc", "id": f"c{i}", "method": "add_later", "args": [1]}))
                frame = json.loads(watcher.recv(timeout=5))
                assert frame["state"] == {"count": i} and stored() == {"count": i}
            for i in range(6, 9):  # an HTTP answer, while frames of other turns keep arriving
                caller.send(json.dumps({"type": "cf_agent_state", "state": {"count": 1000 * i}}))  # ever larger
                status, _, body = _get(f"{handle.agent_url(Recorder, 'gated')}/bump")
                assert status == 200 and stored()["count"] >= json.loads(body)["count"]

    def test_a_rejected_update_is_reported_to_its_sender_only_and_not_stored(self, serve):
        handle = serve()
        a, b = AgentClient(handle.url, Recorder, "r"), AgentClient(handle.url, Recorder, "r")
        # The connect frames end with the MCP frame, which may still be in flight when the client is ready.
        assert b.wait_for(lambda c: any(f["type"] == "cf_agent_mcp_servers" for f in c.frames))
        frames_before = len(b.frames)
        a.set_state({"count": -5})
        assert a.wait_for(lambda c: c.state_errors == ["State update rejected"])
        b.call("add", 0)
        assert [f["type"] for f in list(b.frames)[frames_before:]] == ["cf_agent_state", "rpc"]  # add()'s only
        assert b.state == {"count": 0}
        agent = _served(handle, Recorder, "r")
        assert agent.state == {"count": 0}
        assert "count must be >= 0" in str(agent.errors[0])

    def test_readonly_clients_cannot_change_state_directly_or_through_methods(self, serve):
        handle = serve()
        reader = AgentClient(handle.url, Recorder, "ro", query={"readonly": "1"})
        reader.set_state({"count": 9})
        assert reader.wait_for(lambda c: c.state_errors == ["Connection is readonly"])
        with pytest.raises(RpcError, match="Connection is readonly"):
            reader.call("add", 1)
        assert _served(handle, Recorder, "ro").state == {"count": 0}
        writer = AgentClient(handle.url, Recorder, "ro")
        assert writer.call("add", 2) == 2
        assert reader.wait_for(lambda c: c.state == {"count": 2})  # readonly clients still hear changes

    def test_a_client_without_protocol_messages_gets_rpc_but_no_state(self, serve):
        handle = serve()
        quiet = AgentClient(handle.url, Recorder, "q", query={"protocol": "0"}, wait=False)
        loud = AgentClient(handle.url, Recorder, "q")
        assert quiet.call("add", 4) == 4
        loud.set_state({"count": 7})
        loud.call("add", 0)  # a round trip: the state frame was handled before the answer came
        assert quiet.call("add", 0) == 7
        assert [f["type"] for f in quiet.frames] == ["rpc", "rpc"]
        assert quiet.name is None and not quiet.has_state

    def test_rpc_answers_plain_async_and_streaming_calls(self, serve):
        handle = serve()
        caller, other = AgentClient(handle.url, Recorder, "c"), AgentClient(handle.url, Recorder, "c")
        assert caller.call("add", 5) == 5
        assert caller.call("add_later", 2) == 7
        assert other.wait_for(lambda c: c.state == {"count": 7})
        chunks = []
        assert caller.call("countdown", 3, on_chunk=chunks.append) == "liftoff"
        assert chunks == [3, 2, 1]

    def test_rpc_errors_come_back_with_upstreams_texts(self, serve):
        handle = serve()
        client = AgentClient(handle.url, Recorder, "e")
        for method, text in [
            ("fails", "always fails"),
            ("nope", "Method nope does not exist"),
            ("hidden", "Method hidden is not callable"),
            ("state", "Method state does not exist"),  # a property is never evaluated for a client
            ("__init__", "Method __init__ is not callable"),
        ]:
            with pytest.raises(RpcError) as caught:
                client.call(method)
            assert str(caught.value) == text and caught.value.method == method
        with pytest.raises(RpcError, match="method's result is not JSON"):
            client.call("not_json")
        with pytest.raises(RpcError, match=r"result is not JSON \(at method's result\[\"text\"\]: .*lone surrogate"):
            client.call("lone_surrogate")
        with pytest.raises(RpcError, match="takes from 1 to 2 positional arguments"):
            client.call("add", 1, 2, 3)
        chunks = []
        with pytest.raises(RpcError, match="broke after one chunk"):
            client.call("breaks_midway", on_chunk=chunks.append)
        assert chunks == [1]
        assert client.call("add", 1) == 1  # the connection is fine after all of that

    def test_a_call_times_out_on_the_client_and_the_late_answer_is_dropped(self, serve):
        handle = serve()
        client = AgentClient(handle.url, Recorder, "t")
        with pytest.raises(RpcTimeoutError):
            client.call("slow", 0.5, "late", timeout=0.05)
        assert client.call("add", 1) == 1  # waits behind slow(); the late answer is dropped, not misread

    def test_session_frames_reach_served_clients(self, serve):
        handle = serve()
        client = AgentClient(handle.url, Recorder, "sess")
        agent = _served(handle, Recorder, "sess")
        Session.create(agent).append_message({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
        assert client.wait_for(lambda c: any(f.get("type") == "cf_agent_session" for f in c.frames))


class TestOwnershipAndTurns:
    def test_a_second_server_on_the_same_root_is_refused_at_start(self, serve):
        first = serve()
        with pytest.raises(ServeRootLockedError, match=f"pid .* {first.url}"):
            serve()
        with AgentClient(first.url, Recorder, "still") as client:  # the first one is unharmed
            assert client.call("add", 1) == 1
        first.stop()
        second = serve()
        with AgentClient(second.url, Recorder, "still") as client:
            assert client.state == {"count": 1}

    def test_turns_of_one_agent_never_overlap_and_different_agents_run_together(self, serve):
        handle = serve()
        clients = {key: AgentClient(handle.url, Recorder, key[0]) for key in [("one", "a"), ("one", "b"),
                                                                          ("two", "two"), ("three", "three")]}
        start_together = threading.Barrier(len(clients))
        same, apart = [], []

        def calls(key, client):
            start_together.wait()
            (same if key[0] == "one" else apart).append(client.call("slow", 1.0, key[1]))

        threads = [threading.Thread(target=calls, args=item) for item in clients.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        (_, _b1, e1), (_, b2, _e2) = sorted(same, key=lambda r: r[1])
        assert e1 <= b2, "two calls to one agent overlapped"
        (_, _b3, e3), (_, b4, _e4) = sorted(apart, key=lambda r: r[1])
        assert b4 < e3, "calls to two different agents ran one after the other"

    def test_an_idle_agent_is_closed_and_reopened_on_the_next_request(self, serve):
        handle = serve(idle_timeout=0.2)
        with AgentClient(handle.url, Recorder, "idle") as client:
            client.call("add", 3)
            first = handle.app.agents[("recorder", "idle")]
        deadline = time.monotonic() + 5
        while not first.closed and time.monotonic() < deadline:
            time.sleep(0.02)
        assert first.closed and ("recorder", "idle") not in handle.app.agents
        with AgentClient(handle.url, Recorder, "idle") as client:
            assert client.state == {"count": 3}
            assert handle.app.agents[("recorder", "idle")] is not first

    def test_a_connected_agent_is_never_closed_for_idleness(self, serve):
        handle = serve(idle_timeout=0.1)
        with AgentClient(handle.url, Recorder, "kept") as client:
            time.sleep(0.5)
            assert client.call("add", 1) == 1
            assert not handle.app.agents[("recorder", "kept")].closed

    def test_the_server_never_closes_an_agent_the_notebook_opened(self, serve, tmp_path):
        mine = get_agent(Recorder, "mine", root=tmp_path / "served")
        handle = serve(idle_timeout=0.1)
        with AgentClient(handle.url, Recorder, "mine") as client:
            client.set_state({"count": 2})
            client.call("add", 0)
        time.sleep(0.5)
        assert not mine.closed and mine.state == {"count": 2}

    def test_the_notebook_and_the_server_share_one_live_agent(self, serve, tmp_path):
        agent = get_agent(Recorder, "shared", root=tmp_path / "served")
        widget_saw = []
        agent.connect(on_state=widget_saw.append)
        handle = serve()
        client = AgentClient(handle.url, Recorder, "shared")
        agent.set_state({"count": 11})  # from the notebook's thread
        assert client.wait_for(lambda c: c.state == {"count": 11})
        client.set_state({"count": 12})
        client.call("add", 0)
        assert widget_saw[-1] == {"count": 12}

    def test_an_agent_closed_behind_the_servers_back_closes_its_sockets(self, serve):
        handle = serve()
        client = AgentClient(handle.url, Recorder, "gone")
        client.call("add", 1)
        _served(handle, Recorder, "gone").close()  # the socket is ended at once, not at the client's next frame
        assert client.wait_for(lambda c: c.closed)
        assert client.close_code == 1012
        with AgentClient(handle.url, Recorder, "gone") as again:  # reopened from its file
            assert again.state == {"count": 1}

    def test_stopping_closes_clients_and_leaves_the_state_in_the_file(self, serve, tmp_path):
        handle = serve()
        client = AgentClient(handle.url, Recorder, "kept")
        client.call("add", 6)
        handle.stop()
        assert client.wait_for(lambda c: c.closed) and client.close_code in (1001, 1012)
        with pytest.raises(AgentConnectionError):
            client.call("add", 1)
        assert get_agent(Recorder, "kept", root=tmp_path / "served").state == {"count": 6}


class TestCommandLine:
    """`agentlab serve` errors are one line on stderr and exit status 1 (run in process: same code path)."""

    @pytest.mark.parametrize(
        ("spec", "message"),
        [
            ("no_such_module_xyz:Thing", "importing no_such_module_xyz failed: ModuleNotFoundError"),
            ("json", "is not MODULE:CLASS"),
            ("json:nothing_here", "json has no attribute 'nothing_here'"),
            ("json:dumps", "is not a class but function"),
            ("json:JSONDecoder", "Only Agent subclasses can be served"),
            ("tests/js/missing.py:Counter", "there is no file tests/js/missing.py"),
        ],
    )
    def test_a_class_that_cannot_be_served_is_one_line(self, spec, message, capsys, tmp_path):
        from agentlab.cli import main

        assert main(["serve", spec, "--root", str(tmp_path), "--port", "0"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and err.startswith("agentlab serve: ")

    def test_a_busy_port_or_a_served_root_is_one_line(self, serve, capsys, tmp_path):
        from agentlab.cli import main

        first = serve()
        spec = "tests/js/served_agents.py:Counter"
        assert main(["serve", spec, "--root", str(tmp_path / "other"), "--port", str(first.port)]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"Cannot listen on 127.0.0.1:{first.port}" in err
        assert main(["serve", spec, "--root", str(first.app.root), "--port", "0"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "already serves the agents in" in err

    @pytest.mark.parametrize(
        ("option", "value", "message"),
        [
            ("--port", "99999", "port must be a whole number from 0 to 65535, not 99999"),
            ("--port", "-1", "port must be a whole number from 0 to 65535, not -1"),
            ("--log-level", "chatty", "log level must be one of critical, error, warning, info, debug, trace"),
            ("--root", "a-file", "cannot be the root folder"),
        ],
    )
    def test_a_bad_port_log_level_or_root_is_one_line_and_takes_no_port(self, option, value, message, capsys,
                                                                        tmp_path, monkeypatch):
        from agentlab.cli import main

        monkeypatch.chdir(tmp_path)
        (tmp_path / "a-file").write_text("not a folder")
        args = ["--root", str(tmp_path / "agents"), "--port", "0", option, value]
        spec = f"{Path(__file__).parent / 'js' / 'served_agents.py'}:Counter"
        assert main(["serve", spec, *args]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and err.startswith("agentlab serve: "), err


class TestStartArguments:
    @pytest.mark.parametrize(("options", "message"), [
        ({"port": 70000}, "port must be a whole number from 0 to 65535"),
        ({"port": "8787"}, "port must be a whole number from 0 to 65535"),
        ({"log_level": "loud"}, "log level must be one of"),
        ({"compression": "yes"}, "compression must be True or False"),
    ])
    def test_bad_options_raise_before_anything_is_bound_or_locked(self, options, message, tmp_path):
        with pytest.raises(ServeConfigError, match=message):
            start(Recorder, root=tmp_path / "served", **options)
        with start(Recorder, root=tmp_path / "served") as handle:  # the root was not left locked
            assert handle.running

    def test_a_root_that_is_a_file_is_a_typed_error(self, tmp_path):
        (tmp_path / "taken").write_text("a file")
        with pytest.raises(ServeConfigError, match="cannot be the root folder"):
            start(Recorder, root=tmp_path / "taken")
        assert (tmp_path / "taken").read_text() == "a file"

    @pytest.mark.parametrize("compression", [False, True])
    def test_permessage_deflate_is_accepted_only_when_asked_for(self, compression, tmp_path):
        # The client offers permessage-deflate; the server's handshake answer says whether it took it.
        with start(Recorder, root=tmp_path / "served", compression=compression) as handle:
            url = handle.url.replace("http", "ws") + "/agents/recorder/deflate"
            with connect(url, compression="deflate") as ws:
                ws.recv()
                agreed = ws.response.headers.get("Sec-WebSocket-Extensions") or ""
                assert ("permessage-deflate" in agreed) is compression
                assert bool(ws.protocol.extensions) is compression
