"""Several model endpoints (``sim.llm.endpoints``, ``sim.llm.routing``), against real servers.

Each endpoint here is the project's real OpenAI-compatible HTTP server on
127.0.0.1 (``ScriptedServer``), or a scripted model. Two servers with the same
seed give the same replies, so a run routed over them must have the digest of
a run on one of them, and its replay, with no server at all, the same again.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulacra
from simulacra.cli import main
from simulacra.llm import ScriptedServer

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"
AGENTS = ["ada0", "ben1", "cleo2", "dev3", "eli4", "fay5"]

pytestmark = pytest.mark.timeout(180)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _server(name: str, url: str, *extra: str) -> list[str]:
    return [f"sim.llm.endpoints.{name}.provider=openai_compatible",
            f"sim.llm.endpoints.{name}.base_url={url}",
            f"sim.llm.endpoints.{name}.model=scripted",
            f"sim.llm.endpoints.{name}.max_retries=0", *extra]


def _base(*extra: str) -> list[str]:
    return ["sim.agents=6", "sim.steps=3", *extra]


def _lines(run: Path, name: str = "calls.jsonl") -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / name).read_text().splitlines()]


def _run(tmp: Path, name: str, overrides: list[str]) -> simulacra.SocietyRun:
    return simulacra.run_society(simulacra.load_config(CONFIG, overrides), out=tmp / name)


@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_two_endpoints_give_the_digest_of_one_and_replay_with_none(
        tmp_path: Path, engine: str) -> None:
    step = f"sim.engine.step.built_in={engine}"
    with ScriptedServer(seed=0) as left, ScriptedServer(seed=0) as right:
        one = _run(tmp_path, "one", _base(step, "sim.llm.provider=openai_compatible",
                                         f"sim.llm.base_url={left.base_url}",
                                         "sim.llm.model=scripted"))
        left.reset()
        two = _run(tmp_path, "two", _base(
            step, *_server("left", left.base_url), *_server("right", right.base_url),
            "sim.llm.routing.default=left",
            "sim.llm.routing.rules=[{agents: [ada0, 'c*'], endpoint: right}]"))
        served = {"left": left.calls, "right": right.calls}
    assert two.result.digest == one.result.digest
    lines = _lines(tmp_path / "two")
    assert lines
    assert all(line["ok"] for line in lines)
    for line in lines:
        assert line["endpoint"] == ("right" if line["agent"] in ("ada0", "cleo2") else "left")
    assert served == {name: sum(1 for line in lines if line["endpoint"] == name)
                      for name in ("left", "right")}
    assert served["right"] > 0
    assert served["left"] > 0
    # the servers are gone: the replay needs no endpoint
    replay = simulacra.replay_run(tmp_path / "two")
    assert replay.matches
    assert replay.digest == one.result.digest
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["llm"]["provider"] == "endpoints"
    assert set(summary["llm"]["endpoints"]) == {"left", "right"}


def test_the_run_directory_names_every_endpoint_and_no_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-7f3a9c1e55d04b2a"  # noqa: S105  (a key made up for the test)
    monkeypatch.setenv("SIMULACRA_TEST_KEY", secret)
    with ScriptedServer(seed=0, api_key=secret) as server:
        _run(tmp_path, "run", _base(
            *_server("keyed", server.base_url, "sim.llm.endpoints.keyed.api_key_env="
                     "SIMULACRA_TEST_KEY"),
            "sim.llm.endpoints.local.preset=scripted", "sim.llm.routing.default=local",
            "sim.llm.routing.rules=[{agents: [ada0, ben1], endpoint: keyed}]"))
        assert server.served > 0
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    endpoints = manifest["provider"]["endpoints"]
    assert endpoints["keyed"]["base_urls"] == [server.base_url]
    assert endpoints["keyed"]["api_key_env"] == "SIMULACRA_TEST_KEY"
    assert endpoints["local"]["provider"] == "scripted"
    for file in (tmp_path / "run").rglob("*"):
        if file.is_file():
            assert secret.encode() not in file.read_bytes(), file


def test_a_dead_endpoint_moves_its_calls_to_its_fallback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Down at the preflight: a line on stderr, and every call goes to the fallback."""
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    with ScriptedServer(seed=0) as backup:
        alone = _run(tmp_path, "alone", _base(*_server("backup", backup.base_url)))
        backup.reset()
        args = ["run", str(CONFIG), "--out", str(tmp_path / "run"), "--no-progress",
                *_base(*_server("primary", dead, "sim.llm.endpoints.primary.fallback=backup"),
                       *_server("backup", backup.base_url), "sim.llm.routing.default=primary")]
        assert main(args) == 0
        assert backup.calls > 0
    err = capsys.readouterr().err
    assert "endpoint 'primary' is down" in err
    assert "fallback 'backup'" in err
    lines = _lines(tmp_path / "run")
    assert {(line["endpoint"], line.get("fallback_from")) for line in lines} == {
        ("backup", "primary")}
    run = tmp_path / "run"
    assert (run / "digest.txt").read_text().split()[0] == alone.result.digest
    assert simulacra.replay_run(run).matches
    summary = json.loads((run / "summary.json").read_text())["llm"]
    assert summary["endpoints_down"] == ["primary"]
    assert summary["fallbacks"] == [{"from": "primary", "to": "backup", "calls": len(lines)}]


