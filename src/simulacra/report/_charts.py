"""Chart builders: plotly figures of a run's series, a study's intervals and a model's monitors.

Each builder takes what :mod:`simulacra.report._data` gives (a
:class:`StepSeries`, study intervals, :class:`MonitorData`) and returns a
``plotly.graph_objects.Figure``; :func:`figure_spec` turns one into the JSON
that ``Plotly.newPlot(div, spec.data, spec.layout)`` draws. The report embeds
those specs; the live view sends them (or the series) to its page.

plotly is the ``report`` extra: it is imported when a builder is called, and
:func:`plotly_missing` says, in one line, how to install it.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from simulacra._util import install_hint, plural
from simulacra.errors import ConfigError

from ._data import (
    CallStats,
    MonitorData,
    ScenarioEffect,
    StepSeries,
    StudyData,
    StudyInterval,
    histogram,
    study_parameters,
)

if TYPE_CHECKING:
    import plotly.graph_objects as go  # type: ignore[import-untyped]

__all__ = [
    "PLOTLY_EXTRA", "actions_chart", "calls_chart", "cost_chart", "failures_chart",
    "figure_spec", "kind_colors", "latency_chart", "latency_histogram_chart",
    "latency_percentiles_chart", "monitor_charts", "plotly_missing",
    "probes_chart", "queue_chart", "scenario_charts", "society_charts", "study_charts",
    "tokens_chart",
]

#: How to install what the charts need.
PLOTLY_EXTRA: Final = install_hint("report")

#: A qualitative palette (plotly's default): one colour per event kind, by sorted name.
_PALETTE: Final = ("#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3",
                   "#ff6692", "#b6e880", "#ff97ff", "#fecb52")
_HEIGHT: Final = 320
_MARGIN: Final = {"l": 60, "r": 20, "t": 48, "b": 48}


def plotly_missing() -> str | None:
    """None when plotly can be imported; else one line saying how to install it."""
    try:
        import plotly.graph_objects  # noqa: F401, PLC0415
    except ImportError:
        return f"simulacra report draws its charts with plotly, which is not installed: " \
               f"{PLOTLY_EXTRA}"
    return None


def _go() -> Any:
    try:
        import plotly.graph_objects as go  # noqa: PLC0415
    except ImportError:
        raise ConfigError(str(plotly_missing())) from None
    return go


def figure_spec(fig: go.Figure) -> dict[str, Any]:
    """The figure as plain JSON: ``{"data": [...], "layout": {...}}`` for ``Plotly.newPlot``."""
    import plotly.io as pio  # type: ignore[import-untyped]  # noqa: PLC0415

    spec: dict[str, Any] = json.loads(pio.to_json(fig, validate=False, pretty=False))
    return {"data": spec.get("data", []), "layout": spec.get("layout", {})}


def kind_colors(kinds: Sequence[str]) -> dict[str, str]:
    """One colour per event kind, stable for a given set of kinds (sorted by name)."""
    return {kind: _PALETTE[i % len(_PALETTE)] for i, kind in enumerate(sorted(kinds))}


def _figure(title: str, x_title: str, y_title: str, **layout: Any) -> go.Figure:
    go = _go()
    fig = go.Figure()
    fig.update_layout(title={"text": title, "x": 0.01, "xanchor": "left"},
                      template="plotly_white", height=_HEIGHT, margin=_MARGIN,
                      legend={"orientation": "h", "y": -0.25, "x": 0},
                      xaxis={"title": {"text": x_title}},
                      yaxis={"title": {"text": y_title}, "rangemode": "tozero"}, **layout)
    return fig


def _count_axis(fig: go.Figure, top: float, axis: str = "yaxis") -> go.Figure:
    """Whole-number ticks on an axis of counts: never 0.5, never "0 0 1 1".

    Plotly picks ticks of 0.5 (or, formatted as integers, repeated labels)
    for a small range; up to 10 the ticks are every 1 or 2, from 0; all zero,
    the range is [0, 1]. Above 10 plotly's own ticks are whole numbers.
    """
    settings: dict[str, Any] = {}
    if top <= 10:
        settings.update(tick0=0, dtick=1 if top <= 6 else 2)
    if top <= 0:
        settings["range"] = [0, 1]
    if settings:
        fig.update_layout({axis: settings})
    return fig


def _unpriced(costs: Sequence[float]) -> bool:
    """Whether every cost is 0 (no pricing, or a free model): a cost axis has nothing to show."""
    return not any(costs)


_UNPRICED: Final = {"range": [0, 1], "tickmode": "array", "tickvals": [0], "ticktext": ["0"]}


def _per(series: StepSeries) -> str:
    return "window" if series.windowed else "step"


def actions_chart(series: StepSeries) -> go.Figure:
    """Events by kind per step (or window): stacked bars, one colour per kind."""
    go = _go()
    fig = _figure(f"Actions by kind per {_per(series)}", series.x_title, "events",
                  barmode="stack")
    colors = kind_colors(list(series.kinds))
    for kind, counts in series.kinds.items():
        fig.add_trace(go.Bar(x=series.x, y=counts, name=kind, marker_color=colors[kind]))
    if not series.kinds:
        fig.add_trace(go.Bar(x=series.x, y=series.events, name="events"))
    return _count_axis(fig, max(series.events, default=0))


def calls_chart(series: StepSeries) -> go.Figure:
    """Model calls per step (bars) and turns taken (a line)."""
    go = _go()
    fig = _figure(f"Model calls per {_per(series)}", series.x_title, "count")
    fig.add_trace(go.Bar(x=series.x, y=series.llm_calls, name="model calls",
                         marker_color="#636efa"))
    fig.add_trace(go.Scatter(x=series.x, y=series.participants, name="turns",
                             mode="lines+markers", line={"color": "#00cc96"}))
    return _count_axis(fig, max([*series.llm_calls, *series.participants], default=0))


def tokens_chart(series: StepSeries) -> go.Figure:
    """Prompt and completion tokens per step (stacked bars), cost per step on a second axis."""
    go = _go()
    fig = _figure(f"Tokens and cost per {_per(series)}", series.x_title, "tokens",
                  barmode="stack",
                  yaxis2={"title": {"text": "cost"}, "overlaying": "y", "side": "right",
                          "rangemode": "tozero", "showgrid": False})
    fig.add_trace(go.Bar(x=series.x, y=series.prompt_tokens, name="prompt tokens",
                         marker_color="#636efa"))
    fig.add_trace(go.Bar(x=series.x, y=series.completion_tokens, name="completion tokens",
                         marker_color="#ab63fa"))
    fig.add_trace(go.Scatter(x=series.x, y=series.cost, name="cost", yaxis="y2",
                             mode="lines+markers", line={"color": "#ef553b"}))
    fig.update_layout(margin={**_MARGIN, "r": 60})
    if _unpriced(series.cost):  # no invented ticks (0.218, 0.436...) for a cost of 0
        fig.update_layout(yaxis2={**_UNPRICED, "title": {"text": "cost (not priced)"}})
    tokens = [a + b for a, b in zip(series.prompt_tokens, series.completion_tokens, strict=True)]
    return _count_axis(fig, max(tokens, default=0))


def cost_chart(series: StepSeries) -> go.Figure:
    """Cost as it accrued: the running total (a line) over the cost of each step (bars)."""
    go = _go()
    fig = _figure("Cost", series.x_title, "cost")
    fig.add_trace(go.Bar(x=series.x, y=series.cost, name=f"per {_per(series)}",
                         marker_color="#fecb52"))
    fig.add_trace(go.Scatter(x=series.x, y=series.cost_cumulative, name="so far",
                             mode="lines+markers", line={"color": "#ef553b"}))
    if _unpriced(series.cost):
        fig.update_layout(yaxis={**_UNPRICED, "title": {"text": "cost (not priced)"}})
        fig.add_annotation(text="every call cost 0: the run is not priced (sim.llm.pricing)",
                           showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
                           font={"size": 14, "color": "#888"})
    return fig


def failures_chart(series: StepSeries) -> go.Figure:
    """Failed turns per step, stacked by error type (all zero when none failed)."""
    go = _go()
    fig = _figure(f"Failed turns by kind per {_per(series)}", series.x_title, "failed turns",
                  barmode="stack")
    palette = ("#ef553b", "#ffa15a", "#ff6692", "#ab63fa", "#19d3f3")
    for i, (kind, counts) in enumerate(series.failed_kinds.items()):
        fig.add_trace(go.Bar(x=series.x, y=counts, name=kind,
                             marker_color=palette[i % len(palette)]))
    if not series.failed_kinds:
        fig.add_trace(go.Bar(x=series.x, y=series.failed, name="failed turns",
                             marker_color="#ef553b"))
        if not any(series.failed):
            fig.add_annotation(text="no failed turns", showarrow=False, xref="paper",
                               yref="paper", x=0.5, y=0.5, font={"size": 14, "color": "#888"})
    stacked = [sum(c) for c in zip(*series.failed_kinds.values(), strict=True)] or series.failed
    return _count_axis(fig, max([*stacked, *series.failed], default=0))


def latency_chart(series: StepSeries) -> go.Figure:
    """Latency per step or window.

    The mean and longest simulated model latency per window (event-driven
    engine), or the wall-clock seconds per step and per model call (round
    engine): per-call latencies are not recorded in a run directory.
    """
    go = _go()
    if series.windowed:
        fig = _figure("Model latency per window (simulated)", series.x_title, "seconds")
        fig.add_trace(go.Scatter(x=series.x, y=series.latency_mean, name="mean",
                                 mode="lines+markers", line={"color": "#636efa"}))
        fig.add_trace(go.Scatter(x=series.x, y=series.latency_max, name="longest",
                                 mode="lines+markers", line={"color": "#ef553b", "dash": "dot"}))
        return fig
    fig = _figure("Wall-clock time per step", series.x_title, "seconds",
                  yaxis2={"title": {"text": "ms per model call"}, "overlaying": "y",
                          "side": "right", "rangemode": "tozero", "showgrid": False})
    per_call = [1000.0 * wall / calls if calls else 0.0
                for wall, calls in zip(series.wall_s, series.llm_calls, strict=True)]
    fig.add_trace(go.Bar(x=series.x, y=series.wall_s, name="step", marker_color="#19d3f3"))
    fig.add_trace(go.Scatter(x=series.x, y=per_call, name="per model call (step / calls)",
                             yaxis="y2", mode="lines+markers", line={"color": "#ef553b"}))
    fig.update_layout(margin={**_MARGIN, "r": 60})
    return fig


def _seconds(value: float) -> str:
    if value >= 1.0:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def latency_histogram_chart(stats: CallStats, bins: int = 40) -> go.Figure:
    """The distribution of every model call's latency (``calls.jsonl``): a histogram.

    Simulated seconds on the event-driven engine, wall-clock seconds on the
    round engine; the title gives the median, 90th and 99th percentiles.
    """
    go = _go()
    what = "simulated" if stats.simulated else "wall clock"
    values = stats.latency
    if values:
        title = (f"Model call latency ({what})<br><sup>{plural(len(values), 'call', grouped=True)}"
                 " · median "
                 f"{_seconds(stats.quantile(0.5))} · p90 {_seconds(stats.quantile(0.9))} · "
                 f"p99 {_seconds(stats.quantile(0.99))}</sup>")
    else:
        title = f"Model call latency ({what}): no call returned"
    fig = _figure(title, "seconds", "calls", bargap=0.05)
    fig.update_layout(margin={**_MARGIN, "t": 64})
    lefts, counts, width, above = histogram(values, bins)
    fig.add_trace(go.Bar(x=[x + width / 2 for x in lefts], y=counts, width=width,
                         name="calls", marker_color="#636efa",
                         customdata=[[x, x + width] for x in lefts],
                         hovertemplate=("%{customdata[0]:.4g} to %{customdata[1]:.4g} s: "
                                        "%{y} calls<extra></extra>")))
    if above:
        fig.add_annotation(text=f"{above:,} calls above {_seconds(lefts[-1] + width)} not drawn "
                                f"(longest {_seconds(values[-1])})",
                           showarrow=False, xref="paper", yref="paper", x=1, y=1.02,
                           xanchor="right", font={"size": 11, "color": "#667085"})
    if not values:
        fig.add_annotation(text="no model call returned", showarrow=False, xref="paper",
                           yref="paper", x=0.5, y=0.5, font={"size": 14, "color": "#888"})
    return _count_axis(fig, max(counts, default=0))


def latency_percentiles_chart(stats: CallStats, series: StepSeries) -> go.Figure:
    """Per step or window: the median, 90th and 99th percentile latency, and failed calls."""
    go = _go()
    what = "simulated" if stats.simulated else "wall clock"
    fig = _figure(f"Model call latency per {_per(series)} ({what}: percentiles)",
                  series.x_title, "seconds",
                  yaxis2={"title": {"text": "failed calls"}, "overlaying": "y", "side": "right",
                          "rangemode": "tozero", "showgrid": False})
    x_of = dict(zip(series.step, series.x, strict=True))
    steps = [s for s in stats.per_step if s in x_of] or list(stats.per_step)
    xs = [x_of.get(s, float(s)) for s in steps]

    def column(i: int) -> list[float | None]:
        return [None if math.isnan(v := stats.per_step[s][i]) else v for s in steps]

    for i, name, color, dash in ((2, "median", "#636efa", "solid"), (3, "p90", "#ab63fa", "dot"),
                                 (4, "p99", "#ef553b", "dash")):
        fig.add_trace(go.Scatter(x=xs, y=column(i), name=name, mode="lines+markers",
                                 line={"color": color, "dash": dash}))
    failed = [stats.per_step[s][1] for s in steps]
    fig.add_trace(go.Bar(x=xs, y=failed, name="failed calls",
                         yaxis="y2", marker_color="#ffa15a", opacity=0.6))
    fig.update_layout(margin={**_MARGIN, "r": 60})
    return _count_axis(fig, max(failed, default=0), "yaxis2")


def queue_chart(series: StepSeries) -> go.Figure:
    """The engine's queue depth and the model calls in flight, per window (event engine)."""
    go = _go()
    fig = _figure("Queue depth and calls in flight per window", series.x_title, "most at once")
    fig.add_trace(go.Scatter(x=series.x, y=series.queue_max, name="queue depth",
                             mode="lines+markers", line={"color": "#636efa", "shape": "hv"}))
    fig.add_trace(go.Scatter(x=series.x, y=series.in_flight_max, name="calls in flight",
                             mode="lines+markers", line={"color": "#ef553b", "shape": "hv"}))
    fig.add_trace(go.Bar(x=series.x, y=series.wakes, name="wake-ups", opacity=0.35,
                         marker_color="#00cc96"))
    return _count_axis(fig, max([*series.queue_max, *series.in_flight_max, *series.wakes],
                                default=0))


