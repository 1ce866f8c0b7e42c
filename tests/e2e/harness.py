"""A small harness for driving JupyterLab in Debian's Chromium with Playwright.

Used by the e2e tests (through fixtures in ``conftest.py``) and by ``benchmarks/widgets_bench.py``.

* :class:`LabServer` starts ``jupyter-lab`` directly (not the ``jupyter lab`` wrapper, which leaves
  an orphan server) on 127.0.0.1 with a free port and a random token, exactly with the flags listed in
  ``shared/reference/environment.md``, and stops it by its own pid.
* :func:`launch_chromium` starts ``/usr/bin/chromium`` with the flags that work as root. Playwright
  never downloads a browser here.
* :class:`LabPage` opens a notebook, runs all cells, and runs extra code in the notebook's kernel by
  typing it into the last cell; output is read back from the page between unique markers.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
    "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--no-default-browser-check",
]

# JupyterLab asks once whether to fetch Jupyter news; the toast would cover the page in screenshots.
_NO_NEWS = {"@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LabServer:
    """A JupyterLab server serving ``root`` (notebooks go there), started by :meth:`start`."""

    def __init__(self, root: Path, *, env: dict[str, str] | None = None) -> None:
        self.root = Path(root)
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.root.parent / f"jupyterlab-{self.port}.log"

    def start(self, timeout: float = 120.0) -> LabServer:
        config = self.root.parent / "lab-config"
        settings = config / "settings"
        for name, value in _NO_NEWS.items():
            target = settings / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(value))
        env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings),
                   JUPYTERLAB_WORKSPACES_DIR=str(config / "workspaces"),
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **self.extra_env)
        lab = Path(sys.executable).parent / "jupyter-lab"
        command = [
            str(lab), "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={self.port}",
            "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root}", "--LabApp.news_url=None",
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: the tests switch themes through it
        ]
        log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the server
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter-lab exited early; see {self.log_path}")
            try:
                urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=2)
                return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"jupyter-lab did not answer within {timeout:.0f} s; see {self.log_path}")

    def notebook_url(self, name: str) -> str:
        # reset: a fresh workspace, so the notebooks earlier pages opened are not restored in hidden tabs
        return f"{self.url}/lab/tree/{name}?reset&token={self.token}"

    def stop(self) -> None:
        """Stop the server (and so its kernels) by pid; safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def launch_chromium(playwright: Any) -> Any:
    """Debian's Chromium through Playwright (never a downloaded browser)."""
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: run `make browser` (apt-get install -y chromium).")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def write_notebook(path: Path, cells: list[str]) -> Path:
    """Write a notebook of code cells, without outputs, using the python3 kernel."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nbformat.write(nb, str(path))
    return path


class LabPage:
    """One browser page with one notebook open in JupyterLab."""

    def __init__(self, browser: Any, server: LabServer, *, width: int = 1500, height: int = 1100) -> None:
        self.server = server
        self.page = browser.new_page(viewport={"width": width, "height": height})
        self.console: list[str] = []
        self.page.on("console", lambda msg: self.console.append(f"{msg.type}: {msg.text}"))
        self._runs = 0

    def open(self, name: str, timeout: float = 90.0) -> LabPage:
        self.page.goto(self.server.notebook_url(name))
        self.page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content", timeout=timeout * 1000)
        # Fold the file browser away: more room for the widgets (and the screenshots).
        current = self.page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current")
        if current.count():
            current.first.click()
        return self

    def wait_kernel_idle(self, timeout: float = 120.0) -> None:
        """Wait until the notebook's kernel has started and is idle (the status bar says so)."""
        self.page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-StatusBar-TextItem')].some(e => /\\| Idle$/.test(e.textContent.trim()))",
            timeout=timeout * 1000,
        )

    def run_all(self, timeout: float = 180.0) -> None:
        """Run every cell in order (Shift+Enter from the first one) and wait until each has run."""
        self.wait_kernel_idle(timeout)
        cells = self.page.locator(".jp-Notebook .jp-Cell")
        count = cells.count()
        cells.first.locator(".cm-content").click()
        for _ in range(count):
            self.page.keyboard.press("Shift+Enter")
        self.page.wait_for_function(
            """(count) => {
                const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]
                    .slice(0, count);
                return prompts.length === count && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
            }""",
            arg=count,
            timeout=timeout * 1000,
        )
        errors = self.page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        for k in range(errors.count()):
            text = errors.nth(k).inner_text()
            if "Traceback" in text or "Error" in text:
                raise AssertionError(f"A cell failed:\n{text}")

    def run_code(self, code: str, timeout: float = 60.0) -> str:
        """Type ``code`` into the last (empty) cell, run it, and return what it printed.

        The cell's standard output is read from the page between two markers, so earlier outputs
        never leak in.
        """
        self._runs += 1
        marker = f"__agentlab_{self._runs}_{secrets.token_hex(4)}__"
        wrapped = f"print({marker!r})\n{code}\nprint({marker!r})"
        cells = self.page.locator(".jp-Notebook .jp-Cell")
        last = cells.nth(cells.count() - 1)
        editor = last.locator(".cm-content")
        editor.click()
        self.page.keyboard.press("Control+a")
        self.page.keyboard.insert_text(wrapped)  # no key events: no auto-indent or bracket closing
        self.page.keyboard.press("Shift+Enter")
        handle = self.page.wait_for_function(
            """(marker) => {
                // A display() splits a cell's printed text into several outputs: join the cell's stdout
                // outputs (and only those: a displayed widget's text is not output).
                const stdout = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"]';
                const stderr = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]';
                for (const area of document.querySelectorAll('.jp-Cell .jp-OutputArea')) {
                    const text = [...area.querySelectorAll(stdout)].map(o => o.textContent).join('');
                    const first = text.indexOf(marker);
                    if (first < 0) continue;
                    const second = text.indexOf(marker, first + marker.length);
                    if (second >= 0) return text.slice(first + marker.length, second);
                    const errors = [...area.querySelectorAll(stderr)].map(o => o.textContent).join('');
                    if (errors.includes('Traceback')) return '__error__' + errors;
                }
                return null;
            }""",
            arg=marker,
            timeout=timeout * 1000,
        )
        text = handle.json_value()
        if text.startswith("__error__"):
            raise AssertionError(f"The cell failed:\n{text[9:]}")
        return text.strip()

    def screenshot(self, path: Path) -> Path:
        self.page.screenshot(path=str(path), full_page=False)
        return path

    def set_theme(self, theme: str, timeout: float = 30.0) -> None:
        """Switch JupyterLab's theme (``"JupyterLab Light"`` or ``"JupyterLab Dark"``) and wait until it applies."""
        light = "true" if "Light" in theme else "false"
        self.page.evaluate("(theme) => window.jupyterapp.commands.execute('apputils:change-theme', {theme})", theme)
        self.page.wait_for_function(
            f"() => document.body.dataset.jpThemeName === {theme!r} && document.body.dataset.jpThemeLight === '{light}'",
            timeout=timeout * 1000)
        self.page.wait_for_timeout(300)  # the theme's stylesheet has loaded; let the page repaint

    def close(self) -> None:
        self.page.close()
