"""Serving agents: fan-out of state updates to many WebSocket clients, and memory per idle connected agent.

Run: .venv/bin/python benchmarks/serve_bench.py [--clients 200 --updates 10000 --window 4 --agents 1000 --repeats 2]

1. Fan-out. ``--clients`` WebSocket clients on one agent; ``--updates`` state updates sent round-robin from them,
   at most ``--window`` in flight (an update is done when every other client has it). Checked: no update lost
   or duplicated at any client, each sender's updates arrive in its order, every client sees one global order,
   and the file ends with the last update. Figures: updates per second and broadcast latency (sent -> received by
   each other client) p50/p99. Anchor: a bare ``websockets`` server doing the same fan-out with no agent, no
   validation and no storage, driven by the same clients; alternated with agentlab's server, ``--repeats`` times.
2. Memory. ``--agents`` agents with one idle client each: the server's resident memory grows by so much per agent.
   Anchors: the same number of idle connections on the bare server, and the same agents opened in one process with
   ``get_agent`` and no server (what the DuckDB files cost by themselves).

Servers run in their own processes (``agentlab serve`` for ours); the clients run in this process. The machine has
2 cores, so a server and its clients share them; ratios to the anchors are steadier than the absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from agentlab import Agent  # noqa: E402


class Bench(Agent):
    """The served agent: any dict state, validated as a dict."""

    def validate_state_change(self, next_state, source):
        if not isinstance(next_state, dict):
            raise ValueError("state must be a dict")


# -- servers --------------------------------------------------------------------------------------


def start_ours(root: Path) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentlab.cli", "serve", f"{HERE / 'serve_bench.py'}:Bench", "--root", str(root),
         "--port", "0", "--log-level", "warning", "--idle-timeout", "3600"],
        env=env, stdout=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline()  # type: ignore[union-attr]
    return proc, int(line.split("127.0.0.1:", 1)[1].split("/", 1)[0])


def start_anchor() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, __file__, "--anchor-server"], stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())  # type: ignore[union-attr]


async def anchor_server() -> None:
    """A bare websockets server: an identity frame on connect, each state frame re-encoded once to all others."""
    import websockets

    clients: set = set()

    async def handler(ws):
        clients.add(ws)
        try:
            await ws.send('{"name":"x","agent":"bench","type":"cf_agent_identity"}')
            async for message in ws:
                frame = json.loads(message)
                if isinstance(frame, dict) and frame.get("type") == "cf_agent_state" and "state" in frame:
                    text = json.dumps({"state": frame["state"], "type": "cf_agent_state"}, separators=(",", ":"))
                    websockets.broadcast([c for c in clients if c is not ws], text)
        finally:
            clients.discard(ws)

    async with websockets.serve(handler, "127.0.0.1", 0, max_size=None, ping_interval=None) as server:
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(2)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


# -- fan-out --------------------------------------------------------------------------------------


async def fanout(url: str, clients: int, updates: int, window: int) -> dict:
    import websockets

    conns = [await websockets.connect(url, max_size=None, ping_interval=None) for _ in range(clients)]
    received: list[list[int]] = [[] for _ in range(clients)]
    latencies: list[float] = []
    counts = [0] * updates
    slots = asyncio.Semaphore(window)
    done = asyncio.Event()
    finished = 0

    async def read(k: int, ws) -> None:
        nonlocal finished
        mine, record = received[k], latencies.append
        async for text in ws:
            now = time.perf_counter()
            frame = json.loads(text)
            state = frame.get("state") if frame.get("type") == "cf_agent_state" else None
            if not isinstance(state, dict) or "seq" not in state:
                continue  # connect frames
            seq = state["seq"]
            mine.append(seq)
            record(now - state["t"])
            counts[seq] += 1
            if counts[seq] == clients - 1:
                finished += 1
                slots.release()
                if finished == updates:
                    done.set()

    readers = [asyncio.ensure_future(read(k, ws)) for k, ws in enumerate(conns)]
    await asyncio.sleep(0.5)  # connect frames drained
    began = time.perf_counter()
    for seq in range(updates):
        await slots.acquire()
        frame = {"type": "cf_agent_state", "state": {"seq": seq, "from": seq % clients, "t": time.perf_counter()}}
        await conns[seq % clients].send(json.dumps(frame, separators=(",", ":")))
    await asyncio.wait_for(done.wait(), 600)
    elapsed = time.perf_counter() - began
    for ws in conns:
        await ws.close()
    for reader in readers:
        reader.cancel()
    check_fanout(received, clients, updates)
    latencies.sort()
    return {
        "per_s": updates / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "deliveries": len(latencies),
        "last": {k: received[k][-1] for k in range(2)},
    }


def check_fanout(received: list[list[int]], clients: int, updates: int) -> None:
    """None lost or doubled; each sender's order kept; one global order for everyone (else AssertionError)."""
    for k, seqs in enumerate(received):
        expected = {seq for seq in range(updates) if seq % clients != k}
        assert len(seqs) == len(expected) and set(seqs) == expected, f"client {k}: lost or doubled updates"
        last_from: dict[int, int] = {}
        for seq in seqs:
            sender = seq % clients
            assert last_from.get(sender, -1) < seq, f"client {k}: updates of sender {sender} out of order"
            last_from[sender] = seq
    for ref in (received[0], received[1]):
        position = {seq: i for i, seq in enumerate(ref)}
        for k, seqs in enumerate(received):
            places = [position[seq] for seq in seqs if seq in position]
            assert places == sorted(places), f"client {k} saw another order than its peers"


