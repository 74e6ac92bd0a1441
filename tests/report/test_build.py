"""build_report and `simulacra report`: one self-contained file that asks no other host for
anything, the data it embeds, `simulacra run --report`, and one clear line for bad input."""

from __future__ import annotations

import json
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

import simulacra
from simulacra import report
from simulacra._util import install_hint
from simulacra.cli import main

ROOT = Path(__file__).resolve().parents[2]
SOCIAL = ROOT / "examples" / "social"


class _Page(HTMLParser):
    """The page's markup: every attribute, and the text of each <script> by its id/type."""

    def __init__(self) -> None:
        super().__init__()
        self.attributes: list[tuple[str, str, str]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._script: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attributes.extend((tag, k, v or "") for k, v in attrs)
        if tag == "script":
            self._script = dict(attrs)
            self.scripts.append((self._script, ""))

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._script = None


def parse(path: Path) -> tuple[_Page, dict[str, Any]]:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    data = json.loads(next(text for attrs, text in page.scripts
                           if attrs.get("id") == "report-data"))
    for attrs, text in page.scripts:
        if attrs.get("id") == "report-log":  # the part parsed when a view needs it
            data.update(json.loads(text))
    return page, data


def test_the_report_is_one_file_that_references_no_other_host(round_run: Path,
                                                                tmp_path: Path) -> None:
    written = report.build_report(round_run, tmp_path / "r.html")
    page, _ = parse(written)
    text = written.read_text(encoding="utf-8")

    # No markup loads anything: no src or href to a URL, no <link>, no external script.
    links = [(tag, key, value) for tag, key, value in page.attributes
             if key in ("src", "href", "action", "data", "poster", "srcset")]
    assert [item for item in links if not item[2].startswith("#")] == []
    assert not any(tag == "link" for tag, _, _ in page.attributes)
    assert all("src" not in attrs for attrs, _ in page.scripts)
    # plotly.js is inlined, once; the page's own code and data name no host at all.
    assert text.count("plotly.js v") <= 2
    assert "Plotly.newPlot" in text
    ours = [body for attrs, body in page.scripts if "plotly.js" not in body[:600]]
    assert ours
    for body in ours:
        assert not re.search(r"https?://", body), body[:200]
        assert "fetch(" not in body
        assert "XMLHttpRequest" not in body
    css = re.search(r"<style>(.*?)</style>", text, re.S)
    assert css is not None
    assert "url(" not in css.group(1)
    assert "@import" not in css.group(1)


def test_the_embedded_data_is_the_run(round_run: Path, tmp_path: Path) -> None:
    run = report.load_society_run(round_run)
    _, data = parse(report.build_report(round_run, tmp_path / "r.html"))

    assert data["kind"] == "society"
    assert dict(data["identity"])["config sha256"] == run.manifest["config_sha256"]
    totals = dict(data["totals"])
    assert totals["cost"] == run.summary["llm"]["cost"]
    assert totals["model calls"] == run.summary["llm"]["calls"]
    assert [c["id"] for c in data["charts"]] == ["actions", "calls", "tokens", "cost",
                                                  "failures", "latency_hist", "latency_pct",
                                                  "latency", "probes"]
    assert all(c["spec"]["data"] for c in data["charts"])
    assert "template" not in data["charts"][0]["spec"]["layout"]  # shared, embedded once
    assert data["template"]
    assert len(data["log"]["rows"]) == len(run.events)
    assert data["failures"][0][0] == "InvalidAction"
    assert data["threads"]["total"] == len(report.conversation_threads(run.events))
    calls = sum(len(c) for c in data["llm"]["calls"].values())
    assert calls == run.summary["llm"]["calls"]
    assert data["llm"]["note"] == ""


def test_the_event_engine_report_has_the_queue_chart(event_run: Path) -> None:
    written = report.build_report(event_run)
    _, data = parse(written)

    assert written == event_run / "report.html"
    assert data["windowed"] is True
    queue = next(c for c in data["charts"] if c["id"] == "queue")
    names = [trace["name"] for trace in queue["spec"]["data"]]
    assert names == ["queue depth", "calls in flight", "wake-ups"]
    assert "simulated" in next(c for c in data["charts"] if c["id"] == "latency")[
        "spec"]["layout"]["title"]["text"]


def test_only_some_model_calls_are_embedded_when_asked(round_run: Path, tmp_path: Path) -> None:
    _, data = parse(report.build_report(round_run, tmp_path / "r.html", llm_calls=7))

    assert sum(len(c) for c in data["llm"]["calls"].values()) == 7
    assert "embeds 7 of the run's" in data["llm"]["note"]
    assert any("--llm-calls" in note for note in data["notes"])
    with pytest.raises(simulacra.ConfigError, match="llm_calls"):
        report.build_report(round_run, tmp_path / "x.html", llm_calls=-1)


def test_a_study_report_has_each_kpi_against_each_parameter(study_dir: Path) -> None:
    _, data = parse(report.build_report(study_dir))

    assert data["kind"] == "study"
    ids = [c["id"] for c in data["charts"]]
    assert ids == [f"{k} ~ {p}" for k in ("mean_wait", "busy", "served")
                   for p in ("clerks", "rate")]
    first = data["charts"][0]["spec"]["data"]
    assert [t["name"] for t in first] == ["rate=0.6", "rate=0.9"]
    assert all(t["error_y"]["array"] for t in first)
    assert len(data["replications"]["rows"]) == 16
    assert data["replications"]["cols"][-1] == "crowded"  # bool KPIs are in the table
    assert len(data["summary"]["rows"]) == 4 * 3


def test_a_monitor_report_has_the_series_and_the_histograms(monitors_file: Path) -> None:
    written = report.build_report(monitors_file)
    _, data = parse(written)

    assert written == monitors_file.with_suffix(".html")
    assert [c["id"] for c in data["charts"]] == ["series:desk queue", "series:desk utilisation",
                                                  "samples:waiting time"]
    assert data["charts"][2]["spec"]["data"][0]["type"] == "histogram"
    assert data["samples_table"]["rows"][0][1] == 200


def test_simulacra_report_writes_the_file_and_says_where(
        round_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "run"
    shutil.copytree(round_run, copy)

    assert main(["report", str(copy)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"report: {copy / 'report.html'} (")
    assert out.endswith("MB)\n")
    assert main(["report", str(copy), "-o", str(tmp_path / "else.html"), "--llm-calls", "0"]) == 0
    _, data = parse(tmp_path / "else.html")
    assert data["llm"]["calls"] == {}


@pytest.mark.parametrize(("make", "message"), [
    ("missing", "does not exist"),
    ("empty", "is not a run directory (no manifest.json, config.yaml or action_events.jsonl)"),
    ("no-events", "is not a run directory of simulacra run: no action_events.jsonl"),
    ("version", "unknown format version 'simulacra.manifest.v2'"),
    ("not-json", "not readable as a monitor file"),
])
def test_bad_input_is_one_line_naming_what_is_missing(
        round_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], make: str,
        message: str) -> None:
    target = tmp_path / "target"
    if make == "empty":
        target.mkdir()
    elif make in ("no-events", "version"):
        shutil.copytree(round_run, target)
        if make == "no-events":
            (target / "action_events.jsonl").unlink()
        else:
            manifest = json.loads((target / "manifest.json").read_text())
            manifest["scheme"] = "simulacra.manifest.v2"
            (target / "manifest.json").write_text(json.dumps(manifest))
    elif make == "not-json":
        target = tmp_path / "monitors.json"
        target.write_text("{not json")

    assert main(["report", str(target)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("error: ")
    assert message in captured.err


def test_without_plotly_report_names_the_extra_before_any_work(
        round_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "plotly", None)
    out = tmp_path / "run"

    assert main(["report", str(round_run), "-o", str(tmp_path / "r.html")]) == 2
    assert main(["run", str(SOCIAL / "config.yaml"), "--out", str(out), "--no-progress",
                 "--report", "sim.agents=3", "sim.steps=1"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["error: simulacra report draws its charts with plotly, which "
                                f"is not installed: {install_hint('report')}"] * 2
    assert not (tmp_path / "r.html").exists()
    assert not out.exists()  # the run did not start
    with pytest.raises(simulacra.ConfigError, match=re.escape(install_hint("report"))):
        report.build_report(round_run, tmp_path / "r.html")


def test_run_report_writes_the_report_when_the_run_ends(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"

    assert main(["run", str(SOCIAL / "config.yaml"), "--out", str(out), "--no-progress",
                 "--report", "sim.agents=6", "sim.steps=2"]) == 0
    assert f"report: {out / 'report.html'} (" in capsys.readouterr().out
    _, data = parse(out / "report.html")
    assert dict(data["totals"])["status"] == "finished"


def test_run_report_writes_the_report_of_a_run_a_budget_stopped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"

    code = main(["run", str(SOCIAL / "config.yaml"), "--out", str(out), "--no-progress",
                 "--report", "sim.agents=6", "sim.steps=6",
                 "sim.llm.pricing.prompt_per_mtok=100", "run.budget.cost=0.2"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert f"report: {out / 'report.html'}" in err
    _, data = parse(out / "report.html")
    assert dict(data["totals"])["status"].startswith("unfinished")
    assert data["notes"][0].startswith("This run did not finish")
    assert 1 <= len(data["steps"]) < 6

    # and --resume --report writes the finished run's
    assert main(["run", "--resume", str(out), "--no-progress", "--report",
                 "run.budget.cost=100"]) == 0
    _, data = parse(out / "report.html")
    assert dict(data["totals"])["status"] == "finished"
    assert len(data["steps"]) == 6


def test_run_report_finds_the_default_run_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)

    assert main(["run", str(SOCIAL / "config.yaml"), "--no-progress", "--report",
                 "sim.agents=3", "sim.steps=1"]) == 0
    [made] = (tmp_path / "runs").iterdir()
    assert (made / "report.html").is_file()
    assert f"report: {Path('runs') / made.name / 'report.html'}" in capsys.readouterr().out


def test_run_report_is_for_society_runs(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "model.py"
    model.write_text("def run(seed=0):\n    return {'x': 1}\n")

    assert main(["run", str(model), "--report"]) == 2
    assert "--report writes the report of a society run" in capsys.readouterr().err


def test_the_report_reads_what_write_monitors_writes(tmp_path: Path) -> None:
    """A kernel model of our own with the resources' own monitors and a Tally of waits."""
    sim = simulacra.Sim(seed=4)
    pumps = simulacra.Resource(sim, 2, monitor=True)
    waits = simulacra.Tally(sim, "wait at the pumps")

    def car(sim: simulacra.Sim) -> Any:
        arrived = sim.now
        with pumps.request() as turn:
            yield turn
            waits.record(sim.now - arrived)
            yield sim.delay(sim.rng("fill").expovariate(1.0))

    def road(sim: simulacra.Sim) -> Any:
        for _ in range(60):
            yield sim.delay(sim.rng("cars").expovariate(1.6))
            sim.spawn(car)

    sim.spawn(road)
    sim.run()
    written = report.build_report(simulacra.write_monitors(tmp_path / "monitors.json", sim))
    _, data = parse(written)

    kinds = {c["id"]: c for c in data["charts"]}
    assert any(i.startswith("series:") and "utilisation" in i for i in kinds)
    assert any(i.startswith("series:") and "queue" in i for i in kinds)
    assert kinds["samples:wait at the pumps"]["spec"]["data"][0]["type"] == "histogram"
    assert data["samples_table"]["rows"][0][:2] == ["wait at the pumps", 60]
