"""Fixtures for browser tests: one JupyterLab server and one Chromium per test session.

Every test in this folder is marked ``e2e`` (deselect with ``-m "not e2e"``). Chromium is Debian's
(``make browser`` installs it); a missing browser fails the tests with that instruction rather than
skipping them silently.
"""

from __future__ import annotations

import pytest

from tests.e2e.harness import LabPage, LabServer, launch_chromium


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 (free port, random token) serving a fresh folder."""
    base = tmp_path_factory.mktemp("jupyterlab")
    root = base / "notebooks"
    root.mkdir()
    server = LabServer(root, env={"AGENTLAB_HOME": str(base / "agentlab-home")}).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def chromium():
    """Debian's Chromium driven by Playwright, shared by every browser test."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        try:
            browser = launch_chromium(playwright)
        except RuntimeError as exc:
            pytest.fail(str(exc))
        yield browser
        browser.close()


@pytest.fixture
def lab(lab_server, chromium):
    """A fresh browser page on the lab server; closed after the test."""
    page = LabPage(chromium, lab_server)
    yield page
    page.close()
