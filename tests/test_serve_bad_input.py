"""What bad clients do to a served agent: the connection gets an answer or a clean close, the stored state is
untouched, and the server goes on serving everyone else.

Frames upstream passes to ``onMessage`` (not JSON, unknown shapes, binary) reach ``on_message`` and get no
answer, as upstream; a frame over the size limit closes its socket with 1009; a client that never reads is
dropped once its queue passes ``max_queue_bytes``.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import time

import pytest
import uvicorn
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from agentlab import Agent, get_agent, rpc
from agentlab.serve import AgentClient, app, start


class Target(Agent):
    initial_state = {"count": 0}

    def on_start(self):
        self.errors, self.messages = [], []

    def on_error(self, error):
        self.errors.append(error)

    def on_message(self, connection, message):
        self.messages.append(message)

    @rpc()
    def ping(self):
        return "pong"


@pytest.fixture
def server(tmp_path):
    handle = start(Target, root=tmp_path / "served", max_message_bytes=2 * 1024 * 1024, max_queue_bytes=64 * 1024)
    yield handle
    handle.stop()


def _agent(handle, name="t"):
    return get_agent(Target, name, root=handle.app.root)


def _round_trip(ws):
    """Send a ping RPC and return every frame received until its answer."""
    ws.send(json.dumps({"type": "rpc", "id": "probe", "method": "ping", "args": []}))
    frames = []
    while True:
        frame = json.loads(ws.recv(timeout=5))
        frames.append(frame)
        if frame.get("type") == "rpc" and frame.get("id") == "probe":
            return frames


def _open(handle, name="t"):
    ws = connect(handle.agent_url(Target, name, websocket=True), max_size=None, legacy=True)
    for _ in range(3):  # identity, state, MCP servers
        ws.recv(timeout=5)
    return ws


def _still_serving(handle, name="t"):
    with AgentClient(handle.url, Target, name) as client:
        assert client.call("ping") == "pong"
        client.set_state({"count": 1})
        client.call("ping")
    assert _agent(handle, name).state == {"count": 1}


class TestFramesThatAreNotProtocol:
    def test_malformed_json_and_unknown_shapes_go_to_on_message_and_get_no_answer(self, server):
        junk = [
            "{not json",
            '{"type": "bogus"}',
            '{"type": "cf_agent_state"}',  # no "state" key: not a state frame
            '{"type": "rpc", "id": 1, "method": "ping", "args": []}',  # id must be a string
            '{"type": "rpc", "id": "x", "method": "ping", "args": {}}',  # args must be a list
            "[1, 2]",
            "null",
            "[" * 100_000,  # nesting too deep for the parser
            "",
        ]
        with _open(server) as ws:
            for text in junk:
                ws.send(text)
            assert _round_trip(ws) == [{"done": True, "id": "probe", "result": "pong", "success": True, "type": "rpc"}]
        agent = _agent(server)
        assert agent.messages == junk
        assert agent.state == {"count": 0} and agent.errors == []
        _still_serving(server)

    def test_binary_frames_go_to_on_message(self, server):
        with _open(server) as ws:
            ws.send(b"\x00\xff binary")
            assert _round_trip(ws)[-1]["result"] == "pong"
        assert _agent(server).messages == [b"\x00\xff binary"]
        _still_serving(server)

    def test_state_that_is_not_storable_json_is_rejected_and_not_stored(self, server):
        with _open(server) as ws:
            ws.send('{"type": "cf_agent_state", "state": "\\ud800"}')  # a lone surrogate
            ws.send(json.dumps({"type": "cf_agent_state", "state": [[[[[]]]]]}).replace("[]", "[" * 600 + "]" * 600))
            errors = [json.loads(ws.recv(timeout=5)) for _ in range(2)]
        assert errors == [{"type": "cf_agent_state_error", "error": "State update rejected"}] * 2
        agent = _agent(server)
        assert agent.state == {"count": 0}
        assert [type(e).__name__ for e in agent.errors] == ["StateNotJSONError", "StateNotJSONError"]
        _still_serving(server)


class TestFramesTooLarge:
    def test_a_10_mb_frame_closes_that_socket_with_1009_and_nothing_else(self, server):
        other = AgentClient(server.url, Target, "t")
        with _open(server) as ws:
            # The server closes while the frame is still arriving: the client may see the 1009 close, or only
            # the reset its next write meets once the server has closed the socket.
            with pytest.raises((ConnectionClosed, ConnectionResetError, BrokenPipeError)):
                ws.send(json.dumps({"type": "cf_agent_state", "state": {"count": 5, "pad": "x" * 10_000_000}}))
                while True:
                    ws.recv(timeout=5)
            assert ws.close_code in (1009, 1006, None)  # 1006: the reset came before any close frame
        assert _agent(server).state == {"count": 0}
        assert other.call("ping") == "pong" and not other.closed
        _still_serving(server)

    def test_a_compressed_frame_is_refused_by_its_size_once_decompressed(self, tmp_path):
        # With permessage-deflate the 10 MB frame crosses the wire in about 10 KB and arrives whole, so the client
        # always reads the close: the limit applies to what the frame decompresses to.
        handle = start(Target, root=tmp_path / "deflate", max_message_bytes=2 * 1024 * 1024, compression=True)
        try:
            with connect(handle.agent_url(Target, "t", websocket=True), max_size=None, compression="deflate") as ws:
                for _ in range(3):
                    ws.recv(timeout=5)
                ws.send(json.dumps({"type": "cf_agent_state", "state": {"count": 5, "pad": "x" * 10_000_000}}))
                with pytest.raises(ConnectionClosed):
                    while True:
                        ws.recv(timeout=5)
                assert ws.close_code == 1009
            _still_serving(handle)
            assert _agent(handle).state == {"count": 1}
        finally:
            handle.stop()

    def test_the_app_checks_sizes_itself_inside_a_host_with_a_larger_limit(self, tmp_path):
        served = app(Target, root=tmp_path / "embedded", max_message_bytes=1000)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        host = uvicorn.Server(uvicorn.Config(served, log_level="warning", ws_max_size=32 * 1024 * 1024))
        thread = threading.Thread(target=host.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        try:
            while not host.started:
                time.sleep(0.01)
            with connect(f"ws://127.0.0.1:{port}/agents/target/t") as ws:
                for _ in range(3):
                    ws.recv(timeout=5)
                ws.send(json.dumps({"type": "cf_agent_state", "state": {"count": 5, "pad": "x" * 5000}}))
                with pytest.raises(ConnectionClosed):
                    while True:
                        ws.recv(timeout=5)
                assert ws.close_code == 1009 and "at most 1000 bytes" in ws.close_reason
            with AgentClient(f"http://127.0.0.1:{port}", Target, "t") as client:
                assert client.state == {"count": 0}
        finally:
            host.should_exit = True
            thread.join(10)


class TestAClientThatNeverReads:
    def test_it_is_dropped_while_everyone_else_gets_every_frame(self, server):
        slow = _never_reading(server, "t")
        watcher = AgentClient(server.url, Target, "t")
        seen = []
        watcher.on_state = lambda state, source: seen.append(state["count"])
        agent = _agent(server)
        assert len(agent.connections) == 2
        writer = AgentClient(server.url, Target, "t")
        pad = "x" * 50_000
        sent = 0
        deadline = time.monotonic() + 60
        while len(agent.connections) == 3 and time.monotonic() < deadline:
            sent += 1
            writer.set_state({"count": sent, "pad": pad})
            writer.call("ping")  # one update at a time, so the watcher is never the slow one
        assert len(agent.connections) == 2, "the client that never reads was not dropped"
        assert server.stats()["dropped"] == 1
        for _ in range(5):  # and nothing more is kept for it afterwards
            sent += 1
            writer.set_state({"count": sent, "pad": pad})
        writer.call("ping")
        assert watcher.wait_for(lambda c: c.state["count"] == sent)
        assert seen == list(range(1, sent + 1))  # every update, in order
        assert agent.state["count"] == sent
        assert all(sock.queued <= 64 * 1024 for entry in server.app.hub.entries.values() for sock in entry.sockets)
        slow.close()
        _still_serving(server, "other")


def _never_reading(handle, name):
    """A raw WebSocket that completes its handshake and then never reads another byte."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((handle.host, handle.port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET /agents/target/{name} HTTP/1.1\r\nHost: {handle.host}:{handle.port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101")
    return sock
