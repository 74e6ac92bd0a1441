"""Reading what runs, studies and kernel models leave behind, and aggregating it for charts.

This module is the data layer of the report and of the live view: plain
dataclasses and lists, no plotting library and no HTML. Everything here works
on the files alone (a run directory, a study directory, a monitor file), or on
the same records held in memory (a live run's telemetry lines and events), so
the live view calls the same functions on what it has so far:

- :func:`source_kind` says what a path holds (``"society"``, ``"study"`` or
  ``"monitors"``), or raises one clear :class:`~simulacra.ConfigError`;
- :func:`load_society_run` reads a run directory into :class:`RunData`;
  :func:`run_identity` and :func:`run_totals` are its identity and headline
  numbers; :func:`step_series` aggregates telemetry and events per step (round
  engine) or per virtual-time window (event-driven engine);
- :func:`event_text`, :func:`event_table` and :func:`event_page` make the
  action log compact, and filter and page it; :func:`conversation_threads`
  finds reply and mention chains; :func:`agent_rows` sums every agent up;
  :func:`llm_calls` reads the recorded model calls through the public
  :class:`simulacra.llm.RecordingStore`; :func:`call_stats` and
  :func:`endpoint_rows` aggregate ``calls.jsonl`` (latency and failures; and
  per endpoint, for a run with ``sim.llm.endpoints``);
- :func:`load_study` and :func:`study_intervals` read a study directory of
  ``simulacra experiment`` and give each KPI's mean and confidence interval
  per config (:func:`simulacra.parallel.mean_interval`);
- :func:`load_monitors` reads a ``simulacra.monitors.v1`` file.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final, Literal

from simulacra._util import naming, os_problem
from simulacra.errors import ConfigError

__all__ = [
    "ENDPOINT_COLUMNS", "MANIFEST_SCHEMES", "MONITORS_FORMAT", "MONITOR_KINDS", "NO_ENDPOINT",
    "STUDY_FORMATS", "AgentRow", "CallStats", "EndpointRow", "EndpointTally", "EventPage",
    "EventTable", "LLMCall", "MonitorData", "MonitorSeries", "RunData", "ScenarioEffect",
    "SourceKind", "StepSeries", "StudyData", "StudyInterval", "Thread", "agent_rows",
    "call_stats", "conversation_threads", "endpoint_rows", "endpoint_table", "event_page",
    "event_table", "event_text", "histogram", "llm_calls", "load_monitors", "load_society_run",
    "load_study", "read_jsonl", "run_files", "run_identity", "run_totals", "scenario_effects",
    "source_kind", "step_series", "study_intervals", "study_parameters", "study_scenarios",
]

#: The ``scheme`` values of ``manifest.json`` this report can read.
MANIFEST_SCHEMES: Final = ("simulacra.manifest.v1",)
#: The ``format`` values of a study directory's ``study.json`` this report can read.
STUDY_FORMATS: Final = ("simulacra.study.v1",)
#: The ``format`` of a monitor file.
MONITORS_FORMAT: Final = "simulacra.monitors.v1"
#: What a monitor series measures.
MONITOR_KINDS: Final = ("queue", "level", "utilisation", "count")

#: The roles of the files a society run directory must hold (see :func:`run_files`).
_RUN_REQUIRED: Final = ("manifest", "config", "events", "telemetry")
_MONITOR_FILE: Final = "monitors.json"

SourceKind = Literal["society", "study", "monitors"]


def run_files() -> Mapping[str, str]:
    """The file names of a society run directory, by role: ``simulacra.societies.RUN_FILES``.

    The one table of them, looked up when first needed, so that the report of a
    study or of a monitor file does not load the society engines.
    """
    from simulacra.societies import RUN_FILES  # noqa: PLC0415  (lazy: see above)

    return RUN_FILES


# -- what a path holds ------------------------------------------------------------------


def source_kind(path: str | Path) -> SourceKind:
    """Whether *path* is a society run directory, a study directory or a monitor file.

    A directory holding ``study.json`` is a study, one holding ``monitors.json``
    (and no run) a kernel model's monitors, one holding ``manifest.json`` or
    ``action_events.jsonl`` a society run; a ``.json`` file is a monitor file.

    Raises:
        ConfigError: *path* does not exist or is none of these (the message
            names what is missing).
    """
    where = Path(path)
    if where.is_file():
        if where.suffix == ".json":
            return "monitors"
        raise ConfigError(f"{str(where)!r} is not a run directory, a study directory or a "
                          "monitor file (monitors.json)")
    if not where.is_dir():
        raise ConfigError(f"{str(where)!r} does not exist")
    if (where / "study.json").is_file():
        return "study"
    names = run_files()
    found = [role for role in _RUN_REQUIRED if (where / names[role]).is_file()]
    if not found and (where / _MONITOR_FILE).is_file():
        return "monitors"
    if found:
        return "society"
    raise ConfigError(f"{str(where)!r} is not a run directory (no {names['manifest']}, "
                      f"{names['config']} or {names['events']}), a study directory (no "
                      f"study.json) or a directory of a kernel model's {_MONITOR_FILE}")


def read_jsonl(path: Path, *, what: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSON Lines file, one per line.

    A last line cut short (the run was killed while writing it: the start of a
    JSON object without its end of line) is left out; any other line that is
    not a JSON object is an error.

    Raises:
        ConfigError: A line is damaged (its number is named) or the file is not UTF-8.
    """
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc}); the {what} is damaged") from None
    lines = text.split("\n")
    complete = text.endswith("\n") or not text
    try:  # one parse of the whole file is twice as fast as a parse per line
        whole = json.loads("[" + ",".join(line for line in lines if line.strip()) + "]")
    except ValueError:
        pass  # a damaged or cut line: found, and named, line by line below
    else:
        if all(item.__class__ is dict for item in whole):
            return whole  # type: ignore[no-any-return]
    out: list[dict[str, Any]] = []
    decode = json.loads
    last = len(lines) - 1
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            item = decode(line)
        except ValueError:
            if number == last and not complete and line.lstrip().startswith("{"):
                break  # cut short by a kill: the run's files hold whole lines only
            raise ConfigError(f"{path}: line {number + 1} is not JSON; the {what} is "
                              "damaged") from None
        if not isinstance(item, dict):
            raise ConfigError(f"{path}: line {number + 1} is not a JSON object; the {what} "
                              "is damaged")
        out.append(item)
    return out


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:  # its message names the path again
        raise ConfigError(f"{path}: not readable as {what} ({os_problem(exc)})") from None
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        raise ConfigError(f"{path}: not readable as {what} ({exc})") from None


def _read_json_object(path: Path, what: str) -> dict[str, Any]:
    data = _read_json(path, what)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not {what} (a JSON object)")
    return data


def _run_manifest(path: str | os.PathLike[str]) -> tuple[Path, Path, Any]:
    """A society run directory, its manifest file and what that file holds (any JSON).

    Raises:
        ConfigError: *path* does not exist or is a file, lacks a file every run
            directory has (the message names it), or its manifest is not
            readable JSON.
    """
    where = Path(path)
    if not where.is_dir():
        raise ConfigError(f"{str(where)!r} is not a run directory: it does not exist"
                          if not where.exists() else
                          f"{str(where)!r} is not a run directory: it is a file")
    names = run_files()
    for role in _RUN_REQUIRED:
        if not (where / names[role]).is_file():
            raise ConfigError(f"{str(where)!r} is not a run directory of simulacra run: "
                              f"no {names[role]}")
    manifest_file = where / names["manifest"]
    return where, manifest_file, _read_json(manifest_file, "a run manifest")


