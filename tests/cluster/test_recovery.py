"""An actor that dies is recreated on the next call, and nothing acknowledged is lost."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
from cluster_agents import Notes

from agentlab import Session, get_agent
from agentlab.errors import ActorLostError


def _msg(mid: str, text: str) -> dict:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def _kill_and_wait(ray, handle, *, restart: bool) -> None:
    """Kill the actor and wait until its process is gone (``ray.kill`` returns before it is), so that the next
    write cannot reach it."""
    pid = handle.info()["pid"]
    ray.kill(handle.actor, no_restart=not restart)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
    raise AssertionError(f"the actor process {pid} outlived ray.kill by 30 s")


def test_killing_the_actor_between_writes_loses_no_acknowledged_write(ray, tmp_path):
    handle = get_agent(Notes, "durable", root=tmp_path, backend="ray")
    handle.sql("CREATE TABLE facts (n INTEGER)")
    acked_messages, acked_rows, last_state = [], [], None
    incarnations = {handle.info()["incarnation"]}
    for i in range(24):
        handle.append_message(_msg(f"m{i}", f"message {i}"))  # each returns after its commit
        acked_messages.append(f"m{i}")
        handle.set_state({"visits": i})
        last_state = {"visits": i}
        handle.sql("INSERT INTO facts VALUES (?)", i)  # not safe to resend: the handle checks the actor first
        acked_rows.append(i)
        if i % 6 == 5:
            # Both ways an actor dies: for good (Ray frees the name; the handle makes a new actor), or with a
            # restart by Ray itself (max_restarts), as when its node is lost.
            _kill_and_wait(ray, handle, restart=(i // 6) % 2 == 1)
            incarnations.add(handle.info()["incarnation"])
    assert len(incarnations) == 5  # four kills, four new actor processes
    assert [m["id"] for m in handle.get_history()] == acked_messages
    assert handle.state == last_state
    assert [r["n"] for r in handle.sql("SELECT n FROM facts ORDER BY n")] == acked_rows
    handle.close()
    with get_agent(Notes, "durable", root=tmp_path) as local:  # and the file itself holds every write
        assert [m["id"] for m in Session.create(local).get_history()] == acked_messages
        assert local.state == last_state
        assert local.sql("SELECT count(*) AS n FROM facts")[0]["n"] == len(acked_rows)


def test_appends_survive_kills_in_the_middle_of_calls(ray, tmp_path):
    handle = get_agent(Notes, "mid-call", root=tmp_path, backend="ray")
    stop = threading.Event()
    kills = []

    def killer() -> None:
        # Kill while the main thread is appending (it always has a call in flight), each time after the new
        # actor has answered a few calls: killing faster than an actor starts would only starve the test.
        seen = 0
        while not stop.wait(0.01):
            if len(acked) >= seen + 5:
                time.sleep(random.uniform(0, 0.01))
                ray.kill(handle.actor)
                kills.append(len(acked))
                seen = len(acked)

    thread = threading.Thread(target=killer)
    thread.start()
    acked: list[str] = []
    deadline = time.monotonic() + 120
    try:
        while (len(kills) < 3 or len(acked) < 40) and time.monotonic() < deadline:
            mid = f"m{len(acked)}"
            handle.append_message(_msg(mid, f"message {mid}"))  # resent after a death: the id makes it once
            acked.append(mid)
    finally:
        stop.set()
        thread.join()
    assert len(kills) >= 3
    ids = [m["id"] for m in handle.get_history()]
    assert ids == acked  # every acknowledged append, once each, in order
    assert handle.sql("SELECT count(*) AS n FROM messages")[0]["n"] == len(acked)


def test_a_call_unsafe_to_resend_raises_actor_lost_and_the_next_call_works(ray, tmp_path):
    handle = get_agent(Notes, "lost", root=tmp_path, backend="ray")
    before = handle.info()["pid"]
    timer = threading.Timer(1.0, lambda: ray.kill(handle.actor))
    timer.start()
    with pytest.raises(ActorLostError) as caught:
        handle.call("slow_write", 4.0, "never acknowledged")  # killed during its sleep, before it writes
    timer.join()
    assert caught.value.method == "slow_write" and caught.value.actor_name == handle.actor_name
    assert handle.info()["pid"] != before  # recreated
    assert handle.state == {"visits": 0}
    assert handle.sql("SELECT count(*) AS n FROM information_schema.tables WHERE table_name = 'facts'")[0]["n"] == 0
    handle.call("slow_write", 0.0, "acknowledged")
    assert handle.sql("SELECT body FROM facts") == [{"body": "acknowledged"}]
