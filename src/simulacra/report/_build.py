"""``build_report``: one self-contained HTML file of a run directory, a study or a monitor file.

The file holds, in this order: the stylesheet, the data as one JSON document
(``<script type="application/json" id="report-data">``), plotly.js (inlined
once, so the file opens offline and asks no other host for anything) and the
page's own script (``_assets/report.js``), which draws the plotly specs of
:mod:`simulacra.report._charts` and runs the log browser, the threads and the
agent pages from the embedded data.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import zlib
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final

from simulacra._util import naming, os_problem, plural
from simulacra.errors import ConfigError

from . import _charts, _data

__all__ = ["DEFAULT_LLM_CALLS", "REPORT_FILE", "build_report", "report_path"]

#: The report's file name in a run or study directory.
REPORT_FILE: Final = "report.html"
#: How many recorded model calls (with their prompts) a report embeds at most.
DEFAULT_LLM_CALLS: Final = 2000
#: What the page parses only when a view needs it (the overview does not).
_LATER: Final = frozenset({"log", "threads", "agents", "llm"})
#: What goes into script elements of its own: the chunks of agents' calls.
_OWN_SCRIPTS: Final = frozenset({"agent_pages"})
#: Agents per chunk of calls (one deflate stream: their prompts share most of their lines).
_AGENT_CHUNK: Final = 64
#: How many conversation threads a report embeds at most (the longest).
_THREADS: Final = 500


def report_path(path: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> Path:
    """Where :func:`build_report` writes: *out*, else ``report.html`` beside or inside *path*.

    A directory gets ``DIR/report.html``; a monitor file ``FILE.html`` next to it.
    """
    if out is not None:
        return Path(out)
    where = Path(path)
    return where / REPORT_FILE if where.is_dir() else where.with_suffix(".html")


def build_report(path: str | os.PathLike[str], out: str | os.PathLike[str] | None = None, *,
                 llm_calls: int = DEFAULT_LLM_CALLS, confidence: float = 0.95) -> Path:
    """Write the HTML report of a run directory, study directory or monitor file.

    Args:
        path: A society run directory of ``simulacra run CONFIG.yaml`` (a
            finished one, or one that stopped: it is shown as far as it
            got), a study directory of ``simulacra experiment``, or a
            ``monitors.json`` (or a directory holding one).
        out: The file to write; default :func:`report_path`.
        llm_calls: Embed at most this many recorded model calls with their
            prompts (those of the agents most events concern, first);
            0 embeds none.
        confidence: Of a study's intervals.

    Returns:
        The file written.

    Raises:
        ConfigError: plotly is missing (``python -m pip install '.[report]'``),
            *path* is none of the above or is damaged (the message names
            what is missing), or *llm_calls* is negative.
    """
    missing = _charts.plotly_missing()
    if missing is not None:
        raise ConfigError(missing)
    if isinstance(llm_calls, bool) or not isinstance(llm_calls, int) or llm_calls < 0:  # type: ignore[redundant-expr,unused-ignore]
        raise ConfigError(f"build_report(llm_calls=...): expected an int >= 0, got {llm_calls!r}")
    path = Path(path)
    kind = _data.source_kind(path)
    if kind == "society":
        data = society_data(_data.load_society_run(path), llm_calls=llm_calls)
    elif kind == "study":
        data = study_data(_data.load_study(path), confidence=confidence)
    else:
        data = monitors_data(_data.load_monitors(path))
    target = report_path(path, out)
    page = render_page(data)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        temporary.write_text(page, encoding="utf-8")
        os.replace(temporary, target)
    except OSError as exc:
        raise ConfigError(f"cannot write the report {str(target)!r}: {os_problem(exc)}") from None
    return target


# -- the page ---------------------------------------------------------------------------


def _asset(name: str) -> str:
    return (resources.files("simulacra.report") / "_assets" / name).read_text(encoding="utf-8")


def _embed_json(data: Any) -> str:
    """JSON safe inside a <script> element: every ``<`` is escaped (it occurs in strings only)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render_page(data: Mapping[str, Any]) -> str:
    """The whole HTML document for the data of :func:`society_data` (or a study, or monitors).

    The log, threads, agents and model calls go into a second JSON document,
    which the page parses when a view first needs it.
    """
    from plotly.offline import get_plotlyjs  # type: ignore[import-untyped]  # noqa: PLC0415

    title = html.escape(str(data.get("title", "simulacra report")))
    first = {k: v for k, v in data.items() if k not in _LATER and k not in _OWN_SCRIPTS}
    later = {k: v for k, v in data.items() if k in _LATER}
    second = (f"<script type='application/json' id='report-log'>{_embed_json(later)}</script>\n"
              if later else "")
    # A chunk of agents' calls per element (base64 of deflated JSON): inflated when needed.
    second += "".join(f"<script type='application/octet-stream' id='agents-{number}'>{chunk}"
                      "</script>\n" for number, chunk in (data.get("agent_pages") or {}).items())
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{title}</title><style>{_asset('report.css')}</style></head>\n"
        f"<body><header><h1>{title}</h1><nav></nav></header><main></main>\n"
        f"<script type='application/json' id='report-data'>{_embed_json(first)}</script>\n"
        f"{second}"
        f"<script>{get_plotlyjs()}</script>\n"
        f"<script>{_asset('report.js')}</script>\n"
        "</body></html>\n"
    )