def probes_chart(series: StepSeries) -> go.Figure:
    """The world's probes per step (its own numbers: posts, likes...), one line each."""
    go = _go()
    fig = _figure(f"World probes per {_per(series)}", series.x_title, "value")
    for name, values in series.probes.items():
        fig.add_trace(go.Scatter(x=series.x, y=values, name=name, mode="lines+markers"))
    return fig


def _step_ticks(fig: go.Figure, series: StepSeries) -> go.Figure:
    """Ticks at whole steps (or at window starts), never between them."""
    xs = series.x
    if len(xs) >= 2:
        spacing = min(b - a for a, b in itertools.pairwise(xs))
        if spacing > 0:
            fig.update_xaxes(tick0=xs[0], dtick=spacing * max(1, math.ceil(len(xs) / 15)))
    elif xs:
        fig.update_xaxes(tickvals=xs)
    return fig


def society_charts(series: StepSeries, calls: CallStats | None = None) -> dict[str, go.Figure]:
    """Every chart of a society run, by id, in the order to show them.

    The queue chart is there for the event-driven engine only, the probes
    chart when the world reports probes; with *calls* (``calls.jsonl``), the
    latency distribution (``latency_hist``) and its percentiles per step
    (``latency_pct``).
    """
    charts = {
        "actions": actions_chart(series),
        "calls": calls_chart(series),
        "tokens": tokens_chart(series),
        "cost": cost_chart(series),
        "failures": failures_chart(series),
    }
    if calls is not None and calls.per_step:
        charts["latency_hist"] = latency_histogram_chart(calls)
        charts["latency_pct"] = latency_percentiles_chart(calls, series)
    charts["latency"] = latency_chart(series)
    if series.windowed:
        charts["queue"] = queue_chart(series)
    if series.probes:
        charts["probes"] = probes_chart(series)
    return {name: fig if name == "latency_hist" else _step_ticks(fig, series)
            for name, fig in charts.items()}