def in_process_anchor(clients: int, updates: int) -> float:
    """Updates per second through ``agent.set_state`` with the same number of in-process connections."""
    from agentlab import get_agent

    with tempfile.TemporaryDirectory() as tmp:
        agent = get_agent(Bench, "fan", root=tmp)
        sinks = [[] for _ in range(clients)]
        connections = [agent.connect(on_message=sink.append) for sink in sinks]
        began = time.perf_counter()
        for seq in range(updates):
            connections[seq % clients].set_state({"seq": seq, "from": seq % clients, "t": 0.0})
        elapsed = time.perf_counter() - began
        agent.close()
    return updates / elapsed


# -- memory ---------------------------------------------------------------------------------------


async def hold(url_for, count: int, frames_on_connect: int, pid: int) -> float:
    """Connect ``count`` idle clients (each to its own URL) and return the server's RSS growth per client (MB)."""
    import websockets

    async def one(i: int):
        ws = await websockets.connect(url_for(i), ping_interval=None)
        for _ in range(frames_on_connect):
            await ws.recv()
        return ws

    warm = [await one(-1)]
    await asyncio.sleep(1.0)
    before = rss_mb(pid)
    conns: list = []
    gate = asyncio.Semaphore(16)

    async def bounded(i: int):
        async with gate:
            conns.append(await one(i))

    await asyncio.gather(*(bounded(i) for i in range(count)))
    await asyncio.sleep(2.0)
    after = rss_mb(pid)
    for ws in conns + warm:
        await ws.close()
    return (after - before) / count


