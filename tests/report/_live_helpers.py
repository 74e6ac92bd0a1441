"""Helpers of the live view's tests: a ``simulacra run --view`` process and its URL, the HTTP API.

Shared by ``test_live.py`` (HTTP, no browser) and ``test_live_browser.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"
URL = re.compile(r"(http://\S+/\?token=\S+)")


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def simulacra_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "simulacra", *args], capture_output=True,
                          text=True, timeout=timeout, check=False, env=env())


def run_args(out: Path, engine: str, agents: int, steps: int, *extra: str) -> list[str]:
    return ["run", str(CONFIG), "--out", str(out), "--no-progress", f"sim.agents={agents}",
            f"sim.steps={steps}", "sim.engine.concurrency=4",
            f"sim.engine.step.built_in={engine}", *extra]


class ViewedRun:
    """``simulacra run CONFIG --view ...`` in a process of its own, and its live view's URL."""

    def __init__(self, args: list[str]) -> None:
        import httpx

        self.process = subprocess.Popen([sys.executable, "-m", "simulacra", *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=env())
        assert self.process.stderr is not None
        self.first_lines: list[str] = []
        url = None
        while url is None:
            line = self.process.stderr.readline()
            assert line, f"no URL printed: {self.first_lines} {self.process.communicate()}"
            self.first_lines.append(line)
            found = URL.search(line)
            url = found.group(1) if found else None
        self.url = url
        self.base, self.token = url.split("/?token=")
        self.client = httpx.Client(timeout=30)

    def api(self, path: str, **params: Any) -> Any:
        response = self.client.get(f"{self.base}{path}", params={"token": self.token, **params})
        response.raise_for_status()
        return response.json()

    def control(self, action: str) -> None:
        response = self.client.post(f"{self.base}/api/control/{action}",
                                    params={"token": self.token})
        response.raise_for_status()

    def snapshot(self) -> dict[str, Any]:
        return self.api("/api/snapshot")  # type: ignore[no-any-return]

    def wait_for(self, test: Callable[[dict[str, Any]], bool], what: str,
                 timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            snapshot = self.snapshot()
            if test(snapshot):
                return snapshot
            assert self.process.poll() is None, (what, self.process.communicate())
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}: {snapshot}")

    def paused_at(self, step: int) -> dict[str, Any]:
        return self.wait_for(lambda s: s["paused_at"] == step, f"paused at step {step}")

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        out, err = self.process.communicate(timeout=timeout)
        self.client.close()
        return self.process.returncode, out, "".join(self.first_lines) + err

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        if self.process.stdout is not None and not self.process.stdout.closed:
            self.process.communicate()  # and its pipes closed, however it ended
        self.client.close()
