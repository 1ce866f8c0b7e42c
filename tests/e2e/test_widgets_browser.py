"""The widgets in a real browser: JupyterLab in Debian's Chromium, driven by Playwright.

One notebook shows the three widgets on an agent whose session has a branch, a compaction and
context blocks. The tests change state from a cell and wait for the page to show it, click a
message of the other branch and read ``tree.selected_leaf`` back from the kernel, and save a
screenshot in the test's temporary folder.
"""

from __future__ import annotations

import json

import pytest

from harness import write_notebook

pytestmark = pytest.mark.e2e

SETUP = '''
from agentlab import Agent, get_agent
from agentlab.session.session import Session
from agentlab.views import Dashboard


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


agent = get_agent(Lab, "browser")
session = agent.session
session.append_messages([say("u1", "user", "Plan a trip to Porto"), say("a1", "assistant", "Three days: ..."),
                         say("u2", "user", "Cheaper please"), say("a2", "assistant", "Hostels and trains"),
                         say("u3", "user", "What about food?"), say("a3", "assistant", "Francesinha!")],
                        parent_id=None)
session.append_message(say("a2b", "assistant", "A regenerated, cheaper plan"), parent_id="u2")
session.append_message(say("u3b", "user", "Thanks, book it"))
session.context.set_block("memory", "User likes trains.")
session.freeze_system_prompt()
session.context.set_block("memory", "User likes trains. User is vegetarian.")
session.add_compaction("The user plans a cheap trip to Porto.", "u1", "a1")
dash = Dashboard(agent, session)
tree = dash.tree
'''


@pytest.fixture(scope="module")
def notebook(lab_server):
    write_notebook(lab_server.root / "widgets.ipynb", [SETUP, "dash"])
    return "widgets.ipynb"


class TestWidgetsInJupyterLab:
    def test_state_tree_and_context_render_update_and_select(self, lab, notebook, tmp_path):
        lab.open(notebook)
        lab.run_all()
        page = lab.page
        page.wait_for_selector(".agentlab-state .al-tree", timeout=60_000)
        page.wait_for_selector(".agentlab-tree .al-row", timeout=60_000)
        page.wait_for_selector(".agentlab-context .al-block", timeout=60_000)

        # The three views show what the kernel holds.
        assert "phase" in page.inner_text(".agentlab-state [data-role=state-tree]")
        outline = page.inner_text(".agentlab-tree [data-role=outline]")
        assert "A regenerated, cheaper plan" in outline and "Francesinha!" in outline
        assert page.locator(".agentlab-tree .al-compact").count() == 1  # the bracket's label on u1
        assert page.locator(".agentlab-tree .al-lane.al-on").count() >= 2  # ...and its bar over u1 and a1
        assert page.locator(".agentlab-tree .al-row[data-id=u3b] .al-current").count() == 1
        blocks = page.inner_text(".agentlab-context [data-role=context-blocks]")
        assert "User is vegetarian." in blocks and "changed since freeze" in blocks
        assert page.locator(".agentlab-context .al-fill").count() == 1  # the memory block's usage bar

        # State changed from a cell reaches the page.
        lab.run_code('agent.set_state({"phase": "in the browser", "count": 42})')
        page.wait_for_function(
            """() => {
                const text = document.querySelector('.agentlab-state [data-role=state-tree]').innerText;
                return text.includes('"in the browser"') && text.includes('42');
            }""",
            timeout=30_000,
        )
        assert "by server" in page.inner_text(".agentlab-state [data-role=state-meta]")

        # Clicking a message of the other branch selects that branch in the kernel.
        assert lab.run_code("import json\nprint(json.dumps(tree.selected_leaf))") == '"u3b"'
        page.click(".agentlab-tree .al-row[data-id=a3]")
        page.wait_for_selector(".agentlab-tree .al-row[data-id=a3].al-selected-leaf", timeout=30_000)
        printed = lab.run_code("import json\nprint(json.dumps([tree.selected_id, tree.selected_leaf]))")
        assert json.loads(printed) == ["a3", "a3"]
        page.wait_for_function(
            "() => document.querySelector('.agentlab-tree [data-role=path]').innerText.includes('Francesinha!')",
            timeout=30_000,
        )

        # An edit typed in the page goes through validation in the kernel.
        page.click(".agentlab-state .al-value.al-type-number >> nth=0")
        page.fill(".agentlab-state .al-input", "7")
        page.keyboard.press("Enter")
        page.wait_for_function(
            "() => document.querySelector('.agentlab-state [data-role=state-meta]').innerText.includes('this view')",
            timeout=30_000,
        )
        assert json.loads(lab.run_code("print(json.dumps(agent.state['count']))")) == 7

        page.locator(".agentlab-state").evaluate("el => el.scrollIntoView({block: 'start'})")
        shot = lab.screenshot(tmp_path / "widgets.png")
        assert shot.stat().st_size > 20_000
        print(f"screenshot: {shot}")