def memory_in_process(root: Path, count: int) -> float:
    code = (
        "import gc, sys, time; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])\n"
        "from serve_bench import Bench, rss_mb; from agentlab import get_agent; import os\n"
        "keep = [get_agent(Bench, 'warm', root=sys.argv[3])]; keep[0].state; gc.collect(); time.sleep(0.5)\n"
        "before = rss_mb(os.getpid())\n"
        "keep += [get_agent(Bench, f'a{i}', root=sys.argv[3]) for i in range(int(sys.argv[4]))]\n"
        "[a.state for a in keep]; gc.collect(); time.sleep(1.0)\n"
        "print((rss_mb(os.getpid()) - before) / int(sys.argv[4]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(HERE.parent), str(HERE), str(root), str(count)],
                         capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


# -- main -----------------------------------------------------------------------------------------


def span(values: list[float], fmt: str = "{:.1f}") -> str:
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(min(values))}-{fmt.format(max(values))} (median {fmt.format(statistics.median(values))})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--updates", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--anchor-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.anchor_server:
        try:
            asyncio.run(anchor_server())
        except KeyboardInterrupt:  # stop() ends it with SIGINT
            pass
        return 0
    gc.disable()  # the clients' own collections would land in the latencies
    from _timing import machine_check

    print(f"machine check: {machine_check():.0f} ms", flush=True)
    ours, anchor = [], []
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
        for run in range(args.repeats):
            for label in (("ours", "anchor") if run % 2 == 0 else ("anchor", "ours")):
                if label == "ours":
                    root = Path(tmp) / f"fan-{run}"
                    proc, port = start_ours(root)
                    url = f"ws://127.0.0.1:{port}/agents/bench/fan"
                else:
                    proc, port = start_anchor()
                    url = f"ws://127.0.0.1:{port}/"
                try:
                    result = asyncio.run(fanout(url, args.clients, args.updates, args.window))
                finally:
                    stop(proc)
                if label == "ours":
                    from agentlab import get_agent

                    stored = get_agent(Bench, "fan", root=root)
                    last = stored.state["seq"]  # the global last: client 0's last, unless client 0 sent it
                    assert last == result["last"][1 if last % args.clients == 0 else 0], "the file missed the last update"
                    stored.close()
                (ours if label == "ours" else anchor).append(result)
                print(f"  run {run} {label:>6}: {result['per_s']:7.0f} updates/s, latency p50 {result['p50_ms']:7.1f} "
                      f"ms, p99 {result['p99_ms']:7.1f} ms, {result['deliveries']} deliveries checked", flush=True)
        in_proc = in_process_anchor(args.clients, min(args.updates, 1000))
        print(f"\nfan-out: {args.clients} clients, {args.updates} updates, window {args.window}; none lost, per-sender "
              "order kept, one global order, last update stored (checked every run)")
        print(f"  updates/s      agentlab {span([r['per_s'] for r in ours], '{:.0f}')}   bare websockets "
              f"{span([r['per_s'] for r in anchor], '{:.0f}')}   ratio "
              f"{span([o['per_s'] / a['per_s'] for o, a in zip(ours, anchor)], '{:.2f}')}")
        for key in ("p50_ms", "p99_ms"):
            print(f"  latency {key[:3]}    agentlab {span([r[key] for r in ours])} ms   bare websockets "
                  f"{span([r[key] for r in anchor])} ms   ratio {span([o[key] / a[key] for o, a in zip(ours, anchor)])}")
        print(f"  in-process anchor: set_state with {args.clients} in-process connections, {in_proc:.0f} updates/s")

        if not args.skip_memory:
            mem_ours, mem_anchor, mem_plain = [], [], []
            for run in range(args.repeats):
                for label in (("ours", "anchor") if run % 2 == 0 else ("anchor", "ours")):
                    if label == "ours":
                        proc, port = start_ours(Path(tmp) / "many")
                        per = asyncio.run(hold(lambda i: f"ws://127.0.0.1:{port}/agents/bench/a{i}", args.agents, 2,
                                               proc.pid))
                        mem_ours.append(per)
                    else:
                        proc, port = start_anchor()
                        per = asyncio.run(hold(lambda i: f"ws://127.0.0.1:{port}/", args.agents, 1, proc.pid))
                        mem_anchor.append(per)
                    stop(proc)
                    print(f"  run {run} {label:>6}: {per * 1024:8.1f} KB per idle client", flush=True)
                mem_plain.append(memory_in_process(Path(tmp) / "many", args.agents))
                print(f"  run {run} get_agent in one process: {mem_plain[-1] * 1024:8.1f} KB per open agent", flush=True)
            print(f"\nmemory: {args.agents} agents, one idle client each")
            print(f"  agentlab server    {span([m * 1024 for m in mem_ours])} KB per connected agent")
            print(f"  anchors            bare websockets {span([m * 1024 for m in mem_anchor])} KB per idle connection;"
                  f" get_agent without a server {span([m * 1024 for m in mem_plain])} KB per open agent")
            print(f"  ratio to get_agent {span([o / p for o, p in zip(mem_ours, mem_plain)], '{:.2f}')}")
    print(f"machine check: {machine_check():.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