def _check_manifest_scheme(manifest_file: Path, scheme: object) -> None:
    if scheme not in MANIFEST_SCHEMES:
        raise ConfigError(f"{manifest_file}: unknown format version {scheme!r}; "
                          f"this simulacra reads {', '.join(MANIFEST_SCHEMES)}")


# -- society runs -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunData:
    """One society run directory, read.

    Attributes:
        path: The run directory.
        manifest: ``manifest.json``.
        config: The resolved ``config.yaml``.
        summary: ``summary.json``; empty when the run did not finish (it was
            stopped by a budget or Ctrl-C, or is still running).
        telemetry: The lines of ``telemetry.jsonl``, one per step or window.
        events: The lines of ``action_events.jsonl`` (``{"i", "step", "time",
            "agent", "kind", "data", "triggers"?}``), in resolution order.
        calls: The lines of ``calls.jsonl``, one per model call (empty for a
            run made before simulacra wrote it); see :func:`call_stats`.
    """

    path: Path
    manifest: dict[str, Any]
    config: dict[str, Any]
    summary: dict[str, Any]
    telemetry: list[dict[str, Any]]
    events: list[dict[str, Any]]
    calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def engine(self) -> str:
        """The step engine: ``"round"`` or ``"async_event"`` (or a registered one)."""
        engine = self.summary.get("engine") or {}
        step = engine.get("step") if isinstance(engine, dict) else None
        if not step:
            sim = self.config.get("sim") or {}
            step = ((sim.get("engine") or {}).get("step") or {}).get("built_in", "round")
        return str(step)

    @property
    def windowed(self) -> bool:
        """Whether the telemetry is per virtual-time window (the event-driven engine)."""
        return any("window" in line for line in self.telemetry)

    @property
    def finished(self) -> bool:
        """Whether the run ended (its ``summary.json`` was written)."""
        return bool(self.summary)

    @property
    def recordings(self) -> Path:
        """The run's ``llm_recordings.sqlite`` (it may not exist)."""
        return self.path / run_files()["recordings"]


def load_society_run(path: str | Path) -> RunData:
    """Read a society run directory of ``simulacra run CONFIG.yaml``.

    A run that is still going, or was stopped, is read as far as its files
    go (it has no ``summary.json`` yet).

    Raises:
        ConfigError: *path* is not a run directory (the message names the
            missing file), its manifest is of an unknown version, or a file
            is damaged.
    """
    import yaml  # type: ignore[import-untyped]  # noqa: PLC0415  (a dependency; lazy)

    where, manifest_file, manifest = _run_manifest(path)
    if not isinstance(manifest, dict):
        raise ConfigError(f"{manifest_file}: not a run manifest (a JSON object)")
    _check_manifest_scheme(manifest_file, manifest.get("scheme"))
    names = run_files()
    config_file = where / names["config"]
    try:
        config = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{config_file}: not valid YAML ({exc})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{config_file}: not a run config")
    summary_file = where / names["summary"]
    summary = (_read_json_object(summary_file, "a run summary")
               if summary_file.is_file() else {})
    telemetry = read_jsonl(where / names["telemetry"], what="run's telemetry")
    events = read_jsonl(where / names["events"], what="run's event log")
    calls_file = where / names["calls"]
    calls = read_jsonl(calls_file, what="run's call log") if calls_file.is_file() else []
    return RunData(where, manifest, config, summary, telemetry, events, calls)


def _sim(run: RunData) -> dict[str, Any]:
    sim = run.config.get("sim")
    return sim if isinstance(sim, dict) else {}


def run_identity(run: RunData) -> dict[str, Any]:
    """Who the run is: name, versions, engine, mode, seed, provider and model, config hash.

    The keys are labels, in the order to show them; values are str, int or None.
    """
    manifest, sim = run.manifest, _sim(run)
    provider = manifest.get("provider") or {}
    engine = sim.get("engine") or {}
    sessions = manifest.get("sessions") or []
    return {
        "name": run.config.get("name"),
        "simulacra": manifest.get("simulacra"),
        "python": f"{manifest.get('python', '?')} ({manifest.get('implementation', '?')})",
        "platform": manifest.get("platform"),
        "engine": run.engine,
        "mode": engine.get("mode"),
        "concurrency": engine.get("concurrency"),
        "seed": manifest.get("seed", run.config.get("seed")),
        "agents": sim.get("agents"),
        "steps": sim.get("steps"),
        "provider": provider.get("name"),
        "model": provider.get("model"),
        "base_url": provider.get("base_url"),
        "config sha256": manifest.get("config_sha256"),
        "scenario": _scenario_label(manifest.get("scenario")),
        "world factory": (manifest.get("world_factory") or {}).get("ref"),
        "completions": manifest.get("completions"),
        "sessions": " + ".join(str(s) for s in sessions) if sessions else None,
        "replayable": manifest.get("replayable"),
        "finished": manifest.get("finished"),
        "digest": run.summary.get("digest"),
    }


def _scenario_label(entry: object) -> str | None:
    """``name (short hash)`` of a manifest's ``scenario`` entry; None without one."""
    if not isinstance(entry, dict) or not entry.get("name"):
        return None
    digest = str(entry.get("sha256") or "")[:12]
    return f"{entry['name']} ({digest})" if digest else str(entry["name"])


def run_totals(run: RunData) -> dict[str, Any]:
    """The headline numbers: steps, events, turns, failures, model calls, tokens, cost.

    From ``summary.json`` when the run finished; otherwise summed from the
    telemetry written so far (the keys are the same). ``world`` is the
    world's own summary (empty for an unfinished run).
    """
    lines = run.telemetry
    summary, llm = run.summary, run.summary.get("llm") or {}
    failures = summary.get("failures") or {}
    if summary:
        return {
            "status": "finished",
            "steps": summary.get("steps"),
            "events": summary.get("events"),
            "turns": failures.get("turns", summary.get("turns")),
            "failed turns": failures.get("failed", summary.get("failed_turns", 0)),
            "failed by kind": dict(failures.get("by_kind") or {}),
            "model calls": llm.get("calls", 0),
            "prompt tokens": llm.get("prompt_tokens", 0),
            "completion tokens": llm.get("completion_tokens", 0),
            "cost": llm.get("cost", 0.0),
            "pricing": llm.get("pricing"),
            "wall seconds": summary.get("wall_s"),
            "world": dict(summary.get("summary") or {}),
        }
    by_kind: dict[str, int] = {}
    for event in run.events:
        if event.get("kind") == "turn_failed":
            error = str((event.get("data") or {}).get("error", "?"))
            by_kind[error] = by_kind.get(error, 0) + 1
    return {
        "status": f"unfinished (stopped, or still running): no {run_files()['summary']}",
        "steps": len(lines),
        "events": len(run.events),
        "turns": sum(int(line.get("participants", 0)) for line in lines),
        "failed turns": sum(int(line.get("failed", 0)) for line in lines),
        "failed by kind": dict(sorted(by_kind.items())),
        "model calls": sum(int(line.get("llm_calls", 0)) for line in lines),
        "prompt tokens": sum(int(line.get("prompt_tokens", 0)) for line in lines),
        "completion tokens": sum(int(line.get("completion_tokens", 0)) for line in lines),
        "cost": math.fsum(float(line.get("cost", 0.0)) for line in lines),
        "pricing": ((_sim(run).get("llm") or {}).get("pricing")),
        "wall seconds": round(math.fsum(float(line.get("wall_s", 0.0)) for line in lines), 6),
        "world": {},
    }