def test_an_endpoint_that_dies_mid_run_hands_over_to_its_fallback(tmp_path: Path) -> None:
    """HTTP 500 from every call after step 1: three in a row make the endpoint down; the
    turns that failed before it was found down fail as turns, the rest move, recorded so."""
    with ScriptedServer(seed=0) as main_server, ScriptedServer(seed=0) as spare:
        def after(report: Any) -> None:
            if report.step == 0:
                main_server.fail_next(10_000, 500)

        config = simulacra.load_config(CONFIG, _base(
            "sim.steps=3", "sim.engine.mode=sequential",
            *_server("main", main_server.base_url, "sim.llm.endpoints.main.fallback=spare"),
            *_server("spare", spare.base_url), "sim.llm.routing.default=main",
            "run.max_consecutive_provider_failures=3"))
        run = simulacra.run_society(config, out=tmp_path / "run", on_step=after)
        assert spare.calls > 0
    lines = _lines(tmp_path / "run")
    failed = [line for line in lines if not line["ok"]]
    assert len(failed) == 2  # the third failure made it down: that call moved
    assert all(line["endpoint"] == "main" for line in failed)
    moved = [line for line in lines if line.get("fallback_from") == "main"]
    assert moved
    assert all(line["endpoint"] == "spare" and line["ok"] for line in moved)
    assert run.result.failed == 2
    assert simulacra.replay_run(tmp_path / "run").matches


