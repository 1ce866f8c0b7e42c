"""Kill a server while its agents hibernate and wake, then check that no acknowledged update was lost.

A trial starts ``agentlab serve`` in its own process with a short ``--hibernate-after``, and drives several agents
from clients in this process: each client sends numbered updates one at a time, as RPCs (``put``) and as state
frames that a second client of the same agent sees broadcast, and pauses now and then for longer than
``hibernate_after``, so its agent hibernates and the next update wakes it. The server is killed with SIGKILL at a
random moment. An update counts as acknowledged when its RPC answer or its broadcast reached a client: at that
point the server claims it is stored. Afterwards each agent's file must hold an update at least as new as the
newest acknowledged one (and none that was never sent).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import random
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlab import Agent, get_agent, rpc

HERE = Path(__file__).resolve()


class Sleepy(Agent):
    """State ``{"n": k}``: ``put(k)`` stores it and answers k. Each start (an open or a wake) is logged beside the
    root, so a trial can tell how many wakes it went through."""

    initial_state = {"n": 0}

    def on_start(self):
        with open(Path(self.root) / "starts.log", "a") as log:
            log.write(self.name + "\n")

    @rpc()
    def put(self, n):
        self.set_state({"n": n})
        return n


@dataclass
class ServeTrial:
    """One killed server: per agent, the newest acknowledged and newest sent update, and what the file holds."""

    acked: dict[str, int] = field(default_factory=dict)
    sent: dict[str, int] = field(default_factory=dict)
    stored: dict[str, int] = field(default_factory=dict)
    wakes: int = 0

    @property
    def lost(self) -> list[str]:
        """Agents whose file misses an acknowledged update, or holds one never sent (empty when all is well)."""
        return [name for name in self.acked
                if not self.acked[name] <= self.stored.get(name, 0) <= self.sent.get(name, 0)]


def _start(root: Path, hibernate_after: float) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), *sys.path])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentlab.cli", "serve", f"{HERE}:Sleepy", "--root", str(root), "--port", "0",
         "--hibernate-after", str(hibernate_after), "--log-level", "warning"],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line:
        raise RuntimeError(f"the server did not start (exit code {proc.wait()})")
    return proc, int(line.split("127.0.0.1:", 1)[1].split("/", 1)[0])


async def _drive(port: int, name: str, trial: ServeTrial, rng: random.Random, hibernate_after: float) -> None:
    """Send bursts of updates without waiting (so turns queue up and their writes are grouped), each burst ending
    with the wait for its last acknowledgement, and sometimes a pause long enough to hibernate."""
    import websockets

    url = f"ws://127.0.0.1:{port}/agents/sleepy/{name}"
    trial.acked[name] = trial.sent[name] = 0
    acked = asyncio.Event()

    async def listen(ws: Any) -> None:
        try:
            async for text in ws:
                frame = json.loads(text)
                if frame.get("type") == "rpc" and frame.get("success"):
                    n = frame["result"]
                elif frame.get("type") == "cf_agent_state":
                    n = frame["state"]["n"]
                else:
                    continue
                trial.acked[name] = max(trial.acked[name], n)
                acked.set()
        except websockets.exceptions.WebSocketException:
            pass  # the server was killed

    try:
        async with websockets.connect(url, ping_interval=None) as writer, \
                websockets.connect(url, ping_interval=None) as watcher:
            listeners = [asyncio.ensure_future(listen(ws)) for ws in (writer, watcher)]
            n = 0
            while not any(task.done() for task in listeners):
                for _ in range(rng.randint(1, 12)):
                    n += 1
                    trial.sent[name] = n
                    frame: dict[str, object]
                    if rng.random() < 0.3:
                        frame = {"type": "rpc", "id": str(n), "method": "put", "args": [n]}
                    else:
                        frame = {"type": "cf_agent_state", "state": {"n": n}}
                    await writer.send(json.dumps(frame))
                while trial.acked[name] < n and not any(task.done() for task in listeners):
                    acked.clear()
                    await asyncio.wait([asyncio.ensure_future(acked.wait()), *listeners],
                                       return_when=asyncio.FIRST_COMPLETED)
                if rng.random() < 0.3:  # long enough for the agent to hibernate; the next update wakes it
                    await asyncio.sleep(hibernate_after * rng.uniform(1.5, 4))
    except (OSError, websockets.exceptions.WebSocketException):
        pass  # the server was killed


async def _run_clients(port: int, names: list[str], trial: ServeTrial, rng: random.Random, proc: subprocess.Popen[str],
                       kill_after: float, hibernate_after: float) -> None:
    drivers = [asyncio.ensure_future(_drive(port, name, trial, random.Random(rng.random()), hibernate_after))
               for name in names]
    await asyncio.sleep(kill_after)
    proc.send_signal(signal.SIGKILL)
    await asyncio.wait_for(asyncio.gather(*drivers), 30)


def serve_kill_trial(root: Path, seed: int, *, agents: int = 4, hibernate_after: float = 0.15) -> ServeTrial:
    """One trial: serve, drive ``agents`` agents through hibernate/wake cycles, SIGKILL at a random moment, check."""
    rng = random.Random(seed)
    trial = ServeTrial()
    proc, port = _start(root, hibernate_after)
    try:
        names = [f"a{k}" for k in range(agents)]
        clients = _run_clients(port, names, trial, rng, proc, rng.uniform(0.8, 3.0), hibernate_after)
        # A thread of its own: the caller may already run an event loop (a notebook, or a test plugin's).
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, clients).result()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    for name in trial.acked:
        agent = get_agent(Sleepy, name, root=root)
        try:
            trial.stored[name] = int(agent.state["n"])
        finally:
            agent.close()
    log = root / "starts.log"
    starts = log.read_text().split() if log.exists() else []
    # Each agent's file was opened once by the server and once by this check; every other start was a wake.
    trial.wakes = sum(max(0, starts.count(name) - 2) for name in trial.acked)
    return trial