@dataclass(slots=True)
class StepSeries:
    """Per-step (or per-window) series, each a list with one value per telemetry line.

    Attributes:
        windowed: True for the event-driven engine: ``x`` is the window's
            start in virtual time, and the window fields are filled.
        x: The step number, or the window's start.
        x_title: What ``x`` is, for an axis title.
        step: The step (or window) number of each line.
        events: Events per step.
        participants: Turns taken per step.
        kinds: Events by kind: kind -> counts (every kind seen, sorted).
        llm_calls, prompt_tokens, completion_tokens: Per step.
        cost: Cost per step; ``cost_cumulative`` its running total.
        failed: Failed turns per step; ``failed_kinds`` by error type (from
            the ``turn_failed`` events, when given).
        wall_s: Wall-clock seconds per step.
        latency_mean, latency_max: Simulated model latency of the turns
            resolved in each window (event-driven engine; empty otherwise).
        queue_max: The most entries in the engine's queue at once, per window.
        in_flight_max: The most model calls in flight at once, per window.
        wakes, resolved, chain_max: Per window.
        probes: The world's probes per step: probe name -> values (None where
            a line lacks it).
    """

    windowed: bool = False
    x: list[float] = field(default_factory=list)
    x_title: str = "step"
    step: list[int] = field(default_factory=list)
    events: list[int] = field(default_factory=list)
    participants: list[int] = field(default_factory=list)
    kinds: dict[str, list[int]] = field(default_factory=dict)
    llm_calls: list[int] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    completion_tokens: list[int] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    cost_cumulative: list[float] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    failed_kinds: dict[str, list[int]] = field(default_factory=dict)
    wall_s: list[float] = field(default_factory=list)
    latency_mean: list[float] = field(default_factory=list)
    latency_max: list[float] = field(default_factory=list)
    queue_max: list[int] = field(default_factory=list)
    in_flight_max: list[int] = field(default_factory=list)
    wakes: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    chain_max: list[int] = field(default_factory=list)
    probes: dict[str, list[Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The series as one JSON-ready dict (the field names as keys)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def step_series(telemetry: Sequence[Mapping[str, Any]] | RunData,
                events: Iterable[Mapping[str, Any]] | None = None) -> StepSeries:
    """Aggregate telemetry lines (and, for failures by kind, events) per step or window.

    Args:
        telemetry: The lines of ``telemetry.jsonl`` so far (or a whole
            :class:`RunData`, whose events are then used too).
        events: The events, for the failed turns by error type; optional.

    Returns:
        One value per line in every list; a window run's ``x`` is virtual time.
    """
    if isinstance(telemetry, RunData):
        events = telemetry.events if events is None else events
        lines: Sequence[Mapping[str, Any]] = telemetry.telemetry
    else:
        lines = telemetry
    out = StepSeries(windowed=any("window" in line for line in lines))
    if out.windowed:
        out.x_title = "virtual time (window start)"
    position: dict[int, int] = {}
    kinds = sorted({str(k) for line in lines for k in (line.get("kinds") or {})})
    out.kinds = {k: [] for k in kinds}
    probe_names = sorted({str(k) for line in lines for k in (line.get("probes") or {})})
    out.probes = {k: [] for k in probe_names}
    total = 0.0
    for number, line in enumerate(lines):
        step = int(line.get("step", number))
        position[step] = number
        window = line.get("window") if isinstance(line.get("window"), dict) else None
        out.step.append(step)
        out.x.append(float(window.get("start", step)) if window else float(step))
        out.events.append(int(line.get("events", 0)))
        out.participants.append(int(line.get("participants", 0)))
        line_kinds = line.get("kinds") or {}
        for kind in kinds:
            out.kinds[kind].append(int(line_kinds.get(kind, 0)))
        out.llm_calls.append(int(line.get("llm_calls", 0)))
        out.prompt_tokens.append(int(line.get("prompt_tokens", 0)))
        out.completion_tokens.append(int(line.get("completion_tokens", 0)))
        cost = float(line.get("cost", 0.0))
        total += cost
        out.cost.append(cost)
        out.cost_cumulative.append(round(total, 12))
        out.failed.append(int(line.get("failed", 0)))
        out.wall_s.append(float(line.get("wall_s", 0.0)))
        probes = line.get("probes") or {}
        for name in probe_names:
            out.probes[name].append(probes.get(name))
        if window is not None:
            out.latency_mean.append(float(window.get("latency_mean", 0.0)))
            out.latency_max.append(float(window.get("latency_max", 0.0)))
            out.queue_max.append(int(window.get("queue_max", 0)))
            out.in_flight_max.append(int(window.get("in_flight_max", 0)))
            out.wakes.append(int(window.get("wakes", 0)))
            out.resolved.append(int(window.get("resolved", 0)))
            out.chain_max.append(int(window.get("chain_max", 0)))
    failed_kinds: dict[str, list[int]] = {}
    for event in events or ():
        if event.get("kind") != "turn_failed":
            continue
        at = position.get(int(event.get("step", -1)))
        if at is None:
            continue
        error = str((event.get("data") or {}).get("error", "?"))
        counts = failed_kinds.setdefault(error, [0] * len(lines))
        counts[at] += 1
    out.failed_kinds = dict(sorted(failed_kinds.items()))
    return out


# -- the action log ---------------------------------------------------------------------


def event_text(event: Mapping[str, Any]) -> str:
    """One line saying what an event did, for the log browser and its text search.

    The text of a post or reply; ``likes #3 by @ada`` for a like, ``follows
    @ada`` for a follow, ``TypeName: message`` for a failed turn, the
    question and answer of a scenario's interview, ``knob: old -> new`` for a
    scenario's knob change; otherwise
    the event's data as compact JSON (empty for an event without data).
    """
    data = event.get("data")
    if not data:
        return ""
    if data.__class__ is not dict and not isinstance(data, Mapping):
        return str(data)
    text = data.get("text")
    if text.__class__ is str:  # the common case first: a report reads every event
        return text  # type: ignore[no-any-return,unused-ignore]
    kind = event.get("kind")
    if kind == "turn_failed":
        return f"{data.get('error', '?')}: {data.get('message', '')}"
    if kind == "like" and "post" in data:
        by = f" by @{data['author']}" if "author" in data else ""
        return f"likes #{data['post']}{by}"
    if kind == "follow" and "whom" in data:
        return f"follows @{data['whom']}"
    if kind == "interview" and "question" in data:  # a scenario's question, not a world event
        return f"asked {data['question']!r} ({data.get('scenario', '?')}): {data.get('answer', '')}"
    if kind == "knob" and "knob" in data:
        return (f"{data['knob']}: {data.get('from')!r} -> {data.get('to')!r} "
                f"({data.get('scenario', '?')})")
    if not data:
        return ""
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _concerned(event: Mapping[str, Any]) -> list[str]:
    """The agents an event concerns other than its author: triggers, a like's author, whom."""
    author = event.get("agent")
    triggers = event.get("triggers")
    names: list[str] = []
    if triggers:
        for name in triggers:
            if name.__class__ is str and name != author and name not in names:
                names.append(name)
    data = event.get("data")
    if data and (data.__class__ is dict or isinstance(data, Mapping)):
        for key in ("author", "whom"):
            value = data.get(key)
            if value is not None and value.__class__ is str and value != author and (
                    value not in names):
                names.append(value)
    return names


@dataclass(frozen=True, slots=True)
class EventTable:
    """The action log in a compact, columnar form (what the report embeds).

    Attributes:
        agents: Every agent name (authors and agents concerned), sorted.
        kinds: Every event kind, sorted.
        rows: One per event, in log order: ``[i, step, time, agent, kind,
            text, concerned]``, and the agent's ``turn`` last when the event
            has one (the event-driven engine's), where ``agent`` and ``kind`` index
            :attr:`agents` and :attr:`kinds`, ``text`` is :func:`event_text`
            and ``concerned`` lists the indices of the other agents the
            event concerns (mentions, the replied-to or liked author, whom
            it follows); ``0`` stands for an empty list.
    """

    agents: list[str]
    kinds: list[str]
    rows: list[list[Any]]

    def to_json(self) -> dict[str, Any]:
        """``{"agents", "kinds", "rows"}``."""
        return {"agents": self.agents, "kinds": self.kinds, "rows": self.rows}


def event_table(events: Sequence[Mapping[str, Any]], agents: Iterable[str] = ()) -> EventTable:
    """The compact form of *events* (see :class:`EventTable`).

    *agents* adds names that may have made no event (every agent of the run).
    """
    names = set(agents)
    kinds: set[str] = set()
    rows: list[list[Any]] = []
    append = rows.append
    # One pass with names, then names become indices: a report reads every event.
    for number, event in enumerate(events):
        author, kind = event.get("agent"), event.get("kind")
        if author.__class__ is not str:
            author = str(author)
        if kind.__class__ is not str:
            kind = str(kind)
        names.add(author)
        kinds.add(kind)
        others = _concerned(event)
        if others:
            names.update(others)
        time = event.get("time", 0.0)
        row = [event.get("i", number), event.get("step", 0),
               round(time, 6) if time.__class__ is float else time, author, kind,
               event_text(event), others or 0]
        turn = event.get("turn")
        if turn is not None:  # the event-driven engine's: the agent's turn ("step": window)
            row.append(turn)
        append(row)
    agent_list, kind_list = sorted(names), sorted(kinds)
    agent_at = {name: i for i, name in enumerate(agent_list)}
    kind_at = {name: i for i, name in enumerate(kind_list)}
    for row in rows:
        row[3] = agent_at[row[3]]
        row[4] = kind_at[row[4]]
        if row[6]:
            row[6] = [agent_at[n] for n in row[6]]
    return EventTable(agent_list, kind_list, rows)


@dataclass(frozen=True, slots=True)
class EventPage:
    """One page of a filtered action log.

    Attributes:
        total: How many events match the filter.
        offset: The index (among the matches) of the first event of the page.
        events: The events of the page, as read from the log.
    """

    total: int
    offset: int
    events: list[Mapping[str, Any]]


def event_page(events: Sequence[Mapping[str, Any]], *, agent: str | None = None,
               kind: str | None = None, steps: tuple[int | None, int | None] = (None, None),
               times: tuple[float | None, float | None] = (None, None),
               text: str | None = None, concerning: bool = False, offset: int = 0,
               limit: int = 100) -> EventPage:
    """Filter *events* as the log browser does and return one page of the matches.

    Args:
        events: The events (dicts of ``action_events.jsonl``), in log order.
        agent: Only this agent's events; with *concerning*, also the events
            that concern it (mention it, reply to or like it, follow it).
        kind: Only events of this kind.
        steps: Inclusive ``(first, last)`` step; None leaves a side open.
        times: Inclusive ``(first, last)`` virtual time; None leaves a side open.
        text: Only events whose :func:`event_text`, agent or kind contains
            this (case-insensitive).
        concerning: See *agent*.
        offset: The first match to return.
        limit: How many matches to return at most.

    Raises:
        ConfigError: *offset* or *limit* is negative.
    """
    if offset < 0 or limit < 0:
        raise ConfigError(f"event_page: offset and limit must be >= 0, got {offset} and {limit}")
    needle = text.casefold() if text else None
    first_step, last_step = steps
    first_time, last_time = times
    total = 0
    page: list[Mapping[str, Any]] = []
    for event in events:
        if agent is not None and event.get("agent") != agent and not (
                concerning and agent in _concerned(event)):
            continue
        if kind is not None and event.get("kind") != kind:
            continue
        step = int(event.get("step", 0))
        if (first_step is not None and step < first_step) or (
                last_step is not None and step > last_step):
            continue
        time = float(event.get("time", 0.0))
        if (first_time is not None and time < first_time) or (
                last_time is not None and time > last_time):
            continue
        if needle is not None and needle not in (
                f"{event_text(event)}\n{event.get('agent')}\n{event.get('kind')}").casefold():
            continue
        if offset <= total < offset + limit:
            page.append(event)
        total += 1
    return EventPage(total, offset, page)


# -- conversations ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Thread:
    """One conversation: a root message and the replies under it.

    Attributes:
        events: Indices (into the events given) of the thread's messages, in
            thread order (depth first, replies in log order).
        depth: The depth of each of them (0 for the root).
        longest: The length of its longest chain, root to leaf, in messages.
        agents: The agents who wrote in it, in order of first message.
    """

    events: list[int]
    depth: list[int]
    longest: int
    agents: list[str]


def conversation_threads(events: Sequence[Mapping[str, Any]],
                         limit: int | None = None) -> list[Thread]:
    """The reply and mention chains of a run as threads, the longest first.

    A *message* is an event with a ``text``. Its parent is the message it
    replies to (``data.reply_to`` naming a ``data.post`` id). In a world
    without reply ids, a message that answers a mention (it is by an agent
    an earlier message mentioned, and concerns that message's author)
    hangs under the newest such message instead. Threads of a single
    message are left out. Ties are broken by the number of messages, then
    by the log order of the root.

    Args:
        events: The events, in log order.
        limit: Return at most this many threads.
    """
    messages = [n for n, e in enumerate(events)
                if isinstance((e.get("data") or {}).get("text"), str)]
    by_post: dict[Any, int] = {}
    has_reply_ids = False
    for n in messages:
        data = events[n]["data"]
        if "post" in data:
            by_post[data["post"]] = n
        if "reply_to" in data:
            has_reply_ids = True
    parent: dict[int, int] = {}
    if has_reply_ids:
        for n in messages:
            target = events[n]["data"].get("reply_to")
            if target is not None and by_post.get(target, n) < n:
                parent[n] = by_post[target]
    else:
        #: agent -> the newest message that mentioned it: (message, its author)
        mentioned: dict[str, int] = {}
        for n in messages:
            event = events[n]
            author = str(event.get("agent"))
            earlier = mentioned.get(author)
            if earlier is not None and events[earlier].get("agent") in _concerned(event):
                parent[n] = earlier
            for name in event.get("triggers") or ():
                mentioned[str(name)] = n
    children: dict[int, list[int]] = {}
    for child, up in parent.items():
        children.setdefault(up, []).append(child)
    roots = [n for n in messages if n not in parent and n in children]
    threads: list[Thread] = []
    for root in roots:
        order: list[int] = []
        depth: list[int] = []
        stack = [(root, 0)]
        while stack:
            node, level = stack.pop()
            order.append(node)
            depth.append(level)
            stack.extend((c, level + 1) for c in reversed(children.get(node, ())))
        authors = list(dict.fromkeys(str(events[n].get("agent")) for n in order))
        threads.append(Thread(order, depth, max(depth) + 1, authors))
    threads.sort(key=lambda t: (-t.longest, -len(t.events), t.events[0]))
    return threads if limit is None else threads[:limit]


# -- agents -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One agent's numbers.

    Attributes:
        agent: Its name.
        events: Events it made.
        kinds: Its events by kind.
        concerning: Events of others that concern it (mentions, replies,
            likes, follows).
        calls, prompt_tokens, completion_tokens, cost: Its model calls (from
            ``summary.json``'s ``llm.per_agent``; 0 when unknown).
    """

    agent: str
    events: int
    kinds: dict[str, int]
    concerning: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost: float


def agent_rows(run: RunData, table: EventTable | None = None) -> list[AgentRow]:
    """Every agent of the run, sorted by name.

    The agents are those that made an event, were concerned by one, or made
    model calls. *table* is the run's :func:`event_table`, when it is made already.
    """
    per_agent = (run.summary.get("llm") or {}).get("per_agent") or {}
    made: dict[str, dict[str, int]] = {}
    concerning: dict[str, int] = {}
    if table is None:
        table = event_table(run.events)
    agents, kinds_of = table.agents, table.kinds
    counts: dict[tuple[int, int], int] = {}
    concerned: dict[int, int] = {}
    for row in table.rows:
        key = (row[3], row[4])
        counts[key] = counts.get(key, 0) + 1
        if row[6]:
            for other in row[6]:
                concerned[other] = concerned.get(other, 0) + 1
    for (agent, kind), count in counts.items():
        made.setdefault(agents[agent], {})[kinds_of[kind]] = count
    concerning = {agents[i]: n for i, n in concerned.items()}
    names = sorted(set(made) | set(concerning) | set(per_agent))
    rows = []
    for name in names:
        usage = per_agent.get(name) or {}
        kinds = dict(sorted(made.get(name, {}).items()))
        rows.append(AgentRow(name, sum(kinds.values()), kinds, concerning.get(name, 0),
                             int(usage.get("calls", 0)), int(usage.get("prompt_tokens", 0)),
                             int(usage.get("completion_tokens", 0)),
                             float(usage.get("cost", 0.0))))
    return rows


# -- the call log -----------------------------------------------------------------------


def _percentile(ordered: Sequence[float], q: float) -> float:
    """The *q* quantile of sorted values (linear between the two nearest)."""
    at = (len(ordered) - 1) * q
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


@dataclass(frozen=True, slots=True)
class CallStats:
    """What ``calls.jsonl`` says: the latency distribution and the failed calls.

    Attributes:
        simulated: True when ``latency`` is the simulated latency (the
            event-driven engine), False for wall-clock seconds.
        latency: The latency of every call that returned, sorted.
        wall: The wall-clock seconds of every call that returned, sorted.
        per_step: Step (or window) -> ``(calls, failed, p50, p90, p99, max)``
            of that step's latencies (NaN without a returned call).
        failed_by_kind: Error type -> failed calls.
        failed_by_agent: Agent -> error type -> failed calls.
        first_failure: Error type -> its first failed call (the line).
        sessions: How many sessions wrote the log (a resumed run: more than one).
    """

    simulated: bool
    latency: list[float]
    wall: list[float]
    per_step: dict[int, tuple[int, int, float, float, float, float]]
    failed_by_kind: dict[str, int]
    failed_by_agent: dict[str, dict[str, int]]
    first_failure: dict[str, dict[str, Any]]
    sessions: int

    @property
    def failed(self) -> int:
        """How many calls failed."""
        return sum(self.failed_by_kind.values())

    def quantile(self, q: float) -> float:
        """The *q* quantile of :attr:`latency` (NaN when no call returned)."""
        return _percentile(self.latency, q) if self.latency else math.nan


def call_stats(run: RunData) -> CallStats:
    """Aggregate ``calls.jsonl``: latencies (sorted), percentiles per step, failed calls."""
    simulated = run.windowed or run.engine == "async_event"
    latency: list[float] = []
    wall: list[float] = []
    by_step: dict[int, list[float]] = {}
    counts: dict[int, list[int]] = {}
    by_kind: dict[str, int] = {}
    by_agent: dict[str, dict[str, int]] = {}
    first: dict[str, dict[str, Any]] = {}
    sessions: set[int] = set()
    for call in run.calls:
        step = int(call.get("step", 0))
        sessions.add(int(call.get("session", 0)))
        count = counts.get(step)
        if count is None:
            count = counts[step] = [0, 0]
        count[0] += 1
        if call.get("ok", True):
            value = call.get("latency_s")
            if isinstance(value, int | float):
                latency.append(float(value))
                by_step.setdefault(step, []).append(float(value))
            seconds = call.get("wall_s")
            if isinstance(seconds, int | float):
                wall.append(float(seconds))
            continue
        count[1] += 1
        error = str(call.get("error", "?"))
        by_kind[error] = by_kind.get(error, 0) + 1
        agent = by_agent.setdefault(str(call.get("agent", "")), {})
        agent[error] = agent.get(error, 0) + 1
        first.setdefault(error, call)
    per_step: dict[int, tuple[int, int, float, float, float, float]] = {}
    for step in sorted(counts):
        values = sorted(by_step.get(step, ()))
        n, failed = counts[step]
        per_step[step] = ((n, failed, _percentile(values, 0.5), _percentile(values, 0.9),
                           _percentile(values, 0.99), values[-1]) if values else
                          (n, failed, math.nan, math.nan, math.nan, math.nan))
    latency.sort()
    wall.sort()
    return CallStats(simulated, latency, wall, per_step, dict(sorted(by_kind.items())),
                     {a: dict(sorted(k.items())) for a, k in sorted(by_agent.items())}, first,
                     len(sessions))


def histogram(values: Sequence[float], bins: int = 40) -> tuple[list[float], list[int], float,
                                                                  int]:
    """Equal-width bins of sorted *values* from 0 to about their 99.5th percentile.

    Returns ``(left edges, counts, width, values above the last bin)``: a
    long tail does not squash the rest into one bin; what lies past it is
    counted, not drawn.
    """
    if not values:
        return [], [], 0.0, 0
    top = _percentile(values, 0.995) if len(values) >= 200 else values[-1]
    if top <= 0:
        top = values[-1] if values[-1] > 0 else 1.0
    width = top / bins
    counts = [0] * bins
    above = 0
    for value in values:
        at = int(value / width) if width > 0 else 0
        if at >= bins:
            if value <= top:
                at = bins - 1
            else:
                above += 1
                continue
        counts[max(at, 0)] += 1
    return [i * width for i in range(bins)], counts, width, above


# -- calls by endpoint ------------------------------------------------------------------

#: The row of the calls of a run with endpoints whose line names none (a resumed run's
#: first session, say): shown beside the endpoints' rows.
NO_ENDPOINT: Final = "(no endpoint)"


@dataclass(frozen=True, slots=True)
class EndpointRow:
    """The model calls one endpoint served or failed (``calls.jsonl`` lines with ``endpoint``).

    Attributes:
        endpoint: Its name (``sim.llm.endpoints``); :data:`NO_ENDPOINT` for
            the lines of the run that name none.
        calls: The calls it served or failed (every line naming it).
        failed: Those that failed (``ok`` false).
        fallback_in: Calls moved here because the endpoint they were routed
            to was down (the lines naming it with a ``fallback_from``).
        fallback_out: Calls routed here that were moved to a fallback (the
            lines whose ``fallback_from`` names it): in another row's calls.
        prompt_tokens, completion_tokens: Summed over its calls.
        cost: Summed over its calls (priced at its own pricing).
        latency: The latency of every call it served that returned, sorted
            (wall-clock seconds, or simulated ones on the event-driven engine).
        provider, model: As ``summary.json``'s ``llm.endpoints`` declares
            them (None when unknown: a run that did not finish).
    """

    endpoint: str
    calls: int
    failed: int
    fallback_in: int
    fallback_out: int
    prompt_tokens: int
    completion_tokens: int
    cost: float
    latency: list[float]
    provider: str | None = None
    model: str | None = None

    @property
    def latency_mean(self) -> float:
        """The mean of :attr:`latency` (NaN when no call returned)."""
        return math.fsum(self.latency) / len(self.latency) if self.latency else math.nan

    def quantile(self, q: float) -> float:
        """The *q* quantile of :attr:`latency` (NaN when no call returned)."""
        return _percentile(self.latency, q) if self.latency else math.nan


class EndpointTally:
    """``calls.jsonl`` lines summed per endpoint, as they are read.

    The live view adds them one by one, :func:`endpoint_rows` all at once.

    A line without ``endpoint`` (and without ``fallback_from``) is counted under
    :data:`NO_ENDPOINT`, which :meth:`rows` shows only beside named endpoints:
    a run without endpoints has no rows.
    """

    __slots__ = ("_sums",)

    def __init__(self) -> None:
        #: endpoint -> [calls, failed, in, out, prompt, completion, cost, [latencies]]
        self._sums: dict[str, list[Any]] = {}

    def _sum(self, name: str) -> list[Any]:
        sums = self._sums.get(name)
        if sums is None:
            sums = self._sums[name] = [0, 0, 0, 0, 0, 0, 0.0, []]
        return sums

    def add(self, call: Mapping[str, Any]) -> None:
        """Count one line of ``calls.jsonl``."""
        endpoint, moved = call.get("endpoint"), call.get("fallback_from")
        sums = self._sum(NO_ENDPOINT if endpoint is None else str(endpoint))
        sums[0] += 1
        if moved is not None:
            sums[2] += 1
            self._sum(str(moved))[3] += 1
        prompt, completion = call.get("prompt_tokens"), call.get("completion_tokens")
        if isinstance(prompt, int):
            sums[4] += prompt
        if isinstance(completion, int):
            sums[5] += completion
        cost = call.get("cost")
        if isinstance(cost, int | float):
            sums[6] += cost
        if not call.get("ok", True):
            sums[1] += 1
            return
        value = call.get("latency_s")
        if isinstance(value, int | float) and not isinstance(value, bool):
            sums[7].append(float(value))

    def update(self, other: EndpointTally) -> None:
        """Add the lines *other* counted."""
        for name, theirs in other._sums.items():
            sums = self._sum(name)
            for at in range(7):
                sums[at] += theirs[at]
            sums[7].extend(theirs[7])

    def __bool__(self) -> bool:
        """Whether a line named an endpoint."""
        return any(name != NO_ENDPOINT for name in self._sums)

    def rows(self, declared: Mapping[str, Any] | None = None) -> list[EndpointRow]:
        """One row per endpoint, sorted by name; empty when no line named an endpoint.

        :data:`NO_ENDPOINT` comes last.

        *declared* is ``summary.json``'s ``llm.endpoints`` (name -> ``{"provider",
        "model", ...}``): it names each row's provider and model, and adds a row
        of zeros for an endpoint no call reached.
        """
        if not self:
            return []
        names = set(self._sums) | {str(n) for n in declared or ()}
        out = []
        for name in sorted(names, key=lambda n: (n == NO_ENDPOINT, n)):
            calls, failed, moved_in, moved_out, prompt, completion, cost, latency = (
                self._sums.get(name) or [0, 0, 0, 0, 0, 0, 0.0, []])
            info = (declared or {}).get(name)
            info = info if isinstance(info, Mapping) else {}
            provider, model = info.get("provider"), info.get("model")
            out.append(EndpointRow(name, calls, failed, moved_in, moved_out, prompt, completion,
                                   round(float(cost), 12), sorted(latency),
                                   None if provider is None else str(provider),
                                   None if model is None else str(model)))
        return out


def endpoint_rows(run: RunData | Iterable[Mapping[str, Any]]) -> list[EndpointRow]:
    """The calls, failed calls, fallbacks, tokens, cost and latency of each endpoint.

    From the lines of ``calls.jsonl`` (a :class:`RunData`'s, or lines read so
    far): empty for a run whose lines name no endpoint (a run without
    ``sim.llm.endpoints``). Of a :class:`RunData`, ``summary.json``'s
    ``llm.endpoints`` adds each endpoint's provider and model. See
    :class:`EndpointTally`.
    """
    tally = EndpointTally()
    declared: Mapping[str, Any] | None = None
    if isinstance(run, RunData):
        endpoints = (run.summary.get("llm") or {}).get("endpoints")
        declared = endpoints if isinstance(endpoints, Mapping) else None
        lines: Iterable[Mapping[str, Any]] = run.calls
    else:
        lines = run
    for call in lines:
        tally.add(call)
    return tally.rows(declared)


#: The columns of :func:`endpoint_table` (``provider / model`` only where known).
ENDPOINT_COLUMNS: Final = ("endpoint", "provider / model", "calls", "failed", "fallback in",
                           "fallback out", "prompt tokens", "completion tokens", "cost",
                           "latency mean", "p50", "p90", "p99")


def endpoint_table(rows: Sequence[EndpointRow]) -> dict[str, Any]:
    """*rows* as the report and the live view show them: ``{"cols", "numeric", "rows"}``.

    One list per row, in :data:`ENDPOINT_COLUMNS` order (latencies in seconds,
    None where no call returned); the ``provider / model`` column is left out
    when no row knows its provider or model.
    """
    named = any(r.provider is not None or r.model is not None for r in rows)
    cols = [c for c in ENDPOINT_COLUMNS if named or c != "provider / model"]
    out = []
    for r in rows:
        latency = [r.latency_mean, r.quantile(0.5), r.quantile(0.9), r.quantile(0.99)]
        which = " / ".join(str(v) for v in (r.provider, r.model) if v is not None)
        out.append([r.endpoint, *([which] if named else []), r.calls, r.failed, r.fallback_in,
                    r.fallback_out, r.prompt_tokens, r.completion_tokens, r.cost,
                    *(None if math.isnan(v) else v for v in latency)])
    return {"cols": cols, "numeric": [c not in ("endpoint", "provider / model") for c in cols],
            "rows": out}


# -- model calls ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LLMCall:
    """One recorded model call.

    Attributes:
        agent: The agent that made it (``""`` for a call without a call site).
        n: Its number among the agent's calls (-1 without a call site).
        prompt_tokens, completion_tokens: As the provider counted them.
        text: The completion's text.
        finish_reason: Why generation stopped.
        messages: The request's messages as ``(role, content)`` pairs, or
            None when the request was not read (or not recorded).
    """

    agent: str
    n: int
    prompt_tokens: int
    completion_tokens: int
    text: str
    finish_reason: str
    messages: tuple[tuple[str, str], ...] | None


def llm_calls(recordings: str | Path, *, agents: Sequence[str] | None = None,
              limit: int | None = None, prompts: bool = True,
              sites: Mapping[str, Sequence[tuple[int, str]]] | None = None,
              ) -> Iterator[LLMCall]:
    """The calls recorded in a ``llm_recordings.sqlite``.

    Read through :class:`simulacra.llm.RecordingStore`, opened read-only; a
    file that does not exist yields nothing.

    Args:
        recordings: The store's file.
        agents: Only the calls of these agents, in this order (each agent's
            calls by ``n``); None: every call, by agent and ``n``.
        limit: Yield at most this many calls.
        prompts: Also read each call's request (its messages); reading
            requests costs about three times as much as reading completions.
        sites: Each agent's calls as ``(n, request key)`` pairs, when they are
            known already (a run's ``calls.jsonl``): the store is then not
            listed, which is most of the cost for a few calls of a large run.

    Raises:
        ConfigError: The file is not a recording store this simulacra reads
            (:class:`simulacra.RecordingError` is re-raised as its message).
    """
    from simulacra.errors import RecordingError  # noqa: PLC0415
    from simulacra.llm import RecordingStore  # noqa: PLC0415

    path = Path(recordings)
    if not path.is_file() or (limit is not None and limit <= 0):
        return
    try:
        store = RecordingStore(path, readonly=True)
    except RecordingError as exc:
        raise ConfigError(naming(path, exc)) from None
    try:
        listed: Mapping[str, Sequence[tuple[int, str]]]
        if sites is None:
            found: dict[str, list[tuple[int, str]]] = {}
            for key, site in store:
                name, n = ("", -1) if site is None else (site.agent, site.n)
                found.setdefault(name, []).append((n, key))
            listed = found
        else:
            listed = sites
        order = list(agents) if agents is not None else sorted(listed)
        count = 0
        for name in order:
            for n, key in sorted(set(listed.get(name, ()))):
                call_site = None if n < 0 else _call_site(name, n)
                completion = store.get(key, call_site)
                if completion is None:  # pragma: no cover (it was listed)
                    continue
                messages = None
                if prompts:
                    request = store.request(key)
                    if request is not None:
                        messages = tuple((m.role, m.content) for m in request.messages)
                yield LLMCall(name, n, completion.prompt_tokens, completion.completion_tokens,
                              completion.text, completion.finish_reason, messages)
                count += 1
                if limit is not None and count >= limit:
                    return
    except RecordingError as exc:
        raise ConfigError(naming(path, exc)) from None
    finally:
        store.close()


def _call_site(agent: str, n: int) -> Any:
    from simulacra.llm import CallSite  # noqa: PLC0415

    return CallSite(agent, n)


# -- studies ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StudyData:
    """A study directory of ``simulacra experiment``.

    Attributes:
        path: The directory.
        study: ``study.json`` (model, convention, master seed, configs).
        configs: The configs, by index.
        results: The lines of ``results.jsonl``: ``{"config_index",
            "replication", "kpis"}``, sorted by config and replication.
        scenarios: For a study with a scenarios axis, each config's scenario
            artifact (None for a baseline); empty for a study without one.
            Its configs then hold ``scenario``: the scenario's name, or
            ``"baseline"``.
    """

    path: Path
    study: dict[str, Any]
    configs: list[dict[str, Any]]
    results: list[dict[str, Any]]
    scenarios: list[dict[str, Any] | None] = field(default_factory=list)

    @property
    def kpis(self) -> list[str]:
        """Every KPI name, in the order first seen."""
        names: dict[str, None] = {}
        for record in self.results:
            names.update(dict.fromkeys(record.get("kpis") or {}))
        return list(names)


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}."))
        elif isinstance(value, list | tuple):
            out[name] = json.dumps(value, sort_keys=True)
        else:
            out[name] = value
    return out


def load_study(path: str | Path) -> StudyData:
    """Read a study directory (``study.json`` and ``results.jsonl``).

    Configs are flattened to dotted names, as the results table has them.

    Raises:
        ConfigError: *path* holds no ``study.json``, it is of an unknown
            format, or ``results.jsonl`` is damaged or missing.
    """
    where = Path(path)
    study_file = where / "study.json"
    if not study_file.is_file():
        raise ConfigError(f"{str(where)!r} is not a study directory of simulacra experiment: "
                          "no study.json")
    study = _read_json_object(study_file, "a study")
    if study.get("format") not in STUDY_FORMATS:
        raise ConfigError(f"{study_file}: unknown format version {study.get('format')!r}; "
                          f"this simulacra reads {', '.join(STUDY_FORMATS)}")
    configs = study.get("configs")
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise ConfigError(f"{study_file}: no list of configs")
    results_file = where / "results.jsonl"
    if not results_file.is_file():
        raise ConfigError(f"{str(where)!r}: no results.jsonl (no replication has finished)")
    results = read_jsonl(results_file, what="study's results file")
    for number, record in enumerate(results, 1):
        index = record.get("config_index")
        if not (isinstance(index, int) and 0 <= index < len(configs)
                and isinstance(record.get("replication"), int)
                and isinstance(record.get("kpis"), dict)):
            raise ConfigError(f"{results_file}: line {number} is not a result of this study")
    results.sort(key=lambda r: (r["config_index"], r["replication"]))
    if any(isinstance(c.get("scenario"), dict) for c in configs):
        scenarios: list[dict[str, Any] | None] = [
            c["scenario"] if isinstance(c.get("scenario"), dict) else None for c in configs]
        flat = [{**_flatten({k: v for k, v in c.items() if k != "scenario"}),
                 "scenario": "baseline" if s is None else str(s.get("name", "?"))}
                for c, s in zip(configs, scenarios, strict=True)]
        return StudyData(where, study, flat, results, scenarios)
    return StudyData(where, study, [_flatten(c) for c in configs], results)


@dataclass(frozen=True, slots=True)
class ScenarioEffect:
    """A KPI under a scenario: its mean and interval, and its paired difference from the baseline.

    Replication *r* of a scenario ran on the seeds of replication *r* of its
    baseline (the same config without the scenario), so ``difference`` is the
    mean of the per-replication differences and its interval is theirs (as
    ``Experiment.scenario_effects`` and ``effects.csv`` give it). The
    baseline's own rows have difference 0; NaN where there are too few
    replications.
    """

    config_index: int
    scenario: str
    config: dict[str, Any]
    kpi: str
    n: int
    mean: float
    halfwidth: float
    low: float
    high: float
    difference: float
    diff_halfwidth: float
    diff_low: float
    diff_high: float


def scenario_effects(study: StudyData, confidence: float = 0.95) -> list[ScenarioEffect]:
    """Each scenario's effect on each numeric KPI, per config (empty without scenarios).

    Raises:
        ConfigError: *confidence* is not in (0, 1).
    """
    from simulacra.parallel import mean_interval  # noqa: PLC0415

    if not study.scenarios:
        return []
    baseline_of: dict[str, int] = {}
    rests = []
    for index, config in enumerate(study.configs):
        rest = json.dumps({k: v for k, v in config.items() if k != "scenario"}, sort_keys=True)
        rests.append(rest)
        if study.scenarios[index] is None:
            baseline_of[rest] = index
    by_config: dict[int, dict[int, Mapping[str, Any]]] = {}
    for record in study.results:
        by_config.setdefault(record["config_index"], {})[record["replication"]] = record["kpis"]
    numeric = [k for k in study.kpis if all(
        isinstance(r["kpis"].get(k), int | float) and not isinstance(r["kpis"].get(k), bool)
        for r in study.results if k in r["kpis"])]
    out = []
    for index, config in enumerate(study.configs):
        mine = by_config.get(index, {})
        base = by_config.get(baseline_of.get(rests[index], -1), {})
        for kpi in numeric:
            values = [float(k[kpi]) for _, k in sorted(mine.items()) if kpi in k]
            if not values:
                continue
            paired = [float(k[kpi]) - float(base[r][kpi]) for r, k in sorted(mine.items())
                      if kpi in k and r in base and kpi in base[r]]
            interval = mean_interval(values, confidence)
            diff = mean_interval(paired, confidence) if paired else None
            out.append(ScenarioEffect(
                index, str(config.get("scenario")),
                {k: v for k, v in config.items() if k != "scenario"}, kpi, interval.n,
                interval.mean, interval.halfwidth, interval.low, interval.high,
                diff.mean if diff else math.nan, diff.halfwidth if diff else math.nan,
                diff.low if diff else math.nan, diff.high if diff else math.nan))
    return out


def study_scenarios(study: StudyData) -> list[dict[str, Any]]:
    """Who each scenario of a study is: name, hash, description, interventions, cited passages.

    One dict per scenario, in the order the study runs them; ``citations``
    lists ``(passage, quote)`` pairs when the artifact has them.
    """
    seen: dict[str, dict[str, Any]] = {}
    hashes = study.study.get("scenarios") or {}
    for artifact in study.scenarios:
        if artifact is None:
            continue
        name = str(artifact.get("name", "?"))
        if name in seen:
            continue
        citations = [(str(c.get("passage", "")), str(c.get("quote", "")))
                     for c in artifact.get("citations") or () if isinstance(c, dict)]
        seen[name] = {"name": name, "hash": hashes.get(name) or artifact.get("hash"),
                      "description": str(artifact.get("description", "")),
                      "target": artifact.get("target") or None,
                      "interventions": len(artifact.get("interventions") or ()),
                      "knobs": sorted({str(i.get("knob")) for i in
                                       artifact.get("interventions") or ()
                                       if isinstance(i, dict)}),
                      "citations": citations}
    return list(seen.values())


def study_parameters(study: StudyData) -> tuple[list[str], list[str]]:
    """The config parameters as ``(varying, constant)`` lists, in the order first seen."""
    names = list(dict.fromkeys(name for config in study.configs for name in config))
    varying = [n for n in names
               if len({json.dumps(c.get(n), sort_keys=True) for c in study.configs}) > 1]
    return varying, [n for n in names if n not in varying]


@dataclass(frozen=True, slots=True)
class StudyInterval:
    """A KPI's mean over a config's replications and its confidence interval.

    ``halfwidth``, ``low`` and ``high`` are NaN with fewer than two replications.
    """

    config_index: int
    config: dict[str, Any]
    kpi: str
    n: int
    mean: float
    std: float
    halfwidth: float
    low: float
    high: float


def study_intervals(study: StudyData, confidence: float = 0.95) -> list[StudyInterval]:
    """Mean and Student-t interval of each numeric KPI per config.

    As ``simulacra experiment`` prints them
    (:func:`simulacra.parallel.mean_interval`); bool and str KPIs are left out.

    Raises:
        ConfigError: *confidence* is not in (0, 1).
    """
    from simulacra.parallel import mean_interval  # noqa: PLC0415

    numeric = [k for k in study.kpis if all(
        isinstance(r["kpis"].get(k), int | float) and not isinstance(r["kpis"].get(k), bool)
        for r in study.results if k in r["kpis"])]
    out = []
    for index, config in enumerate(study.configs):
        records = [r for r in study.results if r["config_index"] == index]
        for kpi in numeric:
            values = [float(r["kpis"][kpi]) for r in records if kpi in r["kpis"]]
            if not values:
                continue
            interval = mean_interval(values, confidence)
            out.append(StudyInterval(index, config, kpi, interval.n, interval.mean,
                                     interval.std, interval.halfwidth, interval.low,
                                     interval.high))
    return out


# -- monitors of kernel models ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MonitorSeries:
    """One monitored time series: a value that holds from each ``t`` to the next.

    Attributes:
        kind: ``"queue"``, ``"level"``, ``"utilisation"`` or ``"count"``.
        t: The times of the changes.
        v: The value from each of them on.
        time_weighted_mean: The mean over time, as the monitor computed it.
    """

    kind: str
    t: list[float]
    v: list[float]
    time_weighted_mean: float | None


@dataclass(frozen=True, slots=True)
class MonitorData:
    """A monitor file (``simulacra.monitors.v1``).

    Attributes:
        path: The file.
        series: Time series by name.
        samples: Samples (waiting times, say) by name.
    """

    path: Path
    series: dict[str, MonitorSeries]
    samples: dict[str, list[float]]


def _floats(value: object, where: str) -> list[float]:
    if not isinstance(value, list) or not all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in value):
        raise ConfigError(f"{where}: expected a list of numbers")
    return [float(x) for x in value]


def load_monitors(path: str | Path) -> MonitorData:
    """Read a monitor file, or the ``monitors.json`` of a directory.

    The format: ``{"format": "simulacra.monitors.v1", "series": {NAME:
    {"kind", "t", "v", "time_weighted_mean"}}, "samples": {NAME: [...]}}``.

    Raises:
        ConfigError: No such file, an unknown format version, or a field of
            the wrong shape (named by its path in the file).
    """
    where = Path(path)
    if where.is_dir():
        where = where / _MONITOR_FILE
    if not where.is_file():
        raise ConfigError(f"{str(where)!r} does not exist: no monitor file")
    data = _read_json_object(where, "a monitor file")
    if data.get("format") != MONITORS_FORMAT:
        raise ConfigError(f"{where}: unknown format version {data.get('format')!r}; this "
                          f"simulacra reads {MONITORS_FORMAT}")
    raw_series = data.get("series") or {}
    raw_samples = data.get("samples") or {}
    if not isinstance(raw_series, dict) or not isinstance(raw_samples, dict):
        raise ConfigError(f"{where}: series and samples must be JSON objects")
    series: dict[str, MonitorSeries] = {}
    for name, item in raw_series.items():
        label = f"{where}: series.{name}"
        if not isinstance(item, dict):
            raise ConfigError(f"{label}: expected an object with kind, t, v")
        kind = item.get("kind")
        if kind not in MONITOR_KINDS:
            raise ConfigError(f"{label}.kind: expected one of {', '.join(MONITOR_KINDS)}, "
                              f"got {kind!r}")
        t, v = _floats(item.get("t"), f"{label}.t"), _floats(item.get("v"), f"{label}.v")
        if len(t) != len(v):
            raise ConfigError(f"{label}: t has {len(t)} values, v {len(v)}")
        mean = item.get("time_weighted_mean")
        if mean is not None and not isinstance(mean, int | float):
            raise ConfigError(f"{label}.time_weighted_mean: expected a number, got {mean!r}")
        series[str(name)] = MonitorSeries(str(kind), t, v,
                                          None if mean is None else float(mean))
    samples = {str(name): _floats(values, f"{where}: samples.{name}")
               for name, values in raw_samples.items()}
    return MonitorData(where, series, samples)
