"""Widget figures, measured in a real browser (JupyterLab in Debian's Chromium, through the e2e harness).

1. ``set_state`` in the kernel -> the new text rendered in the page: 20 updates from a cell and 20 from a
   background thread, 250 ms apart. The kernel records ``time.time()`` just before each ``set_state``; a
   MutationObserver in the page records ``Date.now()`` when the state view's text first shows the new value.
   Both clocks are the same machine's wall clock.
2. First render of a 10,000-message BranchTree: a chat-like tree (a long conversation with regenerated
   branches) and a worst case (each message under a uniformly random earlier one: ~2,500 branch points).
   Reported: the kernel's plan build, the browser's own render (``render()`` to the first painted frame),
   and end to end (the kernel starts building -> the outline is painted).

Run: .venv/bin/python benchmarks/widgets_bench.py [--screenshots DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))
from harness import LabPage, LabServer, launch_chromium, write_notebook  # noqa: E402

SETUP = '''
import json, random, threading, time
from agentlab import Agent, get_agent
from agentlab.session.session import Session
from agentlab.views import BranchTree, StateView

agent = get_agent(Agent, "bench")
agent.set_state({"tick": 0})
view = StateView(agent)
view
'''

OBSERVE = """() => {
    window.__seen = {};
    const target = document.querySelector('.agentlab-state [data-role=state-tree]');
    const look = () => {
        const match = target.innerText.match(/tick: (\\d+)/);
        if (match && !(match[1] in window.__seen)) window.__seen[match[1]] = Date.now();
    };
    new MutationObserver(look).observe(target, {childList: true, subtree: true, characterData: true});
}"""

PUMP_CELL = '''
stamps = {}
for i in range(1, 21):
    time.sleep(0.25)
    stamps[i] = time.time()
    agent.set_state({"tick": i})
time.sleep(0.5)
print(json.dumps(stamps))
'''

PUMP_THREAD = '''
stamps = {}
def pump():
    for i in range(101, 121):
        time.sleep(0.25)
        stamps[i] = time.time()
        agent.set_state({"tick": i})
worker = threading.Thread(target=pump)
worker.start()
worker.join()
time.sleep(0.5)
print(json.dumps(stamps))
'''

BUILD_TREES = '''
words = [f"w{k}" for k in range(2000)]
def text(rng):
    return " ".join(rng.choice(words) for _ in range(12))

def chat_like(n, seed=7):
    """A long conversation; now and then a regenerated reply starts a side branch of 1-30 messages."""
    rng, msgs, chain, k = random.Random(seed), [], [], 0
    while len(msgs) < n:
        if chain and rng.random() < 0.03:
            parent = rng.choice(chain[-300:])
            for _ in range(rng.randint(1, 30)):
                mid = f"b{k}"; k += 1
                msgs.append({"id": mid, "role": "assistant", "parent_id": parent,
                             "parts": [{"type": "text", "text": text(rng)}]})
                parent = mid
        else:
            mid = f"c{k}"; k += 1
            msgs.append({"id": mid, "role": "user" if len(chain) % 2 == 0 else "assistant",
                         "parent_id": chain[-1] if chain else None, "parts": [{"type": "text", "text": text(rng)}]})
            chain.append(mid)
    return msgs[:n]

def uniform(n, seed=7):
    rng = random.Random(seed)
    return [{"id": f"r{k}", "role": "user" if k % 2 else "assistant", "parent_id": f"r{rng.randrange(k)}" if k else None,
             "parts": [{"type": "text", "text": text(rng)}]} for k in range(n)]

chat = Session(agent, "chat-like"); chat.append_messages(chat_like(10_000))
worst = Session(agent, "uniform"); worst.append_messages(uniform(10_000))
print(json.dumps([chat.path_length(), worst.path_length()]))
'''

SHOW_TREE = '''
t0 = time.time()
tree_{name} = BranchTree({session})
display(tree_{name})
print(json.dumps({{"t0": t0, "build_ms": tree_{name}.stats["build_ms"], "stats": tree_{name}.stats}}))
'''


def latencies(stamps: dict[str, float], seen: dict[str, int]) -> list[float]:
    return [seen[k] - stamps[k] * 1000 for k in stamps if k in seen]


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    return (f"median {statistics.median(ordered):7.1f} ms   min {ordered[0]:7.1f}   max {ordered[-1]:7.1f}   "
            f"(n={len(ordered)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--screenshots", type=Path, default=None, help="folder for screenshots of the pages")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root = base / "notebooks"
        root.mkdir()
        write_notebook(root / "bench.ipynb", [SETUP])
        server = LabServer(root, env={"AGENTLAB_HOME": str(base / "home")})
        started = time.perf_counter()
        server.start()
        print(f"JupyterLab up in {time.perf_counter() - started:.1f} s")
        try:
            with sync_playwright() as playwright:
                browser = launch_chromium(playwright)
                lab = LabPage(browser, server, width=1500, height=1000)
                started = time.perf_counter()
                lab.open("bench.ipynb")
                lab.run_all()
                lab.page.wait_for_selector(".agentlab-state [data-role=state-tree]", timeout=120_000)
                print(f"notebook open and run in {time.perf_counter() - started:.1f} s")
                lab.page.evaluate(OBSERVE)

                from_cell = latencies(json.loads(lab.run_code(PUMP_CELL, timeout=120)), lab.page.evaluate("window.__seen"))
                from_thread = latencies(json.loads(lab.run_code(PUMP_THREAD, timeout=120)),
                                        lab.page.evaluate("window.__seen"))
                print("set_state -> text in the page, from a cell:   ", summary(from_cell))
                print("set_state -> text in the page, from a thread: ", summary(from_thread))
                print("set_state -> text in the page, all 40:        ", summary(from_cell + from_thread))

                print("10,000-message trees (path lengths):", lab.run_code(BUILD_TREES, timeout=300))
                for name, session in (("chat", "chat"), ("worst", "worst")):
                    shown = lab.page.locator(".agentlab-tree").count()
                    info = json.loads(lab.run_code(SHOW_TREE.format(name=name, session=session), timeout=300))
                    lab.page.wait_for_function(
                        f"() => document.querySelectorAll('.agentlab-tree[data-painted-at]').length > {shown}",
                        timeout=300_000)
                    tree = lab.page.locator(".agentlab-tree[data-painted-at]").nth(shown)
                    painted = int(tree.get_attribute("data-painted-at"))
                    render_ms = int(tree.get_attribute("data-first-render-ms"))
                    rows = int(tree.get_attribute("data-rows"))
                    stats = info["stats"]
                    print(f"BranchTree {name:<5} {stats['messages']} messages, {stats['branch_points']} branch points, "
                          f"{rows} outline rows: kernel build {info['build_ms']:.0f} ms, browser render {render_ms} ms, "
                          f"end to end {painted - info['t0'] * 1000:.0f} ms")
                    if args.screenshots:
                        args.screenshots.mkdir(parents=True, exist_ok=True)
                        tree.evaluate("el => el.scrollIntoView({block: 'start'})")
                        lab.screenshot(args.screenshots / f"tree-{name}.png")
                lab.close()
                browser.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
