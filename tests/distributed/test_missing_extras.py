"""A missing optional package is one line naming the extra, before anything starts.

The packages are hidden the way a plain install lacks them: ``sys.modules[name] =
None`` makes both ``import name`` and ``importlib.util.find_spec(name)`` fail.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from simulacra import BackendUnavailable
from simulacra._util import install_hint
from simulacra.backends import get_backend

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("backend", "hidden", "extra"),
    [("mcp", "uvicorn", "mcp"), ("mcp", "mcp", "mcp"), ("emulator", "mcp", "mcp"),
     ("dask", "distributed", "dask")],
)
def test_a_backend_without_its_extra_names_it(
    monkeypatch: pytest.MonkeyPatch, backend: str, hidden: str, extra: str
) -> None:
    get_backend("local")  # the plugin module may or may not be loaded already: both count
    monkeypatch.setitem(sys.modules, hidden, None)

    with pytest.raises(BackendUnavailable, match=(
            rf"backend '{backend}' .* needs the package '{hidden}', which is not installed: "
            + re.escape(install_hint(extra)))):
        get_backend(backend)


def _run_hidden(hidden: str, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    prelude = f"import sys; sys.modules[{hidden!r}] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + code], check=False,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env}, cwd=ROOT)


@pytest.mark.parametrize("hidden", ["uvicorn", "mcp"])
def test_the_worker_without_the_mcp_extra_is_one_line(hidden: str) -> None:
    done = _run_hidden(hidden, "import runpy; runpy.run_module('simulacra.distributed.worker', "
                               "run_name='__main__')", SIMULACRA_MCP_TOKEN="t" * 8)

    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"simulacra worker: needs the package {hidden!r}, which is not installed: "
        f"{install_hint('mcp')}"]


def test_an_example_on_the_mcp_backend_without_the_extra_is_one_line() -> None:
    code = ("import runpy, sys; sys.argv = ['sir', '--backend', 'mcp']; "
            "runpy.run_path('examples/sir', run_name='__main__')")
    done = _run_hidden("uvicorn", code)

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert ("needs the package 'uvicorn', which is not installed: "
            f"{install_hint('mcp')}") in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