def test_a_dead_endpoint_without_a_fallback_stops_before_any_call(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    with ScriptedServer(seed=0) as alive:
        args = ["run", str(CONFIG), "--out", str(tmp_path / "run"), "--no-progress",
                *_base(*_server("gone", dead), *_server("alive", alive.base_url),
                       "sim.llm.routing.default=alive",
                       "sim.llm.routing.rules=[{agents: ada0, endpoint: gone}]")]
        assert main(args) == 2
        assert alive.calls == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "endpoint 'gone'" in err
    assert "sim.llm.endpoints.gone.base_url" in err
    assert not (tmp_path / "run").exists()


BAD = {
    "an undeclared endpoint": (["sim.llm.endpoints.a.preset=scripted",
                                "sim.llm.routing.rules=[{agents: ada0, endpoint: b}]"],
                               "'b' is not a declared endpoint"),
    "a rate limit of 0": (["sim.llm.endpoints.a.preset=scripted",
                           "sim.llm.endpoints.a.rate_limit=0"],
                          "sim.llm.endpoints.a.rate_limit"),
    "a fallback cycle": (["sim.llm.endpoints.a.preset=scripted",
                          "sim.llm.endpoints.a.fallback=b",
                          "sim.llm.endpoints.b.preset=scripted",
                          "sim.llm.endpoints.b.fallback=a", "sim.llm.routing.default=a"],
                         "cycle: a -> b -> a"),
    "no default with two endpoints": (["sim.llm.endpoints.a.preset=scripted",
                                       "sim.llm.endpoints.b.preset=scripted"],
                                      "sim.llm.routing.default"),
    "an agent the society lacks": (["sim.llm.endpoints.a.preset=scripted",
                                    "sim.llm.routing.rules=[{agents: zed9, endpoint: a}]"],
                                   "'zed9'"),
    "a server endpoint without a model": (["sim.llm.endpoints.a.preset=vllm"],
                                          "sim.llm.endpoints.a.model"),
    "routing without endpoints": (["sim.llm.routing.default=a"], "declares none"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_endpoints_are_one_line_and_exit_2_before_any_call(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    overrides, expected = BAD[case]
    args = ["run", str(CONFIG), "--out", str(tmp_path / "run"), "--no-progress",
            *_base(*overrides)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert expected in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_two_endpoints_of_one_name_in_a_file_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "twice.yaml"
    config.write_text(textwrap.dedent(f"""\
        sim:
          agents: 6
          world: {{factory: {ROOT / 'examples' / 'social' / 'model.py'}:build}}
          llm:
            endpoints:
              local: {{preset: scripted}}
              local: {{preset: vllm, model: m}}
        """))
    assert main(["run", str(config), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "'local' is given twice" in err
    assert not (tmp_path / "run").exists()


def test_a_routing_function_in_a_loose_folder_routes_the_rest(tmp_path: Path) -> None:
    folder = tmp_path / "loose"
    folder.mkdir()
    (folder / "route.py").write_text(textwrap.dedent("""\
        def pick(site, request):
            # agents whose handle has an even digit go to "even"; the rest to the default
            return "even" if int(site.agent[-1]) % 2 == 0 else None
        """))
    (folder / "config.yaml").write_text(textwrap.dedent(f"""\
        seed: 3
        sim:
          agents: 6
          steps: 2
          world: {{factory: {ROOT / 'examples' / 'social' / 'model.py'}:build}}
          llm:
            endpoints:
              even: {{preset: scripted}}
              odd: {{preset: scripted}}
              first: {{preset: scripted}}
            routing:
              default: odd
              rules:
                - {{agents: ada0, endpoint: first}}
              function: route.py:pick
        """))
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "simulacra", "run", "config.yaml", "--out",
                           str(out), "--no-progress"], cwd=folder, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr
    for line in _lines(out):
        digit = int(line["agent"][-1])
        expected = "first" if line["agent"] == "ada0" else "even" if digit % 2 == 0 else "odd"
        assert line["endpoint"] == expected, line
    plain = simulacra.run_society(simulacra.load_config(folder / "config.yaml", [
        "sim.llm.endpoints={}", "sim.llm.routing={default: null, rules: [], function: null}"]))
    assert (out / "digest.txt").read_text().split()[0] == plain.result.digest


def test_a_routing_function_that_names_no_endpoint_stops_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    route = tmp_path / "route.py"
    route.write_text("def pick(site, request):\n    return 'nowhere'\n")
    args = ["run", str(CONFIG), "--out", str(tmp_path / "run"), "--no-progress",
            *_base("sim.llm.endpoints.a.preset=scripted",
                   f"sim.llm.routing.function={route}:pick")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "'nowhere', which is not declared" in err


def test_request_model_rules_route_kinds_of_decision(tmp_path: Path) -> None:
    """The social agents name their requests by sim.llm.model: a rule on it takes them all."""
    run = _run(tmp_path, "run", _base(
        "sim.llm.model=planner", "sim.llm.endpoints.big.preset=scripted",
        "sim.llm.endpoints.small.preset=scripted", "sim.llm.routing.default=small",
        "sim.llm.routing.rules=[{request_model: 'plan*', endpoint: big}]"))
    assert run.result.llm_calls > 0
    assert {line["endpoint"] for line in _lines(tmp_path / "run")} == {"big"}


def test_endpoints_are_priced_each_at_its_own_pricing(tmp_path: Path) -> None:
    run = _run(tmp_path, "run", _base(
        "sim.llm.endpoints.cheap.preset=scripted",
        "sim.llm.endpoints.dear.preset=scripted",
        "sim.llm.endpoints.dear.pricing={prompt_per_mtok: 1000, completion_per_mtok: 2000}",
        "sim.llm.routing.default=cheap",
        "sim.llm.routing.rules=[{agents: [ada0, ben1], endpoint: dear}]"))
    lines = _lines(tmp_path / "run")
    expected = sum((line["prompt_tokens"] * 1000 + line["completion_tokens"] * 2000) / 1e6
                   for line in lines if line["endpoint"] == "dear")
    assert expected > 0
    for line in lines:
        if line["endpoint"] == "cheap":
            assert line["cost"] == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())["llm"]
    assert summary["cost"] == pytest.approx(expected, rel=1e-6)
    assert summary["per_agent"]["ada0"]["cost"] > 0
    assert summary["per_agent"]["cleo2"]["cost"] == 0
    assert run.llm["cost"] == summary["cost"]


@pytest.mark.parametrize("preset", ["vllm", "llamacpp", "ollama", "openai"])
def test_each_preset_runs_against_a_local_mock_of_its_server(
        tmp_path: Path, preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedServer(seed=0) as server:
        plain = _run(tmp_path, "plain", _base("sim.steps=2"))
        run = _run(tmp_path, preset, _base(
            "sim.steps=2", f"sim.llm.endpoints.srv.preset={preset}",
            f"sim.llm.endpoints.srv.base_url={server.base_url}",
            "sim.llm.endpoints.srv.model=scripted"))
        assert server.served == run.result.llm_calls
    assert run.result.digest == plain.result.digest
    info = json.loads((tmp_path / preset / "manifest.json").read_text())["provider"]
    assert info["endpoints"]["srv"]["preset"] == preset


def test_presets_fill_in_their_servers_defaults() -> None:
    from simulacra.societies._endpoints import endpoints_info

    config = simulacra.load_config(CONFIG, [
        "sim.llm.endpoints.a.preset=llamacpp", "sim.llm.endpoints.a.model=m",
        "sim.llm.endpoints.b.preset=ollama", "sim.llm.endpoints.b.model=m",
        "sim.llm.endpoints.c.preset=vllm", "sim.llm.endpoints.c.model=m",
        "sim.llm.routing.default=a"])
    info = endpoints_info(config)
    assert info["a"]["base_urls"] == ["http://localhost:8080/v1"]
    assert info["b"]["base_urls"] == ["http://localhost:11434/v1"]
    assert info["b"]["api_key_env"] is None  # Ollama takes no key
    assert info["c"]["base_urls"] == ["http://localhost:8000/v1"]


def test_a_pool_with_agent_affinity_keeps_each_agent_on_one_server(tmp_path: Path) -> None:
    with ScriptedServer(seed=0) as one, ScriptedServer(seed=0) as two:
        plain = _run(tmp_path, "plain", _base())
        run = _run(tmp_path, "pool", _base(
            "sim.llm.endpoints.pool.provider=openai_compatible",
            "sim.llm.endpoints.pool.model=scripted",
            f"sim.llm.endpoints.pool.servers=[{one.base_url}, {two.base_url}]",
            "sim.llm.endpoints.pool.affinity=agent"))
        counts = (one.calls, two.calls)
    assert run.result.digest == plain.result.digest
    assert sum(counts) == run.result.llm_calls
    assert min(counts) > 0  # six agents over two servers: both serve some


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(assign=st.lists(st.integers(0, 2), min_size=6, max_size=6),
       mode=st.sampled_from(["sequential", "threads", "asyncio"]),
       engine=st.sampled_from(["round", "async_event"]),
       seed=st.integers(0, 3))
def test_generated_routing_tables_never_change_the_digest(
        assign: list[int], mode: str, engine: str, seed: int) -> None:
    base = [f"sim.engine.mode={mode}", f"sim.engine.step.built_in={engine}", "sim.agents=6",
            "sim.steps=2"]
    base.append(f"seed={seed}")
    single = simulacra.run_society(simulacra.load_config(CONFIG, base))
    rules = ", ".join(f"{{agents: {agent}, endpoint: e{k}}}"
                      for agent, k in zip(AGENTS, assign, strict=True))
    routed = simulacra.run_society(simulacra.load_config(CONFIG, [
        *base, *(f"sim.llm.endpoints.e{k}.preset=scripted" for k in range(3)),
        "sim.llm.routing.default=e0", f"sim.llm.routing.rules=[{rules}]"]))
    assert routed.result.digest == single.result.digest


# -- what a stranger found (each a test that failed before its fix) ----------------------


def test_calls_failed_on_an_endpoint_without_a_fallback_name_it(tmp_path: Path) -> None:
    with ScriptedServer(seed=0) as server:
        def after(report: Any) -> None:
            if report.step == 0:
                server.fail_next(10_000, 500)

        config = simulacra.load_config(CONFIG, _base(
            "sim.engine.mode=threads", *_server("local", server.base_url),
            "run.max_consecutive_provider_failures=3"))
        with pytest.raises(simulacra.ProviderUnavailable, match="endpoint 'local'"):
            simulacra.run_society(config, out=tmp_path / "run", on_step=after)
    failed = [line for line in _lines(tmp_path / "run") if not line["ok"]]
    assert failed
    assert {line["endpoint"] for line in failed} == {"local"}


def test_fallbacks_are_counted_over_every_session(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    with ScriptedServer(seed=0) as backup:
        overrides = _base("sim.steps=4",
                          *_server("primary", dead, "sim.llm.endpoints.primary.fallback=backup"),
                          *_server("backup", backup.base_url), "sim.llm.routing.default=primary",
                          "run.checkpoint_every=1")
        control = simulacra.RunControl()

        def stop(report: Any) -> None:
            if report.step == 1:
                control.request_stop("test")

        with pytest.raises(simulacra.RunStopped):
            simulacra.run_society(simulacra.load_config(CONFIG, overrides),
                                  out=tmp_path / "run", on_step=stop, control=control)
        simulacra.resume_society(tmp_path / "run")
    lines = _lines(tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())["llm"]
    assert summary["fallbacks"] == [{"from": "primary", "to": "backup", "calls": len(lines)}]
    assert summary["endpoints_down"] == ["primary"]


def test_a_replay_keeps_the_endpoints_and_their_costs(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _run(tmp_path, "run", _base(
        "sim.llm.endpoints.cheap.preset=scripted", "sim.llm.endpoints.dear.preset=scripted",
        "sim.llm.endpoints.dear.pricing={prompt_per_mtok: 1000, completion_per_mtok: 2000}",
        "sim.llm.routing.default=cheap",
        "sim.llm.routing.rules=[{agents: [ada0, ben1], endpoint: dear}]"))
    report = simulacra.replay_run(run, out=tmp_path / "again")
    assert report.matches
    original = {(line["agent"], line["n"]): line for line in _lines(run)}
    copied = {(line["agent"], line["n"]): line for line in _lines(tmp_path / "again")}
    assert copied.keys() == original.keys()
    for site, line in copied.items():
        assert line["endpoint"] == original[site]["endpoint"]
        assert line["cost"] == original[site]["cost"]
    before = json.loads((run / "summary.json").read_text())["llm"]
    after = json.loads((tmp_path / "again" / "summary.json").read_text())["llm"]
    assert after["cost"] == before["cost"] > 0
    assert after["provider"] == "endpoints"
    assert set(after["endpoints"]) == {"cheap", "dear"}


def test_a_remote_server_without_its_key_is_refused_before_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    args = ["run", str(CONFIG), "--out", str(tmp_path / "run"), "--no-progress",
            *_base("sim.llm.endpoints.far.preset=vllm", "sim.llm.endpoints.far.model=m",
                   "sim.llm.endpoints.far.base_url=http://192.0.2.1:9/v1")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "sim.llm.endpoints.far.api_key_env: $VLLM_API_KEY is not set" in err
    assert 'api_key_env: ""' in err
    assert not (tmp_path / "run").exists()


def test_a_routing_function_that_raises_stops_the_run_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    route = tmp_path / "route.py"
    route.write_text("def pick(site, request):\n    return {}[site.agent]\n")
    args = ["run", str(CONFIG), "--out", str(tmp_path / "run"), "--no-progress",
            *_base("sim.llm.endpoints.a.preset=scripted",
                   f"sim.llm.routing.function={route}:pick")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "failed: KeyError" in err


def test_a_pool_serves_on_its_live_servers(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    with ScriptedServer(seed=0) as alive, ScriptedServer(seed=0) as dies:
        plain = _run(tmp_path, "plain", _base())

        def after(report: Any) -> None:
            if report.step == 0:  # mid-run it refuses every call: it is down, the pool goes on
                dies.fail_next(10_000, 401)

        args = _base("sim.llm.endpoints.pool.provider=openai_compatible",
                     "sim.llm.endpoints.pool.model=scripted",
                     "sim.llm.endpoints.pool.max_retries=0",
                     f"sim.llm.endpoints.pool.servers=[{alive.base_url}, {dead}, "
                     f"{dies.base_url}]", "sim.llm.endpoints.pool.affinity=round_robin")
        run = simulacra.run_society(simulacra.load_config(CONFIG, args), out=tmp_path / "pool",
                                    on_step=after)
    assert run.result.digest == plain.result.digest
    assert run.result.failed == plain.result.failed
    err = capsys.readouterr().err
    assert f"server {dead} of endpoint 'pool' is down" in err


def test_resuming_a_finished_run_says_so_before_asking_any_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedServer(seed=0) as server:
        _run(tmp_path, "run", _base(*_server("gone", server.base_url)))
    assert main(["run", "--resume", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "holds a finished run; nothing to resume" in err
    assert "preflight" not in err


@pytest.mark.parametrize(("overrides", "expected"), [
    (["sim.llm.endpoints.a.preset=scripted",
      "sim.llm.routing.rules=[{agents: [], endpoint: a}]"], "is an empty list"),
    (["sim.llm.endpoints.a.preset=vllm", "sim.llm.endpoints.a.model=m",
      "sim.llm.endpoints.a.seed=3"], "sim.llm.endpoints.a.seed"),
    (["sim.llm.endpoints.a.preset=scripted", "sim.llm.endpoints.a.fallback=zz"],
     "sim.llm.endpoints.a.fallback: 'zz' is not a declared endpoint"),
])
def test_more_endpoint_mistakes_are_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: list[str],
        expected: str) -> None:
    args = ["run", str(CONFIG), "--out", str(tmp_path / "run"), "--no-progress",
            *_base(*overrides)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert expected in err


@pytest.mark.parametrize(("override", "key", "close"), [
    ("sim.llm.endpoints.locl.model=m", "sim.llm.endpoints.locl", "local"),
    ("sim.llm.endpoints.hostd.base_url=http://127.0.0.1:9/v1", "sim.llm.endpoints.hostd",
     "hosted"),
    ("sim.llm.routing.default=hostd", "sim.llm.routing.default", "hosted"),
    ("sim.llm.endpoints.local.fallback=hostd", "sim.llm.endpoints.local.fallback", "hosted"),
    ("sim.llm.routing.rules=[{agents: ['a*'], endpoint: lokal}]",
     "sim.llm.routing.rules[0].endpoint", "local"),
])
def test_a_misspelt_endpoint_name_is_one_line_naming_the_close_one(
        override: str, key: str, close: str) -> None:
    # An override's dotted key makes a new endpoint of a typo: the error says which
    # declared endpoint was meant, before anything runs.
    example = Path(__file__).resolve().parents[2] / "examples" / "social" / "endpoints.yaml"
    with pytest.raises(simulacra.ConfigError) as caught:
        simulacra.load_config(example, [override])
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith(key), line
    assert f"did you mean {close!r}?" in line, line
