"""Serving agents at the scale of users: fan-out, a slow client, and many idle clients of hibernated agents.

Run: .venv/bin/python benchmarks/serve_bench.py [--parts fanout,slow,idle] [--workers 4 --clients 200
     --updates 10000 --window 2 --repeats 3 --idle 10000 --wakes 400]

Every server runs in its own process, and the clients in ``--workers`` client processes the bench starts (each
holding its share of the clients on one asyncio loop), so neither the clients nor the coordinator share a
process with the server. Timestamps are ``time.monotonic()``, one clock for every process on the machine. The
machine has 2 cores for the server and all its clients: ratios to the anchors, measured alternately in the same
run, are steadier than the absolute figures.

1. Fan-out. ``--clients`` WebSocket clients of one agent. Each worker sends its share of ``--updates`` state
   updates from its own clients in turn, at most ``--window`` of its updates in flight (an update is done when
   every client of that worker has it). Checked at the end, over every client of every worker: no update lost or
   doubled, each sender's updates in its order, one global order for everyone, and the agent's file holds the
   last update. Figures: updates per second (first send to last delivery) and broadcast latency (sent -> received
   by each other client) p50/p99. Anchor: a bare ``websockets`` server (no agent, no validation, no storage, the
   same compression setting: none) relaying each state frame to every other client, driven by the same workers.
2. A slow client. The same fan-out on agentlab's server, with and without one more client that completes the
   handshake and never reads. Figures: the other clients' p99 with / without, the server's peak resident memory
   growth with / without, and whether the server dropped the slow client (run with ``--slow-queue-bytes`` as the
   per-client bound, so that the bench's frames pass it; the default server bound is 16 MiB).
3. Idle clients of hibernated agents. ``--idle`` clients, each of its own agent, connected in waves; the server
   hibernates each agent one second after its client goes quiet. Figures: the server's resident memory per idle
   client once every agent is hibernated (anchor: the same number of idle connections to the bare server), the
   time to connect them all, and wake latency: an RPC to a hibernated agent (which wakes it) against the same RPC
   to the same agent just after, awake, ``--wakes`` times, one agent at a time with a 20 ms pause.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from agentlab import Agent, rpc  # noqa: E402


class Bench(Agent):
    """The served agent: any dict state, validated as a dict; ``ping`` answers an RPC without touching storage."""

    def validate_state_change(self, next_state, source):
        if not isinstance(next_state, dict):
            raise ValueError("state must be a dict")

    @rpc()
    def ping(self):
        return self.name


# -- servers (each in its own process) ------------------------------------------------------------


def server_main(kind: str, root: str, hibernate_after: float, queue_bytes: int) -> None:
    """Serve until SIGINT; print the bound port first. ``/bench-stats`` answers the hub's counts (ours only)."""
    if kind == "anchor":
        asyncio.run(anchor_server())
        return
    import uvicorn

    from agentlab.serve import app

    server = app([Bench], root=root, idle_timeout=None, hibernate_after=hibernate_after or None,
                 max_queue_bytes=queue_bytes)

    async def with_stats(scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/bench-stats":
            body = json.dumps(server.stats()).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        await server(scope, receive, send)

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)  # clients may connect as soon as the port is printed; uvicorn accepts them once it runs
    server.lock_root()
    print(sock.getsockname()[1], flush=True)
    # As agentlab.serve.start() configures uvicorn (no permessage-deflate, agentlab's frame limit).
    config = uvicorn.Config(with_stats, log_level="warning", lifespan="on", ws="websockets-sansio",
                            ws_per_message_deflate=False, ws_max_size=server.max_message_bytes, backlog=4096)
    uvicorn.Server(config).run(sockets=[sock])


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

    async with websockets.serve(handler, "127.0.0.1", 0, max_size=None, ping_interval=None, compression=None,
                                backlog=4096) as server:
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()


