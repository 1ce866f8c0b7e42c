"""The widgets in a real browser: JupyterLab in Debian's Chromium, driven by Playwright.

Each test opens its own notebook (its own kernel and agent). The notebook shows the three views on an agent
whose session has a branch, a tool call and its result, a long reply, a compaction and context blocks. The
tests change things from a cell and wait for the page to show them, click and type in the page and read the
result back from the kernel, and save screenshots of every view in JupyterLab's light and dark themes, where
the text of every highlighted element must keep a WCAG AA contrast (4.5:1) against what is behind it.

Screenshots go to the test's temporary folder, or to ``$AGENTLAB_SCREENSHOTS`` when it is set.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest

from tests.e2e.harness import write_notebook

pytestmark = pytest.mark.e2e

SETUP = '''
import json
from agentlab import Agent, get_agent
from agentlab.session._session import Session
from agentlab.views import BranchTree, Dashboard


class Soul:
    def get(self):
        return "You are a careful research assistant."


class Lab(Agent):
    initial_state = {"phase": "setup", "count": 0, "settings": {"model": "claude", "temperature": 0.2}}

    def on_start(self):
        self.session = (Session.create(self)
                        .with_context("soul", Soul())
                        .with_context("memory", description="Facts", max_tokens=60)
                        .with_cached_prompt())


def say(mid, role, text):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}]}


agent = get_agent(Lab, "NAME")
session = agent.session
session.append_messages([say("u1", "user", "Plan a trip to Porto"), say("a1", "assistant", "Three days: ..."),
                         say("u2", "user", "Cheaper please"), say("a2", "assistant", "Hostels and trains"),
                         say("u3", "user", "What about food?"), say("a3", "assistant", "Francesinha!")],
                        parent_id=None)
session.append_message(say("a2b", "assistant", "A regenerated, cheaper plan"), parent_id="u2")
session.append_messages([
    say("u3b", "user", "Thanks, book the trains"),
    {"id": "t1", "role": "assistant", "parts": [
        {"type": "text", "text": "Let me look up trains."},
        {"type": "tool_use", "id": "toolu_01", "name": "search_trains", "input": {"from": "Lisbon", "to": "Porto"}}]},
    {"id": "t2", "role": "user", "parts": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "08:00 Alfa Pendular, 2h49"}]},
    say("t3", "assistant", "Itinerary. " + "Day one: tiles and port wine. " * 40 + "THE END OF THE ITINERARY"),
])
session.context.set_block("memory", "User likes trains.")
session.freeze_system_prompt()
session.on_compaction(lambda history: {"from_message_id": "u1", "to_message_id": "a1",
                                       "summary": "The user plans a cheap trip to Porto."})
session.compact()  # an overlay with the session's tokens before and after; it refreshes the frozen prompt
session.context.set_block("memory", "User likes trains. User is vegetarian.")
dash = Dashboard(agent, session)
tree = dash.tree
'''

# The text colour of an element against what is behind it (its own and its ancestors' backgrounds, composited
# over the page), as a WCAG contrast ratio. Colours may be rgb(), rgba() or color(srgb ...) (what color-mix gives).
CONTRAST = """(selector) => {
    const parse = (c) => {
        let m = c.match(/^rgba?\\(([^)]*)\\)$/);
        if (m) { const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
                 return [p[0] / 255, p[1] / 255, p[2] / 255, p.length > 3 ? p[3] : 1]; }
        m = c.match(/^color\\(srgb ([^)]*)\\)$/);
        if (m) { const p = m[1].split(/[\\s\\/]+/).filter(Boolean).map(Number);
                 return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; }
        throw new Error('unparsed colour ' + c);
    };
    const over = (top, under) => [0, 1, 2].map((i) => top[i] * top[3] + under[i] * (1 - top[3]));
    const lum = (c) => { const f = (v) => (v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4));
                         return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
    const found = [...document.querySelectorAll(selector)]
        .filter((e) => e.offsetParent !== null && (e.textContent.trim() || e.value));
    return found.slice(0, 5).map((el) => {
        const chain = [];
        for (let n = el; n; n = n.parentElement) chain.push(n);
        let bg = [1, 1, 1];
        for (const n of chain.reverse()) bg = over(parse(getComputedStyle(n).backgroundColor), bg);
        const fg = over(parse(getComputedStyle(el).color), bg);
        const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
        return {text: (el.textContent.trim() || el.value).slice(0, 30), ratio: (a + 0.05) / (b + 0.05)};
    });
}"""

STATE = [".agentlab-state .al-key", ".agentlab-state .al-type-string", ".agentlab-state .al-type-number",
         ".agentlab-state .al-meta"]
STATE_EDITING = [".agentlab-state .al-error", ".agentlab-state .al-textarea"]
CONTEXT = [".agentlab-context .al-text", ".agentlab-context .al-differs .al-text", ".agentlab-context .al-tag",
           ".agentlab-context .al-stale", ".agentlab-context .al-changed", ".agentlab-context .al-change ins",
           ".agentlab-context .al-change del", ".agentlab-context .al-writer", ".agentlab-context .al-summary"]
TREE = [".agentlab-tree .al-row.al-on-selected .al-text", ".agentlab-tree .al-row.al-on-current .al-text",
        ".agentlab-tree .al-row.al-hit .al-text", ".agentlab-tree .al-chip.al-compact",
        ".agentlab-tree .al-chip.al-current", ".agentlab-tree .al-chip.al-fork", ".agentlab-tree .al-stats",
        ".agentlab-tree .al-msg-compaction .al-part-text",
        ".agentlab-tree .al-tab.al-active", ".agentlab-tree .al-path-head"]
COMPACTIONS = [".agentlab-tree .al-compaction-summary", ".agentlab-tree .al-compaction-tokens"]
COMPARE = [".agentlab-tree .al-compare-head", ".agentlab-tree .al-compare-side .al-part-text",
           ".agentlab-tree .al-compare-side .al-part-call pre", ".agentlab-tree .al-compare-side .al-part-result pre"]
HITS = [".agentlab-tree .al-hit-item"]


@pytest.fixture
def notebook(lab_server, lab):
    """A fresh notebook (its own kernel and agent) showing the dashboard, opened and run in the page."""
    name = f"widgets-{secrets.token_hex(3)}"
    write_notebook(lab_server.root / f"{name}.ipynb", [SETUP.replace("NAME", name), "dash"])
    lab.open(f"{name}.ipynb")
    lab.run_all()
    page = lab.page
    for selector in (".agentlab-state .al-tree", ".agentlab-tree .al-row[data-id]", ".agentlab-context .al-block"):
        page.wait_for_selector(selector, timeout=60_000)
    return lab


@pytest.fixture
def shots(tmp_path):
    folder = Path(os.environ.get("AGENTLAB_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def wait_text(page, selector, text, timeout=30_000):
    page.wait_for_function(
        "([s, t]) => { const e = document.querySelector(s); return !!e && e.innerText.includes(t); }",
        arg=[selector, text], timeout=timeout)


def wait_count(page, selector, n, timeout=30_000):
    page.wait_for_function("([s, n]) => document.querySelectorAll(s).length === n", arg=[selector, n], timeout=timeout)


def kernel_json(lab, expression):
    return json.loads(lab.run_code(f"import json\nprint(json.dumps({expression}))"))


class TestTheViewsInJupyterLab:
    def test_state_tree_and_context_render_update_and_select(self, notebook):
        lab, page = notebook, notebook.page
        assert "phase" in page.inner_text(".agentlab-state [data-role=state-tree]")
        outline = page.inner_text(".agentlab-tree [data-role=outline]")
        assert "A regenerated, cheaper plan" in outline and "Francesinha!" in outline
        assert page.locator(".agentlab-tree .al-compact").count() == 1  # the bracket's label on u1
        assert page.locator(".agentlab-tree .al-lane.al-on").count() >= 2  # ...and its bar over u1 and a1
        assert page.locator(".agentlab-tree .al-row[data-id=t3] .al-current").count() == 1
        # Tool calls and results are marked as such in the outline.
        assert "[tool search_trains]" in page.inner_text(".agentlab-tree .al-row[data-id=t1]")
        assert page.locator(".agentlab-tree .al-row.al-tool-result[data-id=t2]").count() == 1
        blocks = page.inner_text(".agentlab-context [data-role=context-blocks]")
        assert "User is vegetarian." in blocks and "changed since freeze" in blocks
        assert page.locator(".agentlab-context .al-fill").count() == 1  # the memory block's usage bar

        lab.run_code('agent.set_state({"phase": "in the browser", "count": 42})')
        wait_text(page, ".agentlab-state [data-role=state-tree]", '"in the browser"')
        assert "by server" in page.inner_text(".agentlab-state [data-role=state-meta]")

        # Clicking a message of the other branch selects that branch in the kernel.
        assert kernel_json(lab, "tree.selected_leaf") == "t3"
        page.click(".agentlab-tree .al-row[data-id=a3]")
        page.wait_for_selector(".agentlab-tree .al-row[data-id=a3].al-selected-leaf", timeout=30_000)
        assert kernel_json(lab, "[tree.selected_id, tree.selected_leaf]") == ["a3", "a3"]
        wait_text(page, ".agentlab-tree [data-role=path]", "Francesinha!")

        # An edit typed in the page goes through validation in the kernel.
        page.click(".agentlab-state .al-value.al-type-number >> nth=0")
        page.fill(".agentlab-state .al-input", "7")
        page.keyboard.press("Enter")
        wait_text(page, ".agentlab-state [data-role=state-meta]", "this view")
        assert kernel_json(lab, "agent.state['count']") == 7

    def test_a_not_json_error_clears_after_cancel_and_after_a_later_good_edit(self, notebook):
        lab, page = notebook, notebook.page
        error = page.locator(".agentlab-state [data-role=state-error]")
        page.click(".agentlab-state .al-button >> text=Edit JSON")
        page.fill(".agentlab-state .al-textarea", "{not json")
        page.click(".agentlab-state .al-button >> text=Save")
        assert error.is_visible() and error.inner_text().startswith("Not JSON")
        page.click(".agentlab-state .al-button >> text=Cancel")
        assert error.is_hidden()

        page.click(".agentlab-state .al-button >> text=Edit JSON")
        page.fill(".agentlab-state .al-textarea", "[1, 2")
        page.click(".agentlab-state .al-button >> text=Save")
        assert error.is_visible()
        page.fill(".agentlab-state .al-textarea", '{"phase": "edited", "count": 3}')
        page.click(".agentlab-state .al-button >> text=Save")
        wait_text(page, ".agentlab-state [data-role=state-tree]", '"edited"')
        assert error.is_hidden()
        assert kernel_json(lab, "agent.state") == {"phase": "edited", "count": 3}

    def test_a_memory_write_from_python_shows_at_once_with_its_timeline_row(self, notebook):
        lab, page = notebook, notebook.page
        lab.run_code('print(session.run_tool("set_context", {"label": "memory", "content": "Prefers trains to buses.", '
                     '"action": "append"}))')
        wait_text(page, ".agentlab-context [data-role=context-blocks]", "Prefers trains to buses.")
        newest = page.locator(".agentlab-context .al-write").first
        assert "model (set_context)" in newest.inner_text() and "memory" in newest.inner_text()
        assert newest.locator("ins").inner_text().strip() == "Prefers trains to buses."
        lab.run_code('session.set_block("memory", "Only trains.")')
        wait_text(page, ".agentlab-context [data-role=context-blocks]", "Only trains.")
        assert "Python" in page.locator(".agentlab-context .al-write").first.inner_text()
        page.locator(".agentlab-context .al-write-full").first.click()
        wait_text(page, ".agentlab-context .al-full-texts", "Prefers trains to buses.")
        assert page.locator(".agentlab-context .al-write").count() == 4  # two writes in the setup, two here

    def test_search_jump_expand_and_compare_in_the_tree(self, notebook):
        lab, page = notebook, notebook.page
        tree = ".agentlab-tree"
        page.fill(f"{tree} [data-role=tree-search]", "trains")
        page.keyboard.press("Enter")
        wait_count(page, f"{tree} .al-row.al-hit", 3)
        hits = page.locator(f"{tree} .al-row.al-hit")
        assert hits.count() == 3 and page.locator(f"{tree} .al-row.al-hit mark").count() >= 3
        assert kernel_json(lab, "sorted(tree.find('trains'))") == ["a2", "t1", "u3b"]
        assert page.locator(f"{tree} [data-panel=hits] .al-hit-item").count() == 3

        # Jump to the current leaf; the selected branch shows the tool call and result as such.
        page.click(f"{tree} .al-jump-current")
        page.click(f"{tree} .al-tab[data-tab=branch]")
        path = page.locator(f"{tree} [data-role=path]")
        call = path.locator(".al-part-call").first
        assert "search_trains" in call.inner_text() and '"Lisbon"' in call.inner_text()
        assert "08:00 Alfa Pendular" in path.locator(".al-part-result").first.inner_text()
        # A long message is cut; "show all" fetches it whole.
        long = path.locator(".al-msg[data-id=t3]")
        assert "THE END OF THE ITINERARY" not in long.inner_text()
        long.locator(".al-full").click()
        wait_text(page, f"{tree} .al-msg[data-id=t3]", "THE END OF THE ITINERARY")

        # The fork chip compares the two branches side by side from their fork point.
        page.click(f"{tree} .al-row[data-id=u2] .al-fork")
        page.wait_for_selector(f"{tree} .al-compare-cols", timeout=30_000)
        fork = page.inner_text(f"{tree} .al-compare-fork")
        assert "Cheaper please" in fork and "2 shared messages" not in fork and "3 shared messages" in fork
        sides = [page.inner_text(f"{tree} .al-compare-side[data-side={s}]") for s in "ab"]
        assert "A regenerated, cheaper plan" in sides[0] and "Hostels and trains" in sides[1]
        assert kernel_json(lab, "tree.comparison") == {"a": "t3", "b": "a3"}

        # The compactions tab lists the overlay with its range, summary and tokens.
        page.click(f"{tree} .al-tab[data-tab=compactions]")
        item = page.inner_text(f"{tree} .al-compaction")
        assert "u1" in item and "a1" in item and "The user plans a cheap trip to Porto." in item
        assert "session tokens" in item and "fewer" in item

    def test_a_2000_message_tree_fetches_only_the_rows_in_view(self, notebook):
        lab, page = notebook, notebook.page
        lab.run_code('''
import random
rng = random.Random(3)
big = Session(agent, "big")
big.append_messages([{"id": f"r{k}", "role": "user" if k % 2 else "assistant",
                      "parent_id": f"r{rng.randrange(k)}" if k else None,
                      "parts": [{"type": "text", "text": f"message {k}"}]} for k in range(2000)])
big_tree = BranchTree(big)
display(big_tree)
print(big_tree.row_count)
''')
        page.wait_for_selector(".agentlab-tree >> nth=1", timeout=60_000)
        big = page.locator(".agentlab-tree").nth(1)
        big.scroll_into_view_if_needed()
        page.wait_for_function("() => document.querySelectorAll('.agentlab-tree')[1].dataset.loadedVersion",
                               timeout=60_000)
        rows = int(big.get_attribute("data-rows"))
        assert rows > 1000
        assert big.locator(".al-window > div").count() < 200  # only the window is in the DOM
        big.locator(".al-outline").evaluate("el => { el.scrollTop = el.scrollHeight; }")
        last = f'[data-row="{rows - 1}"][data-id]'
        page.wait_for_function("(s) => !!document.querySelectorAll('.agentlab-tree')[1].querySelector(s)", arg=last,
                               timeout=30_000)


class TestReadableInBothThemes:
    def test_every_view_in_light_and_dark_with_screenshots(self, notebook, shots):
        lab, page = notebook, notebook.page
        tree = ".agentlab-tree"
        page.fill(f"{tree} [data-role=tree-search]", "trains")
        page.keyboard.press("Enter")
        wait_count(page, f"{tree} .al-row.al-hit", 3)
        page.click(f"{tree} .al-row[data-id=a3]")  # a selected branch besides the current one
        page.wait_for_selector(f"{tree} .al-row[data-id=a3].al-selected-leaf", timeout=30_000)
        page.click(f"{tree} .al-tab[data-tab=branch]")
        # A write in the context timeline, so that its colours are measured too.
        lab.run_code('session.set_block("memory", "User likes trams.")')  # a change that removes and adds
        wait_text(page, ".agentlab-context .al-writes", "ms")
        wait_count(page, ".agentlab-context .al-change del", 1)
        low: list[str] = []
        saved: list[Path] = []

        def measure(theme, selectors):
            for selector in selectors:
                found = page.evaluate(CONTRAST, selector)
                assert found, f"{selector} is not shown ({theme})"
                low.extend(f"{theme} {selector} {f['text']!r}: {f['ratio']:.2f}" for f in found if f["ratio"] < 4.5)

        def shoot(theme, name, selector):
            path = shots / f"{name}-{theme}.png"
            page.locator(selector).first.screenshot(path=str(path))
            saved.append(path)

        try:
            for theme in ("JupyterLab Light", "JupyterLab Dark"):
                lab.set_theme(theme)
                short = theme.split()[-1].lower()
                page.locator(".agentlab-state").scroll_into_view_if_needed()
                measure(short, STATE + CONTEXT + TREE)
                shoot(short, "state", ".agentlab-state")
                page.click(".agentlab-state .al-button >> text=Edit JSON")
                page.fill(".agentlab-state .al-textarea", "{oops")
                page.click(".agentlab-state .al-button >> text=Save")
                measure(short, STATE_EDITING)
                shoot(short, "state-error", ".agentlab-state")
                page.click(".agentlab-state .al-button >> text=Cancel")
                shoot(short, "context", ".agentlab-context")
                shoot(short, "tree-branch", tree)
                page.click(f"{tree} .al-tab[data-tab=hits]")
                measure(short, HITS)
                shoot(short, "tree-hits", tree)
                page.click(f"{tree} .al-tab[data-tab=compactions]")
                measure(short, COMPACTIONS)
                shoot(short, "tree-compactions", tree)
                page.click(f"{tree} .al-row[data-id=u2] .al-fork")
                page.wait_for_selector(f"{tree} .al-compare-cols", timeout=30_000)
                measure(short, COMPARE)
                shoot(short, "tree-compare", tree)
                page.click(f"{tree} .al-tab[data-tab=branch]")
        finally:
            lab.set_theme("JupyterLab Light")
        print("screenshots:", *saved, sep="\n  ")
        assert all(p.stat().st_size > 5_000 for p in saved)
        assert not low, "text below 4.5:1 contrast:\n" + "\n".join(low)

