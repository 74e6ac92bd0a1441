"""Ctrl-C on a processes study: one line from the parent, nothing from the workers.

A terminal sends Ctrl-C to the whole foreground process group: the parent, the
forkserver and every worker. These tests do the same (``os.killpg``) to a real
study in a subprocess.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="needs process groups")

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

SLOW = """\
import time


def run(seed, size=1):
    deadline = time.monotonic() + 0.5    # half a second of CPU: a slow replication
    while time.monotonic() < deadline:
        pass
    return {"draw": seed % 97, "work": size}
"""


def _wait_for(condition: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.mark.timeout(120)
def test_ctrl_c_on_a_cli_study_is_one_line_and_keeps_the_finished(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(SLOW, encoding="utf-8")
    study = tmp_path / "study.toml"
    study.write_text('model = "slow.py:run"\nmaster_seed = 1\nreplications = 12\n'
                     'backend = "processes"\nmax_workers = 2\noutput = "out"\n'
                     "[grid]\nsize = [1]\n", encoding="utf-8")
    spooled = tmp_path / "out" / "results.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "simulacra", "experiment", str(study), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
        start_new_session=True)
    try:
        _wait_for(lambda: _lines(spooled), "the first replication")
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the whole process group
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, err
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("interrupted"), err
    kept = _lines(spooled)
    assert 1 <= len(kept) < 12  # finished replications stay for --resume


#: Put on PYTHONPATH: in multiprocessing's forkserver only, its first import of
#: simulacra (the preload) touches a file and takes 1.5 s, so that a Ctrl-C lands
#: in it for certain.
SLOW_FORKSERVER = """\
import sys
import time
from pathlib import Path

if "from multiprocessing.forkserver import main" in " ".join(sys.orig_argv):
    class _Slow:
        def find_spec(self, name, path=None, target=None):
            if name == "simulacra":
                sys.meta_path.remove(self)
                Path(__file__).with_name("forkserver-importing").touch()
                time.sleep(1.5)
            return None

    sys.meta_path.insert(0, _Slow())
"""


@pytest.mark.timeout(120)
def test_ctrl_c_while_the_forkserver_starts_is_still_one_line(tmp_path: Path) -> None:
    """The forkserver is in the process group too: it must not print a KeyboardInterrupt."""
    (tmp_path / "slow.py").write_text(SLOW, encoding="utf-8")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SLOW_FORKSERVER, encoding="utf-8")
    study = tmp_path / "study.toml"
    study.write_text('model = "slow.py:run"\nmaster_seed = 1\nreplications = 4\n'
                     'backend = "processes"\nmax_workers = 2\noutput = "out"\n',
                     encoding="utf-8")
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(hooks)])}
    process = subprocess.Popen(
        [sys.executable, "-m", "simulacra", "experiment", str(study), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True)
    try:
        _wait_for((hooks / "forkserver-importing").exists, "the forkserver's preload")
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, err
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