# -- studies ----------------------------------------------------------------------------


def _label(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _axis_values(values: Sequence[Any]) -> tuple[list[Any], bool]:
    """The x values, and whether they are numbers (else shown as categories)."""
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    return (list(values) if numeric else [_label(v) for v in values]), numeric


def study_charts(study: StudyData, intervals: Sequence[StudyInterval],
                 confidence: float = 0.95) -> dict[str, go.Figure]:
    """Each KPI against each varying config parameter, mean with its confidence interval.

    One figure per (KPI, parameter), id ``"<kpi> ~ <parameter>"``; one line
    per combination of the other varying parameters. A study with no
    varying parameter gets one figure per KPI over the config index.
    """
    go = _go()
    varying, _ = study_parameters(study)
    by_kpi: dict[str, list[StudyInterval]] = {}
    for item in intervals:
        by_kpi.setdefault(item.kpi, []).append(item)
    level = f"{confidence:.0%}"
    charts: dict[str, Any] = {}
    for kpi, items in by_kpi.items():
        axes = varying or ["config"]
        for parameter in axes:
            others = [p for p in varying if p != parameter]
            groups: dict[str, list[StudyInterval]] = {}
            for item in items:
                key = ", ".join(f"{p}={_label(item.config.get(p))}" for p in others)
                groups.setdefault(key, []).append(item)
            fig = _figure(f"{kpi} against {parameter} (mean, {level} CI)", parameter, kpi)
            fig.update_layout(yaxis={"rangemode": "normal"})
            for key, group in groups.items():
                def x_of(item: StudyInterval, parameter: str = parameter) -> Any:
                    return (item.config_index if parameter == "config"
                            else item.config.get(parameter))
                group = sorted(group, key=lambda i: (str(type(x_of(i))), x_of(i)))
                xs, numeric = _axis_values([x_of(i) for i in group])
                errors = [0.0 if math.isnan(i.halfwidth) else i.halfwidth for i in group]
                fig.add_trace(go.Scatter(
                    x=xs, y=[i.mean for i in group], name=key or kpi, mode="lines+markers",
                    error_y={"type": "data", "array": errors, "visible": True},
                    customdata=[[i.n, i.low, i.high] for i in group],
                    hovertemplate=("%{x}: %{y:.4g} (n=%{customdata[0]}, CI %{customdata[1]:.4g}"
                                   " to %{customdata[2]:.4g})<extra>%{fullData.name}</extra>")))
                if not numeric:
                    fig.update_layout(xaxis={"type": "category"})
                elif len(set(xs)) <= 12:  # a grid's few values: ticks at them, not between
                    fig.update_layout(xaxis={"tickmode": "array",
                                             "tickvals": sorted(set(xs))})
            charts[f"{kpi} ~ {parameter}"] = fig
    return charts


def scenario_charts(effects: Sequence[ScenarioEffect],
                    confidence: float = 0.95) -> dict[str, go.Figure]:
    """Per KPI: each scenario's difference from its baseline, with its confidence interval.

    One figure per KPI, id ``"effect: <kpi>"``: a point per scenario (error
    bars: the paired interval), one trace per combination of the other
    config parameters, and a line at zero (the baseline).
    """
    go = _go()
    level = f"{confidence:.0%}"
    by_kpi: dict[str, list[ScenarioEffect]] = {}
    for effect in effects:
        if effect.scenario != "baseline":
            by_kpi.setdefault(effect.kpi, []).append(effect)
    varying = {name for e in effects for name in e.config
               if len({json.dumps(x.config.get(name), sort_keys=True) for x in effects}) > 1}
    charts: dict[str, Any] = {}
    for kpi, items in by_kpi.items():
        fig = _figure(f"{kpi}: difference from the baseline ({level} CI, paired)", "scenario",
                      f"Δ {kpi}")
        fig.update_layout(yaxis={"rangemode": "normal", "zeroline": True,
                                 "zerolinecolor": "#98a2b3", "zerolinewidth": 2},
                          xaxis={"type": "category"}, scattermode="group")
        groups: dict[str, list[ScenarioEffect]] = {}
        for item in items:
            key = ", ".join(f"{p}={_label(item.config.get(p))}" for p in sorted(varying))
            groups.setdefault(key, []).append(item)
        for key, group in groups.items():
            fig.add_trace(go.Scatter(
                x=[i.scenario for i in group], y=[_finite(i.difference) for i in group],
                name=key or kpi, mode="markers",
                marker={"size": 10, "symbol": "diamond"},
                error_y={"type": "data", "visible": True,
                         "array": [_finite(i.diff_halfwidth) or 0.0 for i in group]},
                customdata=[[i.mean, _finite(i.diff_low), _finite(i.diff_high), i.n]
                            for i in group],
                hovertemplate=("%{x}: Δ %{y:.4g} (CI %{customdata[1]:.4g} to "
                               "%{customdata[2]:.4g}; mean %{customdata[0]:.4g}, "
                               "n=%{customdata[3]})<extra>%{fullData.name}</extra>")))
        charts[f"effect: {kpi}"] = fig
    return charts


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value


# -- monitors ---------------------------------------------------------------------------


def monitor_charts(data: MonitorData, bins: int = 40) -> dict[str, go.Figure]:
    """A step line per monitored series (its time-weighted mean dashed), a histogram per sample.

    Ids are ``"series:<name>"`` and ``"samples:<name>"``.
    """
    go = _go()
    titles: Mapping[str, str] = {"queue": "queue length", "level": "level",
                                 "utilisation": "utilisation", "count": "count"}
    charts: dict[str, Any] = {}
    for name, series in data.series.items():
        what = titles.get(series.kind, series.kind)
        mean = series.time_weighted_mean
        shown = f"; time-weighted mean {mean:.4g}" if mean is not None else ""
        fig = _figure(f"{name}: {what} over time{shown}", "time", what)
        fig.add_trace(go.Scatter(x=series.t, y=series.v, name=what, mode="lines",
                                 line={"shape": "hv", "color": "#636efa"}))
        if mean is not None and series.t:
            fig.add_trace(go.Scatter(x=[series.t[0], series.t[-1]], y=[mean, mean],
                                     name="time-weighted mean", mode="lines",
                                     line={"dash": "dash", "color": "#ef553b"}))
        if series.kind == "utilisation":
            top = max([1.0, *series.v]) * 1.05
            fig.update_layout(yaxis={"range": [0, top], "rangemode": "normal"})
        charts[f"series:{name}"] = fig
    for name, values in data.samples.items():
        if values:
            mean = math.fsum(values) / len(values)
            title = f"{name}: histogram of {len(values):,} samples (mean {mean:.4g})"
        else:  # the mean of no samples is no number
            title = f"{name}: histogram (no samples)"
        fig = _figure(title, name, "count")
        low, high = (min(values), max(values)) if values else (0.0, 0.0)
        # Bins of our own (plotly draws them as given), so that the count axis is known.
        size = (high - low) / bins if high > low else 1.0
        counts = [0] * bins
        for value in values:
            counts[min(int((value - low) / size), bins - 1)] += 1
        fig.add_trace(go.Histogram(x=values, name=name, marker_color="#00cc96",
                                   xbins={"start": low, "end": low + size * bins,
                                          "size": size}))
        if not values:
            fig.add_annotation(text="no samples", showarrow=False, xref="paper", yref="paper",
                               x=0.5, y=0.5, font={"size": 14, "color": "#888"})
        charts[f"samples:{name}"] = _count_axis(fig, max(counts, default=0))
    return charts
