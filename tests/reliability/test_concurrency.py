"""Threads and processes: no lost write, strictly increasing sequence, typed lock errors within 1 s."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

from agentlab import Agent, get_agent
from agentlab.session._session import Session


class Shared(Agent):
    initial_state = {}


def _run_threads(target, n=8):
    errors = []

    def wrapped(i):
        try:
            target(i)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_eight_threads_appending_to_one_session(tmp_path):
    agent = get_agent(Shared, "threads", root=tmp_path)
    session = Session.create(agent)
    per_thread = 40

    def work(worker):
        for i in range(per_thread):
            session.append_message(
                {"id": f"t{worker}-{i}", "role": "user", "parts": [{"type": "text", "text": f"worker {worker} item {i}"}]}
            )

    _run_threads(work)
    rows = agent.sql("SELECT id, seq, parent_id FROM messages ORDER BY seq")
    assert len(rows) == 8 * per_thread
    assert len({r["id"] for r in rows}) == len(rows)
    seqs = [r["seq"] for r in rows]
    assert seqs == sorted(set(seqs))
    # every append chained onto the tip at its time: one linear branch, no message lost from it
    history = session.get_history()
    assert [m["id"] for m in history] == [r["id"] for r in rows]
    for worker in range(8):  # each thread's own messages appear in its order
        mine = [m["id"] for m in history if m["id"].startswith(f"t{worker}-")]
        assert mine == [f"t{worker}-{i}" for i in range(per_thread)]


def test_eight_threads_setting_state(tmp_path):
    agent = get_agent(Shared, "state", root=tmp_path)
    frames = []
    agent.connect(on_state=frames.append)
    frames.clear()

    def work(worker):
        for i in range(30):
            agent.merge_state({f"w{worker}": i})

    _run_threads(work)
    assert agent.state == {f"w{w}": 29 for w in range(8)}
    assert len(frames) == 8 * 30
    assert frames[-1] == agent.state  # the last broadcast is the stored state
    agent.close()
    assert get_agent(Shared, "state", root=tmp_path).state == {f"w{w}": 29 for w in range(8)}


OPEN = textwrap.dedent(
    """
    import sys, time
    from agentlab import Agent, get_agent
    from agentlab.errors import AgentLockedError
    class Shared(Agent):
        initial_state = {}
    start = time.perf_counter()
    try:
        a = get_agent(Shared, "locked", root=sys.argv[1], read_only=sys.argv[2] == "ro")
        print("OPEN", a.state)
    except AgentLockedError:
        print("LOCKED", time.perf_counter() - start)
    """
)


def _open_elsewhere(root, mode):
    return subprocess.run([sys.executable, "-c", OPEN, str(root), mode], capture_output=True, text=True, timeout=60)


def test_a_second_process_gets_the_typed_lock_error_within_a_second(tmp_path):
    agent = get_agent(Shared, "locked", root=tmp_path)
    agent.set_state({"owner": "me"})
    for mode in ("rw", "ro"):
        result = _open_elsewhere(tmp_path, mode)
        kind, seconds = result.stdout.split()
        assert kind == "LOCKED", result.stderr
        assert float(seconds) < 1.0
    agent.close()


def test_read_only_openers_in_several_processes_work_while_no_writer_holds_the_file(tmp_path):
    with get_agent(Shared, "locked", root=tmp_path) as agent:
        agent.set_state({"owner": "nobody"})
    procs = [
        subprocess.Popen([sys.executable, "-c", OPEN + "\ntime.sleep(1)", str(tmp_path), "ro"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [out.strip() for out, _ in outputs] == ["OPEN {'owner': 'nobody'}"] * 3, outputs
    time.sleep(0.1)
