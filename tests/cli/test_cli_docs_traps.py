"""Issue 29: the traps a user who learned from the docs meets in the first week.

Every failure is one line on stderr and a non-zero exit; a reader that closes
stdout early (``| head``) stops the command quietly once its files are complete.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOCIAL = ROOT / "examples" / "social"

pytestmark = pytest.mark.timeout(180)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def _closed_stdout(*args: str, cwd: Path) -> tuple[int, str]:
    """Run ``simulacra ARGS`` with a stdout whose reader has gone (``| head`` that exited)."""
    proc = subprocess.Popen([sys.executable, "-m", "simulacra", *args], cwd=cwd, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.close()  # nobody reads: the first write meets EPIPE
    with proc.stderr:
        err = proc.stderr.read()
    return proc.wait(timeout=150), err


def test_a_closed_stdout_stops_a_model_run_quietly(tmp_path: Path) -> None:
    status, err = _closed_stdout("run", str(ROOT / "examples" / "bank.py"), "--json",
                                 cwd=tmp_path)
    assert (status, err) == (141, "")


@pytest.mark.parametrize("report", [False, True])
def test_a_closed_stdout_stops_a_society_run_quietly_with_its_files_complete(
        tmp_path: Path, report: bool) -> None:
    run = tmp_path / "run"
    status, err = _closed_stdout("run", str(SOCIAL / "config.yaml"), "sim.agents=20",
                                 "sim.steps=2", "--out", str(run), "--no-progress",
                                 *(["--report"] if report else []), cwd=tmp_path)
    assert (status, err) == (141, "")
    assert (run / "manifest.json").is_file()
    assert (run / "summary.json").is_file()
    assert (run / "report.html").is_file() is report
    replay = subprocess.run([sys.executable, "-m", "simulacra", "replay", str(run)], cwd=tmp_path,
                            env=_env(), capture_output=True, text=True, timeout=150, check=False)
    assert replay.returncode == 0, replay.stderr


def _study(tmp_path: Path) -> Path:
    (tmp_path / "model.py").write_text("def run(seed=0, x=1):\n    return {'y': (seed % 7) * x}\n",
                                       encoding="utf-8")
    study = tmp_path / "study.toml"
    study.write_text('model = "model.py:run"\nmaster_seed = 1\nreplications = 2\n'
                     'backend = "sequential"\noutput = "out"\n[grid]\nx = [1, 2]\n',
                     encoding="utf-8")
    return study


def _experiment(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "simulacra", "experiment", *args,
                           "--no-progress"], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=150, check=False)


def test_resuming_a_study_of_an_edited_model_file_is_refused_naming_the_file(
        tmp_path: Path) -> None:
    """docs/parallel.md: the identity covers the model's source file; a new --output DIR."""
    study = _study(tmp_path)
    assert _experiment(str(study), cwd=tmp_path).returncode == 0
    with (tmp_path / "model.py").open("a", encoding="utf-8") as f:
        f.write("# changed\n")
    done = _experiment(str(study), "--resume", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: the output directory {str(tmp_path / 'out')!r} holds "
                           "results of another version of the model: the source file of "
                           f"{tmp_path / 'model.py'}:run changed since they were made")
    assert "another --output DIR" in line
    assert _experiment(str(study), "--output", "new", cwd=tmp_path).returncode == 0