def _charts_json(figures: Mapping[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    """The specs of *figures*, and the plotly template they share (embedded once)."""
    specs, template = [], None
    for name, figure in figures.items():
        spec = _charts.figure_spec(figure)
        template = spec["layout"].pop("template", template)
        specs.append({"id": name, "spec": spec})
    return specs, template


def _clean(value: Any) -> Any:
    """NaN and infinities as None: JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# -- a society run ------------------------------------------------------------------------


def society_data(run: _data.RunData, *, llm_calls: int = DEFAULT_LLM_CALLS) -> dict[str, Any]:
    """The data a society run's report embeds (see ``_assets/report.js`` for its use)."""
    series = _data.step_series(run)
    stats = _data.call_stats(run) if run.calls else None
    figures = _charts.society_charts(series, stats)
    specs, template = _charts_json(figures)
    table = _data.event_table(run.events, _called_agents(run))
    rows = _data.agent_rows(run, table)
    agent_at = {name: i for i, name in enumerate(table.agents)}
    kind_at = {name: i for i, name in enumerate(table.kinds)}
    threads = _data.conversation_threads(run.events)
    totals = _data.run_totals(run)
    identity = _data.run_identity(run)
    failures = []
    first = (run.summary.get("failures") or {}).get("first") or {}
    for error, count in (totals["failed by kind"] or {}).items():
        seen = first.get(error) or next(
            ({"agent": e.get("agent"), "step": e.get("step"),
              "message": (e.get("data") or {}).get("message", "")}
             for e in run.events if e.get("kind") == "turn_failed"
             and (e.get("data") or {}).get("error") == error), {})
        failures.append([error, count, seen.get("agent"), seen.get("step"),
                         seen.get("message", "")])
    shown_totals = {k: v for k, v in totals.items()
                    if k not in ("world", "failed by kind", "pricing")}
    pricing = totals.get("pricing") or {}
    if pricing:
        shown_totals["pricing"] = (f"{pricing.get('prompt_per_mtok', 0):g} / "
                                   f"{pricing.get('completion_per_mtok', 0):g} per million "
                                   "prompt / completion tokens")
    applied = run.summary.get("scenario")
    if isinstance(applied, dict) and isinstance(applied.get("changes"), int):
        count = applied["changes"]
        shown_totals["scenario"] = (f"{applied.get('applied', 0):,} of {count:,} "
                                    f"{'change' if count == 1 else 'changes'} applied")
    name = identity.get("name") or run.path.name
    steps = len(run.telemetry)
    agents = identity.get("agents")
    title = (f"{name}: {plural(agents, 'agent') if isinstance(agents, int) else agents}, "
             f"{plural(steps, 'window' if series.windowed else 'step')} · simulacra report")
    llm, notes = _llm_data(run, rows, llm_calls)
    call_failures: list[list[Any]] = []
    agent_pages: dict[str, str] = {}
    lines: dict[str, Any] = {}
    calls_file = _data.run_files()["calls"]
    if stats is not None:
        for error, count in stats.failed_by_kind.items():
            seen = stats.first_failure.get(error) or {}
            agents = sum(1 for kinds in stats.failed_by_agent.values() if error in kinds)
            call_failures.append([error, count, agents, seen.get("agent"), seen.get("step"),
                                  seen.get("message", "")])
        agent_pages, lines = _agent_pages(run, agent_at)
        if stats.sessions > 1:
            notes.append(f"{calls_file} was written by {stats.sessions} sessions (the run "
                         "was resumed): the calls a resume served from the recordings are "
                         "not in it twice.")
    else:
        notes.append(f"This run directory has no {calls_file} (it was made by an older "
                     "simulacra): there is no per-call latency, and what each agent saw comes "
                     "from the recorded prompts embedded below.")
    endpoints = _data.endpoint_rows(run) if run.calls else []
    if not run.finished:
        notes.insert(0, "This run did not finish (no summary.json): it was stopped, or is still "
                        "running. The report shows it as far as its files go.")
    return {
        "kind": "society",
        "title": title,
        "identity": [[k, str(v) if k == "seed" else v] for k, v in identity.items()
                     if v is not None],
        "totals": [[k, v] for k, v in shown_totals.items() if v is not None],
        "world": [[k, v] for k, v in totals["world"].items()],
        "failures": failures,
        "notes": notes,
        "windowed": series.windowed,
        "steps": series.step,
        "template": template,
        "charts": specs,
        "colors": _charts.kind_colors(table.kinds),
        "log": table.to_json(),
        "threads": {"total": len(threads),
                    "items": [[t.events, t.depth, t.longest] for t in threads[:_THREADS]]},
        "agents": {"rows": [[agent_at[r.agent], r.events, r.concerning, r.calls, r.prompt_tokens,
                             r.completion_tokens, round(r.cost, 12),
                             {str(kind_at[k]): n for k, n in r.kinds.items()},
                             sum((stats.failed_by_agent.get(r.agent) or {}).values())
                             if stats is not None else 0] for r in rows],
                   "failed": (dict(stats.failed_by_agent)
                              if stats is not None else {})},
        "call_failures": call_failures,
        "pseudo": _pseudo_agents(run, table.agents),
        "call_log": stats is not None,
        "simulated": bool(stats is not None and stats.simulated),
        "llm": llm,
        "agent_chunks": lines,
        "agent_pages": agent_pages,
        # Only for a run whose calls name their endpoint: any other renders as it did.
        **({"endpoints": _data.endpoint_table(endpoints)} if endpoints else {}),
    }


def _agent_pages(run: _data.RunData,
                 agent_at: Mapping[str, int]) -> tuple[dict[str, str], dict[str, Any]]:
    """Every agent's model calls, each with what it saw, packed in deflated chunks of agents.

    Returns ``(chunks, info)``. Chunk *k* holds the agents whose index (in
    the log's agents) divided by ``info["chunk"]`` is *k*: the base64 of
    raw-deflated JSON ``{"m": [message, ...], "a": {agent: [[n, turn, step,
    t, latency, wall, prompt tokens, completion tokens, cost, ok, error,
    message, saw], ...]}}`` where ``saw`` lists the indices in ``m`` of the
    call's request messages (``{"content", "role"}``; null when not
    recorded). The page inflates a chunk (``DecompressionStream``) when one of
    its agents' pages opens: every prompt of a large run costs a fraction of
    its text in the file, and nothing at load.
    """
    messages: dict[str, tuple[bytes, ...]] = {}
    if run.recordings.is_file():
        from simulacra.errors import RecordingError  # noqa: PLC0415
        from simulacra.llm import RecordingStore  # noqa: PLC0415

        try:
            with RecordingStore(run.recordings, readonly=True) as store:
                messages = store.request_messages_json(
                    c["key"] for c in run.calls
                    if c.get("ok", True) and isinstance(c.get("key"), str)
                    and len(c["key"]) == 64)
        except (RecordingError, ConfigError) as exc:
            raise ConfigError(naming(run.recordings, exc)) from None
    by_chunk: dict[int, dict[int, list[tuple[bytes, tuple[bytes, ...] | None]]]] = {}
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
    for call in run.calls:
        agent = agent_at.get(str(call.get("agent", "")))
        if agent is None:
            continue
        ok = bool(call.get("ok", True))
        prompt: tuple[bytes, ...] | None
        if ok:
            prompt = messages.get(str(call.get("key")))
        else:
            text = call.get("prompt")
            prompt = ((dumps({"content": text, "role": "user"}).encode(),)
                      if isinstance(text, str) else None)
        head = dumps([call.get("n"), call.get("turn"), call.get("step"), call.get("t"),
                      _clean(call.get("latency_s")), _clean(call.get("wall_s")),
                      call.get("prompt_tokens", 0), call.get("completion_tokens", 0),
                      call.get("cost", 0.0), 1 if ok else 0, None if ok else call.get("error"),
                      None if ok else call.get("message", "")]).encode()
        by_chunk.setdefault(agent // _AGENT_CHUNK, {}).setdefault(agent, []).append(
            (head, prompt))
    chunks: dict[str, str] = {}
    for number, agents in by_chunk.items():
        table: dict[bytes, int] = {}
        parts: list[bytes] = []
        for agent, items in agents.items():
            rows = []
            for head, seen in items:
                saw = b"null" if seen is None else (
                    "[" + ",".join([str(table.setdefault(m, len(table))) for m in seen]) + "]"
                ).encode()
                rows.append(head[:-1] + b"," + saw + b"]")
            parts.append(b'"%d":[' % agent + b",".join(rows) + b"]")
        document = b'{"m":[' + b",".join(table) + b'],"a":{' + b",".join(parts) + b"}}"
        deflate = zlib.compressobj(1, zlib.DEFLATED, -15, 9)
        packed = deflate.compress(document) + deflate.flush()
        chunks[str(number)] = base64.b64encode(packed).decode("ascii")
    return chunks, {"chunk": _AGENT_CHUNK}


def _pseudo_agents(run: _data.RunData, agents: Sequence[str]) -> dict[str, list[str]]:
    """The names in the log that are no agent of the run: name -> ``[what, scenario]``.

    A scenario's events are made by the world in the scenario's name
    (``scenario``, or one the world picks, such as ``system``): an author all
    of whose events carry a ``scenario`` field, with no model call of its own,
    is ``"scenario"``; the call site of an agent's interviews
    (``interview:NAME``) is ``"interview"``.
    """
    entry = run.manifest.get("scenario")
    if not isinstance(entry, dict):
        return {}
    scenario = str(entry.get("name", ""))
    per_agent = (run.summary.get("llm") or {}).get("per_agent") or {}
    by_scenario: set[str] = set()
    own: set[str] = set()
    for event in run.events:
        data = event.get("data")
        author = str(event.get("agent"))
        if isinstance(data, dict) and "scenario" in data and event.get("kind") != "interview":
            by_scenario.add(author)
        else:
            own.add(author)
    out = {name: ["scenario", scenario] for name in sorted(by_scenario - own)
           if not per_agent.get(name)}
    out.update({name: ["interview", scenario] for name in agents
                if name.startswith("interview:")})
    return out


def _called_agents(run: _data.RunData) -> list[str]:
    """The agents with model calls in ``summary.json`` (some may have made no event)."""
    return list((run.summary.get("llm") or {}).get("per_agent") or {})


def _llm_data(run: _data.RunData, rows: Sequence[_data.AgentRow],
              limit: int) -> tuple[dict[str, Any], list[str]]:
    """The recorded calls to embed: those of the agents most events concern, up to *limit*."""
    notes: list[str] = []
    total = sum(r.calls for r in rows)
    if not run.recordings.is_file():
        return {"calls": {}, "strings": [], "roles": [],
                "note": f"This run directory holds no {run.recordings.name}."}, notes
    ranked = sorted(rows, key=lambda r: (-(r.events + r.concerning), r.agent))
    order = [r.agent for r in ranked]
    strings: list[str] = []
    string_at: dict[str, int] = {}
    roles: list[str] = []
    role_at: dict[str, int] = {}

    def intern(text: str) -> int:
        at = string_at.get(text)
        if at is None:
            at = string_at[text] = len(strings)
            strings.append(text)
        return at

    def role(name: str) -> int:
        at = role_at.get(name)
        if at is None:
            at = role_at[name] = len(roles)
            roles.append(name)
        return at

    calls: dict[str, list[list[Any]]] = {}
    count = 0
    prompts = not run.calls  # with calls.jsonl, each agent's page has every prompt already
    known: dict[str, list[tuple[int, str]]] | None = None
    if run.calls:  # the call log lists each agent's calls: no need to list the store
        known = {}
        for entry in run.calls:
            key, n = entry.get("key"), entry.get("n")
            if entry.get("ok", True) and isinstance(key, str) and isinstance(n, int):
                known.setdefault(str(entry.get("agent", "")), []).append((n, key))
    for call in _data.llm_calls(run.recordings, agents=order if total else None, limit=limit,
                                prompts=prompts, sites=known):
        messages = ([[role(r), intern(c)] for r, c in call.messages]
                    if call.messages is not None else 0)
        calls.setdefault(call.agent, []).append([call.n, call.prompt_tokens,
                                                 call.completion_tokens, intern(call.text),
                                                 messages, call.finish_reason])
        count += 1
    note = ""
    if total and count < total:
        note = (f"The report embeds {count:,} of the run's {total:,} recorded model calls (those "
                f"of the {plural(len(calls), 'agent', grouped=True)} most events concern); "
                "this agent's are not "
                "among them: simulacra report --llm-calls N embeds more.")
        notes.append(f"Model calls: the {plural(count, 'call', grouped=True)} of the "
                     f"{plural(len(calls), 'agent', grouped=True)} most events concern "
                     f"{'is' if count == 1 else 'are'} embedded, of {total:,} (simulacra "
                     "report --llm-calls N embeds more).")
    return {"calls": calls, "strings": strings, "roles": roles, "note": note,
            "embedded": count, "total": total}, notes


# -- a study ------------------------------------------------------------------------------


def study_data(study: _data.StudyData, *, confidence: float = 0.95) -> dict[str, Any]:
    """The data a study's report embeds: identity, charts, the intervals and every replication."""
    intervals = _data.study_intervals(study, confidence)
    specs, template = _charts_json(_charts.study_charts(study, intervals, confidence))
    varying, constant = _data.study_parameters(study)
    parameters = varying + constant
    kpis = study.kpis
    info = study.study
    replications = sorted({r["replication"] for r in study.results})
    identity = {
        "model": info.get("model"),
        "convention": info.get("convention"),
        "master seed": None if info.get("master_seed") is None else str(info["master_seed"]),
        "common random numbers": info.get("common_random_numbers"),
        "configs": len(study.configs),
        "replications": (f"{len(study.results)} finished ({len(replications)} per config at "
                         "most)"),
        "varying": ", ".join(varying) or "none",
        "constant": ", ".join(f"{p}={study.configs[0].get(p)}" for p in constant) or "none",
        "KPIs": ", ".join(kpis),
        "configs digest": info.get("configs_digest"),
    }
    level = f"{confidence:.0%}"
    summary_cols = ["config", *parameters, "KPI", "n", "mean", f"± ({level} CI)", "low", "high"]
    summary_rows = [[i.config_index, *(i.config.get(p) for p in parameters), i.kpi, i.n,
                     _clean(i.mean), _clean(i.halfwidth), _clean(i.low), _clean(i.high)]
                    for i in intervals]
    rep_cols = ["config", "replication", *parameters, *kpis]
    rep_rows = [[r["config_index"], r["replication"],
                 *(study.configs[r["config_index"]].get(p) for p in parameters),
                 *(_clean(r["kpis"].get(k)) for k in kpis)] for r in study.results]
    scenarios: dict[str, Any] = {}
    if study.scenarios:
        effects = _data.scenario_effects(study, confidence)
        effect_specs, effect_template = _charts_json(_charts.scenario_charts(effects, confidence))
        template = template or effect_template
        others = [p for p in varying if p != "scenario"]
        cols = ["scenario", *others, "KPI", "n", "mean", f"± ({level} CI)", "difference",
                f"± ({level} CI) ", "diff low", "diff high"]
        rows_ = [[e.scenario, *(e.config.get(p) for p in others), e.kpi, e.n, _clean(e.mean),
                  _clean(e.halfwidth), _clean(e.difference), _clean(e.diff_halfwidth),
                  _clean(e.diff_low), _clean(e.diff_high)] for e in effects]
        scenarios = {
            "charts": effect_specs,
            "identity": _data.study_scenarios(study),
            "effects": {"cols": cols, "rows": rows_,
                        "numeric": [c not in ("scenario", "KPI", *others) for c in cols]},
        }
        identity["scenarios"] = ", ".join(s["name"] for s in scenarios["identity"])
    return {
        "kind": "study",
        "scenarios": scenarios,
        "title": f"{study.path.name}: study of {info.get('model')} · simulacra report",
        "identity": [[k, v] for k, v in identity.items() if v is not None],
        "notes": [f"Means with {level} Student-t confidence intervals over each config's "
                  "replications (simulacra.parallel.mean_interval); bool and str KPIs are in "
                  "the replications table only."],
        "template": template,
        "charts": specs,
        "summary": {"cols": summary_cols, "rows": summary_rows,
                    "numeric": [c not in ("KPI",) for c in summary_cols]},
        "summary_note": "One row per config and KPI; NaN (blank) with one replication.",
        "replications": {"cols": rep_cols, "rows": rep_rows,
                         "numeric": [True] * len(rep_cols)},
    }


# -- monitors -----------------------------------------------------------------------------


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    at = (len(ordered) - 1) * q
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def monitors_data(monitors: _data.MonitorData) -> dict[str, Any]:
    """The data a monitor file's report embeds: tables of the series and samples, the charts."""
    specs, template = _charts_json(_charts.monitor_charts(monitors))
    series_rows = [[name, s.kind, len(s.t), s.t[0] if s.t else None, s.t[-1] if s.t else None,
                    max(s.v) if s.v else None, _clean(s.time_weighted_mean)]
                   for name, s in monitors.series.items()]
    sample_rows = [[name, len(v), math.fsum(v) / len(v), min(v), _quantile(v, 0.5),
                    _quantile(v, 0.95), max(v)] if v else [name, 0, None, None, None, None, None]
                   for name, v in monitors.samples.items()]
    return {
        "kind": "monitors",
        "title": f"{monitors.path.name}: monitors · simulacra report",
        "identity": [["file", str(monitors.path)], ["format", _data.MONITORS_FORMAT],
                     ["series", len(monitors.series)], ["samples", len(monitors.samples)]],
        "template": template,
        "charts": specs,
        "series_table": {"cols": ["series", "kind", "changes", "from", "to", "max",
                                  "time-weighted mean"], "rows": series_rows},
        "samples_table": {"cols": ["samples", "n", "mean", "min", "median", "95%", "max"],
                          "rows": sample_rows},
    }