class Server:
    """A server process: ``kind`` is "ours" (agentlab) or "anchor" (bare websockets)."""

    def __init__(self, kind: str, root: Path, *, hibernate_after: float = 0.0, queue_bytes: int = 16 << 20):
        self.kind = kind
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--server", kind, "--root", str(root), "--hibernate-after",
             str(hibernate_after), "--slow-queue-bytes", str(queue_bytes)],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(HERE.parent)},
        )
        self.port = int(self.proc.stdout.readline())  # type: ignore[union-attr]

    def url(self, name: str) -> str:
        return f"ws://127.0.0.1:{self.port}/agents/bench/{name}" if self.kind == "ours" else \
            f"ws://127.0.0.1:{self.port}/"

    def http(self, path: str) -> Any:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as response:
            return json.loads(response.read())

    def rss_mb(self) -> float:
        return rss_mb(self.proc.pid)

    def stop(self) -> None:
        self.proc.send_signal(2)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


# -- client workers (each in its own process, driven by JSON lines on stdin/stdout) ---------------


class Worker:
    """A client process. ``ask(job)`` sends one job and returns its answer."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(HERE.parent)})

    def send(self, job: dict) -> None:
        self.proc.stdin.write(json.dumps(job) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def answer(self) -> dict:
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"a client worker died (exit code {self.proc.wait()})")
        return json.loads(line)

    def ask(self, job: dict) -> dict:
        self.send(job)
        return self.answer()

    def stop(self) -> None:
        try:
            self.send({"job": "exit"})
            self.proc.wait(30)
        except Exception:
            self.proc.kill()


def ask_all(workers: list[Worker], jobs: list[dict]) -> list[dict]:
    for worker, job in zip(workers, jobs):
        worker.send(job)
    return [worker.answer() for worker in workers]


def worker_main() -> None:
    """Answer jobs from stdin until ``exit``: one asyncio loop holds this worker's connections across jobs."""
    gc.disable()  # the clients' own collections would land in the latencies
    loop = asyncio.new_event_loop()
    held: list[Any] = []
    lines = sys.stdin
    for line in lines:
        job = json.loads(line)
        if job["job"] == "exit":
            break
        if job["job"] == "fanout":
            result = loop.run_until_complete(fanout_worker(job, lines))
        elif job["job"] == "hold":
            result = loop.run_until_complete(hold_worker(job, held))
        elif job["job"] == "wake":
            result = loop.run_until_complete(wake_worker(job, held))
        elif job["job"] == "release":
            result = loop.run_until_complete(release_worker(held))
        else:
            raise SystemExit(f"unknown job {job['job']}")
        print(json.dumps(result), flush=True)


