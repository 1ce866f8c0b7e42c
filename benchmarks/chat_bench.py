"""Per-turn overhead of agentlab around a Claude call: everything except the API itself.

A ChatAgent with four context blocks (a readonly soul, a writable memory, a skill collection and a searchable
notes block) answers on a 200-message branch: each measured turn branches from the same point (message 198) with
``ask(..., parent_id=...)``, so every call sends 199 messages and the branch is 200 long afterwards. The API is
the offline transport (agentlab.chat._offline) with a zero-latency responder; the time spent inside its handler (JSON
parsing, the simulated prompt cache) stands in for the network and the model, and is subtracted. What remains
is agentlab plus the anthropic SDK: append the question, read the branch, build the request, the SDK's encoding
and parsing, store the reply and the usage row.

Wall time depends on what else the machine runs; CPU time (``time.process_time``, every thread of this process) is
printed next to it as a figure less sensitive to other load.

Run: .venv/bin/python benchmarks/chat_bench.py [--turns 200]
Target (issue 5): p50 <= 20 ms.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _timing import machine_check, percentiles, row

from agentlab import get_agent
from agentlab.chat._chat_agent import ChatAgent
from agentlab.chat._offline import OfflineClaude

WORDS = ("the model keeps a memory of what the user said about trips budgets food flights hotels and family "
         "so that later answers can use it without asking again").split()


class Soul:
    """A readonly block."""

    def get(self) -> str:
        return "You are Ada, a careful travel assistant. You answer briefly and never invent bookings."


class Notes:
    """A searchable block over a few fixed notes."""

    notes = {f"note-{i}": f"Note {i}: " + " ".join(WORDS[i % 7:i % 7 + 12]) for i in range(30)}

    def get(self) -> str:
        return f"{len(self.notes)} notes; search them with search_context."

    def search(self, query: str) -> str:
        hits = [f"{k}: {v}" for k, v in self.notes.items() if query.lower() in v.lower()]
        return "\n".join(hits[:5]) or "No results found."

    def set(self, key: str, content: str, metadata: object = None) -> None:
        self.notes[key] = content


class BenchAgent(ChatAgent):
    instructions = "You are a benchmark assistant."

    def configure_session(self, session):
        from agentlab.context._providers import AgentSkillProvider

        return (session.with_context("soul", provider=Soul())
                .with_context("memory", description="Facts about the user", max_tokens=1100)
                .with_context("skills", provider=AgentSkillProvider(self))
                .with_context("knowledge", provider=Notes())
                .with_cached_prompt())


def sentence(i: int, n: int = 24) -> str:
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(n)) + f" ({i})."


def build_branch(agent: BenchAgent, n: int) -> str:
    """Append ``n`` messages (text turns with a tool pair every 10 messages); returns the last id."""
    messages: list[dict[str, Any]] = []
    i = 0
    while len(messages) < n:
        if i % 10 == 8 and len(messages) + 2 <= n:
            call = f"toolu_bench_{i}"
            messages.append({"id": f"m{i}a", "role": "assistant", "parts": [
                {"type": "text", "text": sentence(i, 8)},
                {"type": "tool_use", "id": call, "name": "search_context",
                 "input": {"label": "knowledge", "query": "memory"}}]})
            messages.append({"id": f"m{i}b", "role": "user", "parts": [
                {"type": "tool_result", "tool_use_id": call, "content": "note-1: " + sentence(i, 30)}]})
        else:
            role = "user" if len(messages) % 2 == 0 else "assistant"
            messages.append({"id": f"m{i}", "role": role, "parts": [{"type": "text", "text": sentence(i)}]})
        i += 1
    agent.session.append_messages(messages[:n])
    return messages[n - 1]["id"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()

    handler_ms: list[float] = []
    handler_cpu: list[float] = []
    speed_before = machine_check()

    def respond(body: dict) -> list[dict]:
        return [{"type": "text", "text": "Noted."}]

    offline = OfflineClaude(respond)
    inner = offline.handler

    def timed_handler(request):  # the stand-in for the network and the model: measured and subtracted
        start, cpu = time.perf_counter(), time.process_time()
        try:
            return inner(request)
        finally:
            handler_ms.append((time.perf_counter() - start) * 1000)
            handler_cpu.append((time.process_time() - cpu) * 1000)

    offline.handler = timed_handler  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        agent = get_agent(BenchAgent, "bench", root=tmp)
        agent.use_client(offline.client(max_retries=0))
        base = build_branch(agent, 198)
        assert agent.session.path_length(base) == 198
        for _ in range(5):  # warm-up: SDK import paths, prompt freeze, DuckDB caches
            agent.ask("warm up", parent_id=base)
        handler_ms.clear()
        handler_cpu.clear()
        totals: list[float] = []
        cpu_totals: list[float] = []
        for i in range(args.turns):
            start, cpu = time.perf_counter(), time.process_time()
            turn = agent.ask(f"What do you remember about my trip? ({i})", parent_id=base)
            totals.append((time.perf_counter() - start) * 1000)
            cpu_totals.append((time.process_time() - cpu) * 1000)
        assert agent.session.path_length(turn.leaf_id) == 200
        assert agent.session.path_length(turn.start_id) == 199  # what each call sent (same-role runs are joined)
        blocks = [b.label for b in agent.session.get_context_blocks()]
        overhead = [t - h for t, h in zip(totals, handler_ms)]
        cpu_overhead = [t - h for t, h in zip(cpu_totals, handler_cpu)]
        body = offline.requests[-1]

        # anchor: the SDK alone sending the same request through the same transport
        client = offline.client(max_retries=0)
        sdk_ms = []
        for _ in range(100):
            start = time.perf_counter()
            client.messages.with_raw_response.create(**body).http_response.json()
            sdk_ms.append((time.perf_counter() - start) * 1000)
        handler_tail = handler_ms[-100:]
        sdk_only = [s - h for s, h in zip(sdk_ms, handler_tail)]
        agent.close()

    print(f"agentlab chat turn overhead: {args.turns} turns, branch of 200 messages, blocks {blocks}; "
          f"machine check {speed_before:.0f} -> {machine_check():.0f} ms (fast ~120, slow ~200)")
    print(row("ask() total wall time", percentiles(totals)))
    print(row("  of which the offline API handler", percentiles(handler_ms[:args.turns])))
    print(row("ask() minus the API handler (target p50<=20)", percentiles(overhead)))
    print(row("  the same in CPU time (all threads)", percentiles(cpu_overhead)))
    print(row("anchor: the SDK alone, same request", percentiles(sdk_only)))


if __name__ == "__main__":
    main()