def test_a_wrong_key_fails_the_preflight_against_scripted_server(tmp_path: Path) -> None:
    """ScriptedServer checks the key on GET /v1/models too: exit 2, nothing written."""
    from simulacra import ScriptedServer

    with ScriptedServer(seed=0, api_key="s3cret") as server:
        args = ["run", str(SOCIAL / "config.yaml"), "sim.agents=3", "sim.steps=1",
                "sim.llm.provider=openai_compatible", f"sim.llm.base_url={server.base_url}",
                "sim.llm.model=scripted", "sim.llm.api_key_env=MYKEY",
                "--out", str(tmp_path / "run"), "--no-progress"]
        done = subprocess.run([sys.executable, "-m", "simulacra", *args], cwd=tmp_path,
                              env={**_env(), "MYKEY": "wrong"}, capture_output=True, text=True,
                              timeout=150, check=False)
        assert server.calls == 0  # no completion was asked for
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith("error: preflight: "), line
        assert "401" in line
        assert not (tmp_path / "run").exists()
        right = subprocess.run([sys.executable, "-m", "simulacra", *args], cwd=tmp_path,
                               env={**_env(), "MYKEY": "s3cret"}, capture_output=True,
                               text=True, timeout=150, check=False)
        assert right.returncode == 0, right.stderr


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="this Python can run sub-interpreters")
def test_a_backend_this_python_cannot_run_is_bad_input_and_writes_nothing(
        tmp_path: Path) -> None:
    study = _study(tmp_path)
    done = _experiment(str(study), "--backend", "interpreters", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: backend 'interpreters' needs sub-interpreters"), line
    assert line.count("this is Python") == 1, line
    assert "Use 'processes'" in line
    assert not (tmp_path / "out").exists()

    import simulacra

    experiment = simulacra.Experiment(str(tmp_path / "model.py:run"), [{"x": 1}],
                                      master_seed=1, spool_dir=tmp_path / "api")
    with pytest.raises(simulacra.BackendUnavailable):
        experiment.run(2, "interpreters")
    assert not (tmp_path / "api").exists()


def test_experiment_help_lists_every_backend(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "simulacra", "experiment", "--help"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0
    backend = " ".join(done.stdout.split("\n  --backend NAME", 1)[1].split("--max-workers")[0]
                       .split())
    for name in ("auto", "sequential", "threads", "processes", "interpreters", "dask"):
        assert name in backend, backend


def _web_server(directory: Path) -> tuple[subprocess.Popen[str], int]:
    """``python -m http.server`` on 127.0.0.1 (a free port): it answers POST with 501 and HTML."""
    proc = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind",
                             "127.0.0.1", "--directory", str(directory)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # Serving HTTP on 127.0.0.1 port N (http://...) ...
    return proc, int(line.split(" port ")[1].split()[0])


class _HTMLErrors(http.server.BaseHTTPRequestHandler):
    """A web server that is no API: a 405 page for POST, a 404 page for anything else."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _page(self, status: int) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = (f"<!DOCTYPE html>\n<html><head><title>{status}</title></head>\n"
                "<body><h1>Nope</h1>\n" + "<p>filler</p>\n" * 50 + "</body></html>\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self._page(405)

    def do_GET(self) -> None:
        self._page(404)


def _run_without_preflight(base_url: str, out: Path) -> tuple[subprocess.CompletedProcess[str],
                                                               float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "simulacra", "run", str(SOCIAL / "config.yaml"), "sim.agents=4",
         "sim.steps=2", "sim.llm.provider=openai_compatible", f"sim.llm.base_url={base_url}",
         "sim.llm.model=any", "run.preflight=false", "--out", str(out), "--no-progress"],
        cwd=out.parent, env=_env(), capture_output=True, text=True, timeout=150, check=False)
    return done, time.monotonic() - started


def test_a_web_server_that_is_no_api_stops_the_run_at_its_first_call(tmp_path: Path) -> None:
    """HTTP 501 (python -m http.server) and 405 pages are not retried, nor printed."""
    proc, port = _web_server(tmp_path)
    try:
        done, took = _run_without_preflight(f"http://127.0.0.1:{port}/v1", tmp_path / "run501")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "does not implement chat completions (HTTP 501)" in line, line
    assert "after 1 attempt (not retried): an HTML page, not an API's JSON error" in line, line
    assert "<" not in line
    assert took < 10  # six tries per call for three calls took about 12 s

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HTMLErrors)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        done, _ = _run_without_preflight(f"http://127.0.0.1:{server.server_address[1]}/v1",
                                         tmp_path / "run405")
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "(HTTP 405)" in line, line
    assert "not retried" in line
    assert "<" not in line
    assert len(line) < 600


def test_a_plain_text_error_body_is_cut_to_its_first_line() -> None:
    from simulacra.llm._openai import error_snippet

    assert error_snippet("Bad gateway\nupstream x failed\n") == "Bad gateway ..."
    assert error_snippet("x" * 500) == "x" * 200 + " ..."
    assert error_snippet('{"error": {"message":\n "no such model"}}') == (
        '{"error": {"message": "no such model"}}')


def test_an_unknown_option_shows_the_commands_usage(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "simulacra", "run",
                           str(ROOT / "examples" / "bank.py"), "--sed", "3"], cwd=tmp_path,
                          env=_env(), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: simulacra run "), done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "simulacra run: error: unrecognized arguments: --sed 3")


def test_the_summary_title_is_one_line_and_says_when_nobody_engaged(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "simulacra", "run", str(SOCIAL / "config.yaml"),
                           "sim.agents=3", "sim.steps=1", "seed=3", "--out", str(tmp_path / "run"),
                           "--no-progress"], cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=150, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # Narrower than its title, the table once wrapped it: "... (round engine, threads," / "seed 3)".
    assert lines[0] == "social: 3 agents, 1 step, 3 events (round engine, threads, seed 3)"
    [engaged] = [line for line in lines if line.lstrip().startswith("most engaged")]
    assert engaged.split(None, 2)[2].strip() == "nobody engaged"


def test_a_slow_models_agent_steps_read_in_seconds() -> None:
    from simulacra.cli._society import _duration_us, _rate

    assert _duration_us(930.94) == "930.9 us"
    assert _duration_us(12_345.0) == "12.3 ms"
    assert _duration_us(5_062_007.1) == "5.06 s"
    assert (_rate(1074.2), _rate(0.198)) == ("1,074/s", "0.2/s")