async def fanout_worker(job: dict, lines: Any) -> dict:
    """Connect this worker's clients, report ready, wait for "go", send its updates, and wait for every delivery."""
    import websockets

    w, workers, offset, n = job["worker"], job["workers"], job["offset"], job["clients"]
    mine = job["updates"] // workers
    total = mine * workers
    pad = "x" * job.get("pad", 0)
    conns = [await websockets.connect(job["url"], max_size=None, ping_interval=None, compression=None)
             for _ in range(n)]
    received: list[list[int]] = [[] for _ in range(n)]
    latencies: list[float] = []
    counts: dict[int, int] = {}
    slots = asyncio.Semaphore(job["window"])
    expected = [total - sum(1 for i in range(mine) if i % n == k) for k in range(n)]
    complete = asyncio.Event()
    finished_clients = 0
    last_receive = 0.0

    async def read(k: int, ws: Any) -> None:
        nonlocal finished_clients, last_receive
        seqs, record = received[k], latencies.append
        async for text in ws:
            now = time.monotonic()
            frame = json.loads(text)
            state = frame.get("state") if frame.get("type") == "cf_agent_state" else None
            if not isinstance(state, dict) or "seq" not in state:
                continue  # the frames sent on connect
            seq = state["seq"]
            seqs.append(seq)
            record(now - state["t"])
            last_receive = now
            if seq % workers == w:  # one of this worker's: done once every other local client has it
                counts[seq] = counts.get(seq, 0) + 1
                if counts[seq] == n - 1:
                    slots.release()
            if len(seqs) == expected[k]:
                finished_clients += 1
                if finished_clients == n:
                    complete.set()

    readers = [asyncio.ensure_future(read(k, ws)) for k, ws in enumerate(conns)]
    await asyncio.sleep(0.5)  # the frames sent on connect are drained
    print(json.dumps({"ready": True}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, lines.readline)  # "go"
    began = time.monotonic()
    for i in range(mine):
        await slots.acquire()
        k = i % n
        state = {"seq": i * workers + w, "from": offset + k, "t": time.monotonic()}
        if pad:
            state["pad"] = pad
        await conns[k].send(json.dumps({"type": "cf_agent_state", "state": state}, separators=(",", ":")))
    await asyncio.wait_for(complete.wait(), 900)
    for ws in conns:
        await ws.close()
    for reader in readers:
        reader.cancel()
    latencies.sort()
    path = job["out"] + f".{w}.json"
    Path(path).write_text(json.dumps({"received": received, "offset": offset}))
    return {"began": began, "last": last_receive, "latencies_ms": [x * 1000 for x in latencies[::7]],
            "p99_local_ms": latencies[int(len(latencies) * 0.99)] * 1000, "deliveries": len(latencies),
            "out": path}


async def hold_worker(job: dict, held: list[Any]) -> dict:
    """Connect one idle client to each URL of the job, ``job["gate"]`` at a time; keep them open."""
    import websockets

    gate = asyncio.Semaphore(job["gate"])

    async def one(url: str) -> Any:
        async with gate:
            ws = await websockets.connect(url, ping_interval=None, compression=None, open_timeout=120)
            await ws.recv()  # the first frame on connect (the identity): the agent took the connection
            return ws

    began = time.monotonic()
    conns = await asyncio.gather(*(one(url) for url in job["urls"]))
    held.extend(conns)
    return {"connected": len(conns), "seconds": time.monotonic() - began}


async def wake_worker(job: dict, held: list[Any]) -> dict:
    """For each chosen client: an RPC that wakes its hibernated agent, then the same RPC to it awake."""
    wake: list[float] = []
    awake: list[float] = []
    for index in job["indices"]:
        ws = held[index]
        for sink in (wake, awake):
            call_id = f"{index}-{len(sink)}"
            began = time.monotonic()
            await ws.send(json.dumps({"type": "rpc", "id": call_id, "method": "ping", "args": []}))
            while True:
                frame = json.loads(await ws.recv())
                if frame.get("type") == "rpc" and frame.get("id") == call_id:
                    break
            sink.append((time.monotonic() - began) * 1000)
            assert frame["success"], frame
        await asyncio.sleep(job["pause"])
    return {"wake_ms": wake, "awake_ms": awake}


async def release_worker(held: list[Any]) -> dict:
    count = len(held)

    async def close(ws: Any) -> None:
        try:
            await asyncio.wait_for(ws.close(), 10)
        except Exception:
            pass

    await asyncio.gather(*(close(ws) for ws in held))
    held.clear()
    return {"closed": count}


# -- part 1 and 2: fan-out ------------------------------------------------------------------------


def run_fanout(workers: list[Worker], server: Server, args: argparse.Namespace, out: Path, *,
               slow: bool = False, pad: int = 0, root: Path | None = None) -> dict:
    """One fan-out run on ``server``; checks every delivery, returns the figures (and the slow client's fate)."""
    per = [args.clients // len(workers) + (1 if i < args.clients % len(workers) else 0) for i in range(len(workers))]
    offsets = [sum(per[:i]) for i in range(len(workers))]
    jobs = [{"job": "fanout", "url": server.url("fan"), "worker": i, "workers": len(workers), "offset": offsets[i],
             "clients": per[i], "updates": args.updates, "window": args.window, "out": str(out), "pad": pad}
            for i in range(len(workers))]
    for worker, job in zip(workers, jobs):
        worker.send(job)
    for worker in workers:
        assert worker.answer()["ready"]
    slow_sock = connect_without_reading(server.url("fan")) if slow else None
    time.sleep(0.3)
    before = server.rss_mb()
    peak = [before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            peak.append(server.rss_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    for worker in workers:
        worker.send({"go": True})
    results = [worker.answer() for worker in workers]
    stop.set()
    sampler.join()
    dropped = server.http("/bench-stats")["dropped"] if server.kind == "ours" else None
    if slow_sock is not None:
        slow_sock.close()
    received: list[list[int]] = []
    for result in results:
        data = json.loads(Path(result["out"]).read_text())
        received.extend(data["received"])
        os.unlink(result["out"])
    mine = args.updates // len(workers)
    check_fanout(received, len(workers), mine, per, offsets)
    if root is not None:  # the file holds the last update of the global order (the last one client 0 or 1 saw)
        server.stop()
        stored = last_stored(root)
        sender = offsets[stored % len(workers)] + (stored // len(workers)) % per[stored % len(workers)]
        assert stored == received[1 if sender == 0 else 0][-1], "the file missed the last update"
    latencies = sorted(x for r in results for x in r["latencies_ms"])
    began, last = min(r["began"] for r in results), max(r["last"] for r in results)
    return {
        "per_s": mine * len(workers) / (last - began),
        "p50_ms": latencies[len(latencies) // 2],
        "p99_ms": latencies[int(len(latencies) * 0.99)],
        "deliveries": sum(r["deliveries"] for r in results),
        "rss_growth_mb": max(peak) - before,
        "dropped": dropped,
    }


def check_fanout(received: list[list[int]], workers: int, mine: int, per: list[int], offsets: list[int]) -> None:
    """None lost or doubled; each sender's order kept; one global order for everyone (else AssertionError)."""
    def sender(seq: int) -> int:
        w, i = seq % workers, seq // workers
        return offsets[w] + i % per[w]

    everything = {i * workers + w for w in range(workers) for i in range(mine)}
    for k, seqs in enumerate(received):
        expected = {seq for seq in everything if sender(seq) != k}
        assert len(seqs) == len(expected) and set(seqs) == expected, f"client {k}: lost or doubled updates"
        last_from: dict[int, int] = {}
        for seq in seqs:
            assert last_from.get(sender(seq), -1) < seq, f"client {k}: updates of sender {sender(seq)} out of order"
            last_from[sender(seq)] = seq
    for ref in (received[0], received[1]):
        position = {seq: i for i, seq in enumerate(ref)}
        for k, seqs in enumerate(received):
            places = [position[seq] for seq in seqs if seq in position]
            assert places == sorted(places), f"client {k} saw another order than its peers"


def connect_without_reading(url: str) -> socket.socket:
    """A client that completes the WebSocket handshake and then never reads (a small receive buffer)."""
    host, rest = url.removeprefix("ws://").split("/", 1)
    name, port = host.split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((name, int(port)))
    sock.sendall((f"GET /{rest} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def last_stored(root: Path) -> int:
    from agentlab import get_agent

    stored = get_agent(Bench, "fan", root=root)
    try:
        return int(stored.state["seq"])
    finally:
        stored.close()


def part_fanout(workers: list[Worker], args: argparse.Namespace, tmp: Path) -> list[str]:
    ours: list[dict[str, Any]] = []
    anchor: list[dict[str, Any]] = []
    for run in range(args.repeats):
        for label in (("ours", "anchor") if run % 2 == 0 else ("anchor", "ours")):
            root = tmp / f"fan-{run}"
            server = Server(label, root)
            try:
                result = run_fanout(workers, server, args, tmp / f"fan-{run}-{label}",
                                    root=root if label == "ours" else None)
            finally:
                server.stop()
            (ours if label == "ours" else anchor).append(result)
            print(f"  run {run} {label:>6}: {result['per_s']:7.0f} updates/s, latency p50 {result['p50_ms']:7.1f} "
                  f"ms, p99 {result['p99_ms']:7.1f} ms, {result['deliveries']} deliveries checked", flush=True)
    lines = [f"fan-out: {args.clients} clients in {len(workers)} client processes, {args.updates} updates, window "
             f"{args.window} per process; none lost or doubled, per-sender order kept, one global order, the file "
             "holds the last update (checked every run)",
             f"  updates/s      agentlab {span([r['per_s'] for r in ours], '{:.0f}')}   bare websockets "
             f"{span([r['per_s'] for r in anchor], '{:.0f}')}   ratio "
             f"{span([o['per_s'] / a['per_s'] for o, a in zip(ours, anchor)], '{:.2f}')}"]
    for key in ("p50_ms", "p99_ms"):
        lines.append(f"  latency {key[:3]}    agentlab {span([r[key] for r in ours])} ms   bare websockets "
                     f"{span([r[key] for r in anchor])} ms   ratio "
                     f"{span([o[key] / a[key] for o, a in zip(ours, anchor)], '{:.2f}')}")
    return lines


def part_slow(workers: list[Worker], args: argparse.Namespace, tmp: Path) -> list[str]:
    # What the slow client is sent must outgrow what the kernel buffers for it (a send buffer autotuned up to
    # 4 MiB here, net.ipv4.tcp_wmem) plus the server's bound, or it is never found slow: 12 MiB in all.
    pad = args.pad or max(600, -(-12 * 2**20 // args.updates))
    runs: dict[bool, list[dict]] = {True: [], False: []}
    for run in range(args.repeats):
        for slow in ((True, False) if run % 2 == 0 else (False, True)):
            server = Server("ours", tmp / f"slow-{run}-{slow}", queue_bytes=args.slow_queue_bytes)
            try:
                result = run_fanout(workers, server, args, tmp / f"slow-{run}-{slow}", slow=slow, pad=pad)
            finally:
                server.stop()
            runs[slow].append(result)
            print(f"  run {run} {'with' if slow else 'without':>7} a slow client: p99 {result['p99_ms']:7.1f} ms, "
                  f"{result['per_s']:6.0f} updates/s, server memory +{result['rss_growth_mb']:.1f} MB, "
                  f"slow clients dropped {result['dropped']}", flush=True)
    with_, without = runs[True], runs[False]
    dropped = all(r["dropped"] == 1 for r in with_) and not any(r["dropped"] for r in without)
    return [f"a slow client: {args.clients} reading clients and one that never reads, state frames of "
            f"{pad + 60} bytes, per-client bound {args.slow_queue_bytes // 1024} KiB",
            f"  others' p99     with {span([r['p99_ms'] for r in with_])} ms   without "
            f"{span([r['p99_ms'] for r in without])} ms   ratio "
            f"{span([a['p99_ms'] / b['p99_ms'] for a, b in zip(with_, without)], '{:.2f}')}",
            f"  updates/s       with {span([r['per_s'] for r in with_], '{:.0f}')}   without "
            f"{span([r['per_s'] for r in without], '{:.0f}')}",
            f"  server memory growth during the run: with {span([r['rss_growth_mb'] for r in with_])} MB, without "
            f"{span([r['rss_growth_mb'] for r in without])} MB; the slow client {'was' if dropped else 'was NOT'} "
            "dropped (closed 1008) in every run"]


# -- part 3: idle clients of hibernated agents ----------------------------------------------------


def part_idle(workers: list[Worker], args: argparse.Namespace, tmp: Path) -> list[str]:
    count = args.idle
    shares = [list(range(i, count, len(workers))) for i in range(len(workers))]
    figures: dict[str, list[float]] = {"ours_kb": [], "anchor_kb": [], "connect_s": [], "rss_mb": []}
    wake: list[float] = []
    awake: list[float] = []
    root = tmp / "idle"
    for label in ("anchor", "ours"):
        server = Server(label, root, hibernate_after=1.0)
        try:
            warm = ask_all(workers[:1], [{"job": "hold", "urls": [server.url("warm")], "gate": 1}])
            time.sleep(2.5)
            before = server.rss_mb()
            began = time.monotonic()
            waves = 10
            for wave in range(waves):
                jobs = [{"job": "hold", "gate": 16,
                         "urls": [server.url(f"u{k}") for k in share[wave::waves]]} for share in shares]
                ask_all(workers, jobs)
                print(f"  {label}: wave {wave + 1}/{waves} connected, server {server.rss_mb():.0f} MB", flush=True)
            connect_s = time.monotonic() - began
            if label == "ours":
                deadline = time.monotonic() + 120
                while server.http("/bench-stats")["hibernated"] < count + 1 and time.monotonic() < deadline:
                    time.sleep(0.5)
                stats = server.http("/bench-stats")
                assert stats["hibernated"] == count + 1 and stats["sockets"] == count + 1, stats
            time.sleep(3.0)
            after = server.rss_mb()
            per_kb = (after - before) * 1024 / count
            figures[f"{label}_kb"].append(per_kb)
            if label == "ours":
                figures["connect_s"].append(connect_s)
                figures["rss_mb"].append(after)
                # Worker 0's held connections: index 0 is the warm one, then its share in connection order.
                rng = random.Random(7)
                held = 1 + len(shares[0])
                picks = rng.sample(range(1, held), min(args.wakes, held - 1))
                answer = ask_all(workers[:1], [{"job": "wake", "indices": picks, "pause": 0.02}])[0]
                wake, awake = answer["wake_ms"], answer["awake_ms"]
            print(f"  {label}: {count} idle clients, {per_kb:.1f} KB each, server {after:.0f} MB, connected in "
                  f"{connect_s:.0f} s", flush=True)
        finally:
            ask_all(workers, [{"job": "release"}] * len(workers))
            server.stop()
        del warm
    lines = [f"idle clients of hibernated agents: {count} clients, each of its own agent, connected in 10 waves",
             f"  memory per idle client   agentlab (agent hibernated) {span(figures['ours_kb'])} KB   bare websockets "
             f"{span(figures['anchor_kb'])} KB   ratio "
             f"{span([o / a for o, a in zip(figures['ours_kb'], figures['anchor_kb'])], '{:.2f}')}",
             f"  server resident memory with all {count} hibernated: {span(figures['rss_mb'], '{:.0f}')} MB; "
             f"connecting them (creating each agent) took {span(figures['connect_s'], '{:.0f}')} s"]
    if wake:
        lines.append(f"  wake: RPC to a hibernated agent p50 {pct(wake, 50):.1f} ms, p99 {pct(wake, 99):.1f} ms;"
                     f" the same RPC awake p50 {pct(awake, 50):.1f} ms, p99 {pct(awake, 99):.1f} ms "
                     f"({len(wake)} agents, one at a time)")
    return lines


# -- main -----------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


def span(values: list[float], fmt: str = "{:.1f}") -> str:
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(min(values))}-{fmt.format(max(values))} (median {fmt.format(statistics.median(values))})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="fanout,slow,idle")
    parser.add_argument("--workers", type=int, default=4, help="client processes")
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--updates", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=2, help="updates in flight per client process")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pad", type=int, default=0, help="extra bytes in each state frame of the slow part "
                        "(default: enough for 12 MiB to the slow client over the run)")
    parser.add_argument("--slow-queue-bytes", type=int, default=256 * 1024)
    parser.add_argument("--idle", type=int, default=10_000)
    parser.add_argument("--wakes", type=int, default=400)
    parser.add_argument("--server", choices=("ours", "anchor"), help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--hibernate-after", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.server:
        try:
            server_main(args.server, args.root, args.hibernate_after, args.slow_queue_bytes)
        except KeyboardInterrupt:
            pass
        return 0
    if args.worker:
        worker_main()
        return 0
    from _timing import machine_check

    print(f"machine check: {machine_check():.0f} ms", flush=True)
    parts = {part: fn for part, fn in (("fanout", part_fanout), ("slow", part_slow), ("idle", part_idle))
             if part in args.parts.split(",")}
    report: list[str] = []
    workers = [Worker() for _ in range(args.workers)]
    try:
        with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
            for name, part in parts.items():
                print(f"{name}:", flush=True)
                report += ["", *part(workers, args, Path(tmp))]
    finally:
        for worker in workers:
            worker.stop()
    print("\n".join(report))
    print(f"\nmachine check: {machine_check():.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
