"""OpenTelemetry spans of a society run (``run.trace.otel``): what they hold, and that they cost
nothing and change nothing.

The spans of a real run are read back from ``otel_spans.jsonl`` (and from an OTLP/HTTP
collector on loopback) and checked against ``calls.jsonl``: one call span per line, with its
agent, call number and tokens, each the child of its agent's turn span, each turn the child of
its step's span -- on the event-driven engine, of the span of the window of virtual time its
wake-up is in, checked against ``telemetry.jsonl`` too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

import simulacra
from simulacra.errors import ConfigError
from simulacra.scenarios import Scenario

pytest.importorskip("opentelemetry.sdk.trace")

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"
SMALL = ("sim.agents=6", "sim.steps=3", "sim.engine.participation=1.0")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _run(tmp: Path, *overrides: str, name: str = "run") -> simulacra.societies.SocietyRun:
    config = simulacra.load_config(CONFIG, [*SMALL, *overrides])
    return simulacra.run_society(config, out=tmp / name)


def _chat_is_its_call(chat: dict[str, Any], line: dict[str, Any]) -> None:
    """A chat span says what its line of calls.jsonl says: a scripted call, its tokens, key."""
    attributes = chat["attributes"]
    assert chat["name"] == "chat scripted"
    assert chat["kind"] == "CLIENT"
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "scripted"
    assert attributes["gen_ai.usage.input_tokens"] == line["prompt_tokens"]
    assert attributes["gen_ai.usage.output_tokens"] == line["completion_tokens"]
    assert attributes["simulacra.request.key"] == line["key"]


@pytest.mark.parametrize("mode", ["sequential", "threads", "asyncio"])
def test_spans_match_calls_jsonl(tmp_path: Path, mode: str) -> None:
    run = _run(tmp_path, "run.trace.otel=jsonl", f"sim.engine.mode={mode}")
    assert run.run_dir is not None
    spans = _lines(run.run_dir / "otel_spans.jsonl")
    calls = _lines(run.run_dir / "calls.jsonl")
    by_id = {span["span_id"]: span for span in spans}
    assert len(by_id) == len(spans)  # ids are unique

    steps = [s for s in spans if s["name"].startswith("step ")]
    turns = [s for s in spans if s["name"].startswith("invoke_agent ")]
    chats = [s for s in spans if s["name"].startswith("chat ")]
    assert len(steps) + len(turns) + len(chats) == len(spans)

    assert sorted(s["name"] for s in steps) == ["step 0", "step 1", "step 2"]
    for step in steps:
        assert step["parent_span_id"] is None
        assert step["attributes"]["simulacra.step"] == int(step["name"].split()[1])
        assert step["attributes"]["simulacra.seed"] == 0
        assert step["attributes"]["simulacra.turns"] == 6
    # every agent, every step (participation 1.0); each turn in its step's trace
    assert len(turns) == 6 * 3
    for turn in turns:
        parent = by_id[turn["parent_span_id"]]
        attributes = turn["attributes"]
        assert parent["name"] == f"step {attributes['simulacra.step']}"
        assert turn["trace_id"] == parent["trace_id"]
        assert turn["name"] == f"invoke_agent {attributes['gen_ai.agent.id']}"
        assert attributes["gen_ai.operation.name"] == "invoke_agent"
        assert parent["start_time_unix_nano"] <= turn["start_time_unix_nano"]
        assert turn["end_time_unix_nano"] <= parent["end_time_unix_nano"]

    # one call span per line of calls.jsonl, the same call site, tokens and request
    assert len(chats) == len(calls) > 0
    lines = {(c["agent"], c["n"]): c for c in calls}
    assert len(lines) == len(calls)
    for chat in chats:
        attributes = chat["attributes"]
        line = lines.pop((attributes["simulacra.agent"], attributes["simulacra.call.n"]))
        _chat_is_its_call(chat, line)
        assert attributes["gen_ai.request.model"] == "scripted"
        assert attributes["simulacra.step"] == line["step"]
        assert attributes["simulacra.time"] == line["t"]
        assert attributes["simulacra.seed"] == 0
        turn = by_id[chat["parent_span_id"]]
        assert turn["name"] == f"invoke_agent {line['agent']}"
        assert turn["attributes"]["simulacra.step"] == line["step"]
        assert turn["trace_id"] == chat["trace_id"]
    assert not lines


def test_tracing_changes_nothing(tmp_path: Path) -> None:
    """Digests, events and calls are the same with tracing on and off, in every mode."""
    off = _run(tmp_path, "sim.engine.mode=threads", name="off")
    assert off.run_dir is not None
    assert not (off.run_dir / "otel_spans.jsonl").exists()
    events = (off.run_dir / "action_events.jsonl").read_bytes()
    for mode in ("sequential", "threads", "asyncio"):
        on = _run(tmp_path, "run.trace.otel=jsonl", f"sim.engine.mode={mode}", name=mode)
        assert on.run_dir is not None
        assert on.digest == off.digest, mode
        assert (on.run_dir / "action_events.jsonl").read_bytes() == events, mode
        assert on.llm["calls"] == off.llm["calls"]


def test_off_is_not_stored_and_on_is(tmp_path: Path) -> None:
    """A run without tracing stores the config it always did."""
    off = simulacra.load_config(CONFIG, SMALL)
    assert "trace" not in off.data["run"]
    assert off.run.trace.otel == "off"
    on = simulacra.load_config(CONFIG, [*SMALL, "run.trace.otel=jsonl"])
    assert on.data["run"]["trace"] == {"otel": "jsonl"}
    # YAML reads a bare `off` as false: it is off all the same
    assert simulacra.load_config(CONFIG, ["run.trace.otel=off"]).run.trace.otel == "off"


def test_a_replay_of_a_traced_run_traces_nothing(tmp_path: Path) -> None:
    run = _run(tmp_path, "run.trace.otel=jsonl")
    assert run.run_dir is not None
    report = simulacra.replay_run(run.run_dir)
    assert report.matches


def test_off_imports_no_opentelemetry(tmp_path: Path) -> None:
    """Off by default and free: a whole run imports no opentelemetry module."""
    code = (
        "import sys, simulacra\n"
        f"config = simulacra.load_config({str(CONFIG)!r}, {list(SMALL)!r})\n"
        f"simulacra.run_society(config, out={str(tmp_path / 'r')!r})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'opentelemetry'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("mode", ["jsonl", "otlp"])
def test_without_the_package_one_line_exit_2_before_any_call(tmp_path: Path,
                                                              mode: str) -> None:
    out = tmp_path / "r"
    code = ("import sys\n"
            "sys.modules['opentelemetry'] = None  # as if the otel extra were not installed\n"
            "from simulacra.cli import main\n"
            f"sys.exit(main(['run', {str(CONFIG)!r}, 'sim.agents=6', 'sim.steps=3', "
            f"'run.trace.otel={mode}', '--out', {str(out)!r}]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"run.trace.otel={mode}" in lines[0]
    assert "pip install '.[otel]'" in lines[0]
    assert not out.exists()  # nothing written, nothing called


def test_an_unknown_value_names_the_field(tmp_path: Path) -> None:
    from simulacra.cli import main

    with pytest.raises(ConfigError, match=r"run\.trace\.otel should be 'off', 'jsonl' or "):
        simulacra.load_config(CONFIG, ["run.trace.otel=jaeger"])
    code = ("from simulacra.cli import main; import sys\n"
            f"sys.exit(main(['run', {str(CONFIG)!r}, 'run.trace.otel=jaeger', "
            f"'--out', {str(tmp_path / 'r')!r}]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 2
    assert "run.trace.otel" in done.stderr
    assert "jaeger" in done.stderr
    assert main is not None


def test_jsonl_needs_a_run_directory() -> None:
    config = simulacra.load_config(CONFIG, [*SMALL, "run.trace.otel=jsonl"])
    with pytest.raises(ConfigError, match=r"writes otel_spans\.jsonl into the run directory"):
        simulacra.run_society(config, write=False)


# -- OTLP, to a collector on loopback ---------------------------------------------------


class _Collector(BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        type(self).bodies.append(self.rfile.read(length))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[bytes]]]:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    _Collector.bodies = []
    server = HTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Collector.bodies
    finally:
        server.shutdown()
        server.server_close()


def test_otlp_sends_every_span_to_the_collector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                collector: tuple[str, list[bytes]]) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    endpoint, bodies = collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
                 "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME"):
        monkeypatch.delenv(name, raising=False)
    run = _run(tmp_path, "run.trace.otel=otlp")
    assert run.run_dir is not None
    assert not (run.run_dir / "otel_spans.jsonl").exists()
    names: list[str] = []
    services: set[str] = set()
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            for attribute in resource_spans.resource.attributes:
                if attribute.key == "service.name":
                    services.add(attribute.value.string_value)
            for scope in resource_spans.scope_spans:
                names.extend(span.name for span in scope.spans)
    calls = _lines(run.run_dir / "calls.jsonl")
    assert services == {"simulacra"}
    assert sum(name.startswith("chat ") for name in names) == len(calls)
    assert sum(name.startswith("invoke_agent ") for name in names) == 18
    assert sorted(n for n in names if n.startswith("step ")) == ["step 0", "step 1", "step 2"]
    assert os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] == endpoint


# -- the event-driven engine: a span per window, turn and call ------------------------------

EVENT = ("sim.engine.step.built_in=async_event", "sim.steps=4")
#: A post at 1.0 that wakes four agents at 1.0 (a window's first instant), interviews at 3.0.
STORM = Scenario(name="storm", interventions=[
    {"knob": "post", "at": 1, "value": "Storm tonight: @ada00 @ben01 @cleo02 @dev03 stay home"},
    {"knob": "interview", "at": 3, "value": "ada00,ben01,cleo02: Did you see the warning?"}])


def _event_spans(run: simulacra.societies.SocietyRun, *, width: float = 1.0
                 ) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]],
                            list[dict[str, Any]], list[dict[str, Any]]]:
    """The spans of an event-engine run, checked against its telemetry and ``calls.jsonl``.

    Returns the spans by id, the window, turn and call spans, and the lines of calls.jsonl.
    """
    assert run.run_dir is not None
    spans = _lines(run.run_dir / "otel_spans.jsonl")
    calls = _lines(run.run_dir / "calls.jsonl")
    telemetry = _lines(run.run_dir / "telemetry.jsonl")
    by_id = {span["span_id"]: span for span in spans}
    assert len(by_id) == len(spans)  # ids are unique
    windows = [s for s in spans if s["name"].startswith("window ")]
    turns = [s for s in spans if s["name"].startswith("invoke_agent ")]
    chats = [s for s in spans if s["name"].startswith("chat ")]
    assert len(windows) + len(turns) + len(chats) == len(spans)

    # a window a step, each a root, as its line of telemetry.jsonl counts it
    steps = run.result.steps
    assert sorted(int(w["name"].split()[1]) for w in windows) == list(range(steps))
    children: dict[str, list[dict[str, Any]]] = {w["span_id"]: [] for w in windows}
    for turn in turns:
        children[turn["parent_span_id"]].append(turn)
    for window, line in zip(sorted(windows, key=lambda w: int(w["name"].split()[1])),
                            telemetry, strict=True):
        attributes = window["attributes"]
        n = int(window["name"].split()[1])
        assert window["parent_span_id"] is None
        assert window["kind"] == "INTERNAL"
        assert attributes["simulacra.step"] == attributes["simulacra.window"] == n
        assert attributes["simulacra.seed"] == run.config.seed
        assert attributes["simulacra.time"] == n * width
        assert line["step"] == line["window"]["window"] == n
        # the turns that started in it (its children), and what was resolved in it
        counts = line["window"]
        assert attributes["simulacra.turns"] == counts["wakes"] == len(
            children[window["span_id"]])
        assert attributes["simulacra.turns_failed"] == counts["failed"]
        assert attributes["simulacra.events"] == counts["events"]

    # a turn: a child of the window its virtual time is in, in that window's trace
    seen: dict[str, list[int]] = {}
    for turn in turns:
        parent = by_id[turn["parent_span_id"]]
        attributes = turn["attributes"]
        window = int(attributes["simulacra.time"] // width)
        assert attributes["simulacra.step"] == attributes["simulacra.window"] == window
        assert parent["name"] == f"window {window}"
        assert turn["trace_id"] == parent["trace_id"]
        assert turn["name"] == f"invoke_agent {attributes['gen_ai.agent.id']}"
        assert attributes["simulacra.agent"] == attributes["gen_ai.agent.id"]
        assert attributes["gen_ai.operation.name"] == "invoke_agent"
        assert attributes["simulacra.seed"] == run.config.seed
        assert turn["status"] == "UNSET"
        assert parent["start_time_unix_nano"] <= turn["start_time_unix_nano"]
        assert turn["end_time_unix_nano"] <= parent["end_time_unix_nano"]
        seen.setdefault(attributes["simulacra.agent"], []).append(attributes["simulacra.turn"])
    # each agent's turns, numbered from 0, each once: the turns the run resolved, and
    # those still in flight when it ended
    assert all(sorted(numbers) == list(range(len(numbers))) for numbers in seen.values())

    # one call span per line of calls.jsonl: the same call site, turn, window, time and tokens
    assert len(chats) == len(calls) > 0
    lines = {(c["agent"], c["n"]): c for c in calls}
    assert len(lines) == len(calls)
    for chat in chats:
        attributes = chat["attributes"]
        line = lines.pop((attributes["simulacra.agent"], attributes["simulacra.call.n"]))
        _chat_is_its_call(chat, line)
        assert attributes["simulacra.step"] == attributes["simulacra.window"] == line["step"]
        parent = by_id[chat["parent_span_id"]]
        assert parent["trace_id"] == chat["trace_id"]
        if line["agent"].startswith("interview:"):  # a scenario's: outside any turn
            assert parent["name"] == f"window {line['step']}"
            assert "simulacra.turn" not in attributes
            continue
        assert attributes["simulacra.time"] == line["t"]
        assert attributes["simulacra.turn"] == line["turn"]
        assert parent["name"] == f"invoke_agent {line['agent']}"
        assert parent["attributes"]["simulacra.turn"] == line["turn"]
        assert parent["attributes"]["simulacra.time"] == line["t"]
        assert parent["start_time_unix_nano"] <= chat["start_time_unix_nano"]
        assert chat["end_time_unix_nano"] <= parent["end_time_unix_nano"]
    assert not lines
    return by_id, windows, turns, chats, calls


@pytest.mark.parametrize("mode", ["sequential", "threads", "asyncio"])
def test_event_engine_spans_match_calls_jsonl(tmp_path: Path, mode: str) -> None:
    run = _run(tmp_path, *EVENT, "run.trace.otel=jsonl", f"sim.engine.mode={mode}")
    _, windows, turns, chats, calls = _event_spans(run)
    assert [w["name"] for w in sorted(windows, key=lambda w: w["name"])] == [
        "window 0", "window 1", "window 2", "window 3"]
    # every agent took turns; every call is of a turn that has a span
    assert len({t["attributes"]["simulacra.agent"] for t in turns}) == 6
    assert {(c["agent"], c["turn"]) for c in calls} <= {
        (t["attributes"]["simulacra.agent"], t["attributes"]["simulacra.turn"]) for t in turns}
    assert len(chats) == run.llm["calls"]


def test_event_engine_windows_as_cut_by_the_run(tmp_path: Path) -> None:
    """A half-width window, a scenario whose post wakes agents on a window's first instant
    (run with the window before it: a run's cut includes its end) and whose interviews are
    called outside any turn: each turn is in its own window's span, each interview in the
    span of the window its change is in."""
    config = simulacra.load_config(CONFIG, [
        *EVENT, "sim.agents=12", "sim.steps=8", "sim.engine.step.options.window=0.5",
        "sim.engine.mode=threads", "run.trace.otel=jsonl"])
    run = simulacra.run_society(config, out=tmp_path / "on", scenario=STORM)
    _, windows, turns, _, calls = _event_spans(run, width=0.5)
    assert len(windows) == 8
    # the alert at 1.0 wakes its readers at 1.0: window 2, started by the run of window 1
    assert any(t["attributes"]["simulacra.time"] == 1.0 for t in turns)
    interviews = [c for c in calls if c["agent"].startswith("interview:")]
    assert [(c["agent"], c["step"], c["t"]) for c in interviews] == [
        ("interview:ada00", 6, 3.0), ("interview:ben01", 6, 3.0), ("interview:cleo02", 6, 3.0)]
    off = simulacra.run_society(simulacra.load_config(CONFIG, [
        *EVENT, "sim.agents=12", "sim.steps=8", "sim.engine.step.options.window=0.5",
        "sim.engine.mode=threads"]), out=tmp_path / "off", scenario=STORM)
    assert off.digest == run.digest


def test_event_engine_tracing_changes_nothing(tmp_path: Path) -> None:
    """On the event engine too: digests, events and calls with tracing on and off, every mode."""
    off = _run(tmp_path, *EVENT, "sim.engine.mode=threads", name="off")
    assert off.run_dir is not None
    assert not (off.run_dir / "otel_spans.jsonl").exists()
    events = (off.run_dir / "action_events.jsonl").read_bytes()
    for mode in ("sequential", "threads", "asyncio"):
        on = _run(tmp_path, *EVENT, "run.trace.otel=jsonl", f"sim.engine.mode={mode}", name=mode)
        assert on.run_dir is not None
        assert on.digest == off.digest, mode
        assert on.result.step_digests == off.result.step_digests, mode
        assert (on.run_dir / "action_events.jsonl").read_bytes() == events, mode
        assert on.llm["calls"] == off.llm["calls"]


def test_event_engine_otlp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           collector: tuple[str, list[bytes]]) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    endpoint, bodies = collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
                 "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME"):
        monkeypatch.delenv(name, raising=False)
    run = _run(tmp_path, *EVENT, "run.trace.otel=otlp", "sim.engine.mode=asyncio")
    assert run.run_dir is not None
    names: list[str] = []
    engines: set[str] = set()
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            for attribute in resource_spans.resource.attributes:
                if attribute.key == "simulacra.engine":
                    engines.add(attribute.value.string_value)
            for scope in resource_spans.scope_spans:
                names.extend(span.name for span in scope.spans)
    calls = _lines(run.run_dir / "calls.jsonl")
    assert engines == {"async_event"}
    wakes = sum(line["window"]["wakes"] for line in _lines(run.run_dir / "telemetry.jsonl"))
    assert sum(name.startswith("chat ") for name in names) == len(calls) > 0
    assert sum(name.startswith("invoke_agent ") for name in names) == wakes > 0
    assert sorted(n for n in names if n.startswith("window ")) == [
        "window 0", "window 1", "window 2", "window 3"]
