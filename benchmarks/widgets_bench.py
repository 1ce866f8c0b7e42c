"""Widget figures, measured in a real browser (JupyterLab in Debian's Chromium, through the e2e harness).

1. ``set_state`` in the kernel -> the new text rendered in the page: 20 updates from a cell, 250 ms apart. The
   kernel records ``time.time()`` just before each ``set_state``; a MutationObserver in the page records
   ``Date.now()`` when the state view's text first shows the new value (one machine, one wall clock).
2. First render of a 10,000-message BranchTree: a chat-like tree (a long conversation with regenerated branches)
   and a worst case (each message under a uniformly random earlier one: ~2,500 branch points). Reported: the
   kernel's plan build, the browser's own render (``render()`` to the first outline painted with its rows), and
   end to end (the kernel starts building -> the outline is painted).
3. A 2,000-message chat-like BranchTree: first render (end to end), expanding a collapsed run (click -> the
   revealed rows painted) and a search (Enter -> the best hit highlighted in view). Anchor: the same three on a
   20-message conversation in the same page, alternated with it; the ratio says what the tree's size costs.

With ``--baseline DIR`` (another checkout of agentlab, e.g. main before a change), figures 1 and 2 are measured
on a second JupyterLab whose kernel imports that checkout, alternating with this one, and reported as ratios
(this / baseline) with their range over the repeats.

Run: .venv/bin/python benchmarks/widgets_bench.py [--baseline ../main] [--repeats 3] [--screenshots DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for tests.e2e.harness
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import machine_check

from tests.e2e.harness import LabPage, LabServer, launch_chromium, write_notebook

HERE = Path(__file__).resolve().parent.parent

SETUP = '''
import json, random, threading, time
from agentlab import Agent, get_agent
from agentlab.session._session import Session
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
for i in range(START, START + 20):
    time.sleep(0.25)
    stamps[i] = time.time()
    agent.set_state({"tick": i})
time.sleep(0.5)
print(json.dumps(stamps))
'''

GENERATORS = '''
words = [f"w{k}" for k in range(2000)]
def text(rng):
    return " ".join(rng.choice(words) for _ in range(12))

def chat_like(n, seed=7, prefix=""):
    """A long conversation; now and then a regenerated reply starts a side branch of 1-30 messages."""
    rng, msgs, chain, k = random.Random(seed), [], [], 0
    while len(msgs) < n:
        if chain and rng.random() < 0.03:
            parent = rng.choice(chain[-300:])
            for _ in range(rng.randint(1, 30)):
                mid = f"{prefix}b{k}"; k += 1
                msgs.append({"id": mid, "role": "assistant", "parent_id": parent,
                             "parts": [{"type": "text", "text": text(rng)}]})
                parent = mid
        else:
            mid = f"{prefix}c{k}"; k += 1
            msgs.append({"id": mid, "role": "user" if len(chain) % 2 == 0 else "assistant",
                         "parent_id": chain[-1] if chain else None, "parts": [{"type": "text", "text": text(rng)}]})
            chain.append(mid)
    return msgs[:n]

def uniform(n, seed=7):
    rng = random.Random(seed)
    return [{"id": f"r{k}", "role": "user" if k % 2 else "assistant",
             "parent_id": f"r{rng.randrange(k)}" if k else None,
             "parts": [{"type": "text", "text": text(rng)}]} for k in range(n)]
'''

BUILD_10K = GENERATORS + '''
chat = Session(agent, "chat-like"); chat.append_messages(chat_like(10_000))
worst = Session(agent, "uniform"); worst.append_messages(uniform(10_000))
print(json.dumps([chat.path_length(), worst.path_length()]))
'''

BUILD_2K = GENERATORS + '''
big = Session(agent, "chat-2000"); big.append_messages(chat_like(2_000, seed=11, prefix="B"))
small = Session(agent, "chat-20"); small.append_messages(chat_like(20, seed=11, prefix="S"))
# Search words present in both trees (the small one's words are in the big one: same seed, same start).
shared = [w for m in small.get_history() for w in m["parts"][0]["text"].split()]
print(json.dumps(sorted(set(shared))))
'''

SHOW_TREE = '''
t0 = time.time()
tree_{name} = BranchTree({session})
display(tree_{name})
print(json.dumps({{"t0": t0, "build_ms": tree_{name}.stats["build_ms"], "stats": tree_{name}.stats}}))
'''

# Click the first collapsed run's button; done when the outline has more rows and every row in view is of the
# new version.
EXPAND = """async (index) => {
    const tree = document.querySelectorAll('.agentlab-tree')[index];
    const button = tree.querySelector('.al-expand');
    if (!button) return -1;
    const before = Number(tree.dataset.rows);
    const start = performance.now();
    button.click();
    const frame = () => new Promise((resolve) => requestAnimationFrame(resolve));
    while (!(Number(tree.dataset.rows) > before && tree.dataset.loadedVersion === tree.dataset.version)) await frame();
    return performance.now() - start;
}"""

# Type a word and press Enter; done when a highlighted hit row marking the word is painted from the new version.
SEARCH = """async ([index, word]) => {
    const tree = document.querySelectorAll('.agentlab-tree')[index];
    const box = tree.querySelector('[data-role=tree-search]');
    const start = performance.now();
    box.value = word;
    box.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', bubbles: true}));
    const frame = () => new Promise((resolve) => requestAnimationFrame(resolve));
    const found = () => [...tree.querySelectorAll('.al-row.al-hit mark')].some((m) => m.textContent === word)
        && tree.dataset.loadedVersion === tree.dataset.version;
    while (!found()) await frame();
    return performance.now() - start;
}"""


def latencies(stamps: dict[str, float], seen: dict[str, int]) -> list[float]:
    return [seen[k] - stamps[k] * 1000 for k in stamps if k in seen]


def spread(samples: list[float], unit: str = " ms") -> str:
    ordered = sorted(samples)
    return (f"median {statistics.median(ordered):8.1f}{unit}  range {ordered[0]:.1f}-{ordered[-1]:.1f}{unit} "
            f"(n={len(ordered)})")


def ratios(new: list[float], old: list[float]) -> str:
    pairs = sorted(a / b for a, b in zip(new, old) if b > 0)
    return f"ratio {statistics.median(pairs):5.2f} (range {pairs[0]:.2f}-{pairs[-1]:.2f}, n={len(pairs)})"


class Side:
    """One JupyterLab (kernel importing one checkout) and its page."""

    def __init__(self, name: str, checkout: Path, base: Path, browser: object) -> None:
        root = base / name / "notebooks"
        root.mkdir(parents=True)
        write_notebook(root / "bench.ipynb", [SETUP])
        env = {"AGENTLAB_HOME": str(base / name / "home"), "PYTHONPATH": str(checkout)}
        self.name = name
        self.server = LabServer(root, env=env).start()
        self.lab = LabPage(browser, self.server, width=1500, height=1000)
        self.lab.open("bench.ipynb")
        self.lab.run_all()
        self.lab.page.wait_for_selector(".agentlab-state [data-role=state-tree]", timeout=120_000)
        self.lab.page.evaluate(OBSERVE)
        where = self.lab.run_code("import agentlab; print(agentlab.__file__)")
        print(f"{name}: kernel imports {where}")
        self.tick = 1

    def state_latency(self) -> float:
        code = PUMP_CELL.replace("START", str(self.tick))
        self.tick += 20
        stamps = json.loads(self.lab.run_code(code, timeout=120))
        return statistics.median(latencies(stamps, self.lab.page.evaluate("window.__seen")))

    def show_tree(self, name: str, session: str) -> dict[str, float]:
        page = self.lab.page
        shown = page.locator(".agentlab-tree").count()
        info = json.loads(self.lab.run_code(SHOW_TREE.format(name=name, session=session), timeout=300))
        page.wait_for_function(
            f"() => document.querySelectorAll('.agentlab-tree[data-painted-at]').length > {shown}", timeout=300_000)
        tree = page.locator(".agentlab-tree[data-painted-at]").nth(shown)
        tree.scroll_into_view_if_needed()
        return {"index": shown, "build": info["build_ms"], "render": int(tree.get_attribute("data-first-render-ms")),
                "end_to_end": int(tree.get_attribute("data-painted-at")) - info["t0"] * 1000,
                "rows": int(tree.get_attribute("data-rows")), "messages": info["stats"]["messages"],
                "branch_points": info["stats"]["branch_points"]}

    def close(self) -> None:
        self.lab.close()
        self.server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, default=None, help="another agentlab checkout to compare with")
    parser.add_argument("--repeats", type=int, default=3, help="alternated repeats of each figure")
    parser.add_argument("--screenshots", type=Path, default=None, help="folder for screenshots of the trees")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    print(f"machine check {machine_check():.0f} ms, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        sides = [Side("this", HERE, Path(tmp), browser)]
        if args.baseline:
            sides.append(Side("baseline", args.baseline.resolve(), Path(tmp), browser))
        try:
            # 1. set_state -> text in the page, alternating sides.
            state: dict[str, list[float]] = {s.name: [] for s in sides}
            for _ in range(args.repeats):
                for side in sides:
                    state[side.name].append(side.state_latency())
            for side in sides:
                print(f"set_state -> text in the page ({side.name}): {spread(state[side.name])}")
            if args.baseline:
                print(f"  this / baseline: {ratios(state['this'], state['baseline'])}")

            # 2. 10,000-message trees, alternating sides.
            for side in sides:
                print(f"{side.name}: 10,000-message trees (path lengths):", side.lab.run_code(BUILD_10K, timeout=600))
            trees: dict[tuple[str, str], list[dict[str, float]]] = {}
            for k in range(args.repeats):
                for name, session in (("chat", "chat"), ("worst", "worst")):
                    for side in sides:
                        trees.setdefault((side.name, name), []).append(side.show_tree(f"{name}{k}", session))
            for name in ("chat", "worst"):
                for side in sides:
                    runs = trees[(side.name, name)]
                    print(f"10k {name:<5} ({side.name}): {runs[0]['messages']} messages, {runs[0]['branch_points']} "
                          f"branch points, {runs[0]['rows']} rows; kernel build {spread([r['build'] for r in runs])}; "
                          f"browser render {spread([r['render'] for r in runs])}; "
                          f"end to end {spread([r['end_to_end'] for r in runs])}")
                if args.baseline:
                    new, old = trees[("this", name)], trees[("baseline", name)]
                    for key in ("build", "render", "end_to_end"):
                        print(f"  {key} this / baseline: {ratios([r[key] for r in new], [r[key] for r in old])}")
            if args.screenshots:
                args.screenshots.mkdir(parents=True, exist_ok=True)
                sides[0].lab.screenshot(args.screenshots / "tree-10k.png")

            # 3. The 2,000-message tree against a 20-message one, in this checkout.
            this = sides[0]
            words = json.loads(this.lab.run_code(BUILD_2K, timeout=300))
            figures: dict[str, dict[str, list[float]]] = {"20": {}, "2000": {}}
            for k in range(args.repeats * 2):
                for size, session in (("20", "small"), ("2000", "big")):
                    shown = this.show_tree(f"s{size}_{k}", session)
                    got = figures[size]
                    got.setdefault("first render (end to end)", []).append(shown["end_to_end"])
                    got.setdefault("expand a collapsed run", []).append(
                        this.lab.page.evaluate(EXPAND, shown["index"]))
                    got.setdefault("search (Enter -> hit shown)", []).append(
                        this.lab.page.evaluate(SEARCH, [shown["index"], words[k % len(words)]]))
                    got.setdefault("rows", []).append(shown["rows"])
            print(f"2,000-message tree ({int(figures['2000']['rows'][0])} outline rows) vs a 20-message one "
                  f"({int(figures['20']['rows'][0])} rows), alternated:")
            for figure in ("first render (end to end)", "expand a collapsed run", "search (Enter -> hit shown)"):
                big, small = figures["2000"][figure], figures["20"][figure]
                print(f"  {figure:<28} 2,000: {spread(big)}   20: {spread(small)}   {ratios(big, small)}")
            if args.screenshots:
                this.lab.screenshot(args.screenshots / "tree-2000.png")
        finally:
            for side in sides:
                side.close()
            browser.close()
    print(f"machine check {machine_check():.0f} ms, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
