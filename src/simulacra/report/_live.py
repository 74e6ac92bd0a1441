"""The live view: a page on 127.0.0.1 that shows a society run as it goes, and controls it.

``simulacra run CONFIG --view`` serves it while the run goes; ``simulacra view
RUN_DIR`` serves it for a run directory already written (a finished run is
replayed in the page, with a position slider). The page shows the report's
charts (:func:`~simulacra.report._charts.society_charts`, drawn from
:func:`~simulacra.report._data.step_series` of the telemetry so far), the
newest events and the cost so far, and has four controls: play, pause, step
(one step, or one window of the event-driven engine) and stop (a checkpoint is
written and the run ends resumable). The controls act through a
:class:`simulacra.RunControl`, at the engine's safe points, so they change
how long a run takes and never what it does.

How it is built:

- a real ASGI stack: a starlette app served by uvicorn, the page fed by
  server-sent events (sse-starlette), plotly.js served from the installed
  plotly package (no other host is ever asked for anything);
- the page reads what the run writes: the run directory's
  ``telemetry.jsonl``, ``action_events.jsonl`` and ``calls.jsonl`` (a line per
  model call: the latency histogram and its percentiles per step, and, for a
  run with ``sim.llm.endpoints``, the table of calls by endpoint), flushed as
  written, are followed as they grow: each look reads only the bytes added
  since the last one. Nothing is added to the run's own loop;
- during a run the server lives in a child process (:class:`LiveView` with
  ``process=True``): reading the logs and building charts then costs the run
  no time under its GIL. The child gets the listening socket, the run
  directory and the token; a pipe carries the control's state to it and the
  page's commands back;
- every route needs the random token of the printed URL (403 otherwise), and
  the server listens on 127.0.0.1 unless another host is asked for with
  ``allow_remote``.

starlette, uvicorn, sse-starlette and plotly are the ``view`` extra:
:func:`view_missing` says in one line what is missing and how to install it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import importlib.util
import json
import math
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from simulacra._util import install_hint
from simulacra.errors import ConfigError

from ._data import (
    CallStats,
    EndpointTally,
    _check_manifest_scheme,
    _percentile,
    _run_manifest,
    _scenario_label,
    endpoint_table,
    event_text,
    run_files,
    step_series,
)

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from simulacra.societies import RunControl

__all__ = ["LOCAL_HOSTS", "VIEW_EXTRA", "LiveView", "check_view_dir", "view_missing"]

#: How to install what the live view needs.
VIEW_EXTRA: Final = install_hint("view")
#: The modules the live view imports, and the packages that hold them.
_VIEW_MODULES: Final = (("starlette", "starlette"), ("uvicorn", "uvicorn"),
                        ("sse_starlette", "sse-starlette"), ("plotly", "plotly"))
#: Hosts that only this machine can reach: served without ``allow_remote``.
LOCAL_HOSTS: Final = ("127.0.0.1", "localhost", "::1")
#: The newest events the page lists.
NEWEST: Final = 50
#: A page's events are cut to this many characters of text.
_TEXT_LIMIT: Final = 280
#: Seconds between two looks at the logs (and two messages to a page).
_TICK: Final = 0.5
#: Charts are rebuilt at most this often while a run plays...
_CHART_INTERVAL: Final = 2.0
#: ...and at most this share of the time (building them and drawing them costs CPU
#: that a run on a small machine needs; they are rebuilt at once when the run waits).
_CHART_SHARE: Final = 0.05
#: The actions the page may ask for.
ACTIONS: Final = ("play", "pause", "step", "stop")
#: The folder that holds the ``simulacra`` package (report/_live.py -> report ->
#: simulacra -> it): the child's path, so it imports this very simulacra.
_PACKAGE_ROOT: Final = Path(__file__).resolve().parents[2]


def view_missing() -> str | None:
    """None when the live view can run here; else one line naming what to install."""
    missing = [package for module, package in _VIEW_MODULES
               if importlib.util.find_spec(module) is None]
    if not missing:
        return None
    verb = "is" if len(missing) == 1 else "are"
    return (f"the live view needs {', '.join(missing)}, which {verb} not installed: "
            f"{VIEW_EXTRA}")


def check_view_dir(path: str | os.PathLike[str]) -> Path:
    """Check that *path* is a society run directory the view can show; return it.

    Raises:
        ConfigError: It does not exist, is not a run directory (the message
            names the missing file), or its manifest is of an unknown version.
    """
    where, manifest_file, manifest = _run_manifest(path)
    _check_manifest_scheme(manifest_file,
                           manifest.get("scheme") if isinstance(manifest, dict) else None)
    return where


# -- following the logs -----------------------------------------------------------------


class _CallTally:
    """``calls.jsonl`` so far, per step: what :class:`CallStats` of any first steps is made of.

    Each call is counted once, as its line is read; :meth:`stats` gives the
    stats of the steps up to one (the slider of a replay, or the telemetry
    so far), sorting only the steps that changed since it last did.
    """

    def __init__(self) -> None:
        #: step -> [calls, failed, latencies, wall seconds, failed by kind]
        self.steps: dict[int, list[Any]] = {}
        self.lines = 0
        #: step -> its calls by endpoint (no rows for a run whose lines name none)
        self.endpoints: dict[int, EndpointTally] = {}
        #: Whether a line named an endpoint (``endpoint`` or ``fallback_from``).
        self.named = False
        #: step -> (calls counted, (calls, failed, p50, p90, p99, max), sorted latencies)
        self._done: dict[int, tuple[int, tuple[int, int, float, float, float, float],
                                    list[float], list[float]]] = {}

    def add(self, call: dict[str, Any]) -> None:
        step = int(call.get("step", 0))
        entry = self.steps.get(step)
        if entry is None:
            entry = self.steps[step] = [0, 0, [], [], {}]
        entry[0] += 1
        self.lines += 1
        tally = self.endpoints.get(step)
        if tally is None:
            tally = self.endpoints[step] = EndpointTally()
        tally.add(call)
        if not self.named and ("endpoint" in call or "fallback_from" in call):
            self.named = True
        if call.get("ok", True):
            value, seconds = call.get("latency_s"), call.get("wall_s")
            if isinstance(value, int | float):
                entry[2].append(float(value))
            if isinstance(seconds, int | float):
                entry[3].append(float(seconds))
            return
        entry[1] += 1
        error = str(call.get("error", "?"))
        entry[4][error] = entry[4].get(error, 0) + 1

    def stats(self, last: int, *, simulated: bool) -> CallStats | None:
        """The stats of the calls of steps ``<= last``; None before any call."""
        per_step: dict[int, tuple[int, int, float, float, float, float]] = {}
        latency: list[float] = []
        wall: list[float] = []
        by_kind: dict[str, int] = {}
        for step in sorted(s for s in self.steps if s <= last):
            n, failed, values, seconds, kinds = self.steps[step]
            done = self._done.get(step)
            if done is None or done[0] != n:
                ordered = sorted(values)
                row = ((n, failed, _percentile(ordered, 0.5), _percentile(ordered, 0.9),
                        _percentile(ordered, 0.99), ordered[-1]) if ordered else
                       (n, failed, math.nan, math.nan, math.nan, math.nan))
                done = self._done[step] = (n, row, ordered, sorted(seconds))
            per_step[step] = done[1]
            latency.extend(done[2])
            wall.extend(done[3])
            for kind, count in kinds.items():
                by_kind[kind] = by_kind.get(kind, 0) + count
        if not per_step:
            return None
        latency.sort()  # sorted runs, merged
        wall.sort()
        return CallStats(simulated, latency, wall, per_step, dict(sorted(by_kind.items())),
                         {}, {}, 1)

    def endpoint_table(self, last: int) -> dict[str, Any] | None:
        """The calls of steps ``<= last`` by endpoint (:func:`endpoint_table`); None without."""
        if not self.named:
            return None
        tally = EndpointTally()
        for step, counted in self.endpoints.items():
            if step <= last:
                tally.update(counted)
        rows = tally.rows()
        return endpoint_table(rows) if rows else None


class _RunFiles:
    """What a run directory's logs hold so far, read as they grow.

    ``telemetry.jsonl``, ``action_events.jsonl`` and ``calls.jsonl``: only
    whole lines are read, each look from where the last one stopped (a line
    being written is left for the next look). A log that became shorter (a
    resumed run cut it back to its checkpoint) is read again from its start.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.names = run_files()
        self.telemetry: list[dict[str, Any]] = []
        #: ``[i, step, time, agent, kind, text]`` per event, in log order.
        self.rows: list[list[Any]] = []
        #: The failed turns' events (for the failures chart, by error type).
        self.failed: list[dict[str, Any]] = []
        #: The model calls of ``calls.jsonl`` so far, per step.
        self.calls = _CallTally()
        self._at = {"telemetry": 0, "events": 0, "calls": 0}

    def _reset(self) -> None:
        self.telemetry, self.rows, self.failed = [], [], []
        self.calls = _CallTally()
        self._at = {"telemetry": 0, "events": 0, "calls": 0}

    def _new_lines(self, role: str, name: str) -> list[bytes] | None:
        """The whole lines added since the last look; None when the log was cut back."""
        file = self.path / name
        try:
            size = file.stat().st_size
        except FileNotFoundError:
            return []
        at = self._at[role]
        if size < at:
            return None
        if size == at:
            return []
        with file.open("rb") as stream:
            stream.seek(at)
            data = stream.read(size - at)
        end = data.rfind(b"\n") + 1
        self._at[role] = at + end
        return data[:end].splitlines()

    def poll(self) -> bool:
        """Read what was added; whether anything was."""
        telemetry = self._new_lines("telemetry", self.names["telemetry"])
        events = self._new_lines("events", self.names["events"])
        calls = self._new_lines("calls", self.names["calls"])
        if telemetry is None or events is None or calls is None:
            self._reset()
            return self.poll() or True
        for line in telemetry:
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                if isinstance(item, dict):
                    self.telemetry.append(item)
        for line in events:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            if event.get("kind") == "turn_failed":
                self.failed.append(event)
            self.rows.append([event.get("i", len(self.rows)), event.get("step", 0),
                              event.get("time", 0.0), str(event.get("agent")),
                              str(event.get("kind")), event_text(event)[:_TEXT_LIMIT]])
        for line in calls:
            with contextlib.suppress(ValueError):
                call = json.loads(line)
                if isinstance(call, dict):
                    self.calls.add(call)
        return bool(telemetry or events or calls)


# -- what controls the run --------------------------------------------------------------


class _Link(Protocol):
    """Where the page's controls go, and what the run's control says."""

    def status(self) -> dict[str, Any]:
        """``{"controls": bool, "started": bool, "state": str, "step": int | None, ...}``."""
        ...

    def command(self, action: str) -> None:
        """Play, pause, step or stop."""
        ...


class _NoLink:
    """A run directory on its own (``simulacra view``): no run to control."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def status(self) -> dict[str, Any]:
        finished = (self._path / run_files()["digest"]).is_file()
        return {"controls": False, "started": True, "step": None,
                "state": "finished" if finished else "unfinished"}

    def command(self, action: str) -> None:
        raise ConfigError("this view shows a run directory: there is no run to control")


def _control_status(control: RunControl) -> dict[str, Any]:
    # "ended" is the view's last word, said by LiveView.close with how the run ended.
    state = "ending" if control.state == "ended" else control.state
    return {"controls": True, "started": control.step is not None, "state": state,
            "step": control.step, "waiting": control.waiting}


def _apply(control: RunControl, action: str) -> None:
    if action == "play":
        control.play()
    elif action == "pause":
        control.pause()
    elif action == "step":
        control.step_once()
    elif action == "stop":
        control.request_stop("stop from the live view")


class _ControlLink:
    """A control in this process (``LiveView(process=False)``)."""

    def __init__(self, control: RunControl) -> None:
        self.control = control
        self.final: dict[str, Any] | None = None

    def status(self) -> dict[str, Any]:
        status = _control_status(self.control)
        if self.final is not None:
            status.update(self.final)
        return status

    def command(self, action: str) -> None:
        _apply(self.control, action)


class _PipeLink:
    """The child's side: the state comes on stdin (a JSON line per change), commands go out.

    Commands go out on stdout, a JSON line each.
    """

    def __init__(self) -> None:
        self._status: dict[str, Any] = {"controls": True, "started": False,
                                        "state": "starting", "step": None}
        self._lock = threading.Lock()
        self.closed = threading.Event()
        threading.Thread(target=self._read, name="simulacra-view-link", daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            with contextlib.suppress(ValueError):
                status = json.loads(line)
                if isinstance(status, dict):
                    with self._lock:
                        self._status = {**self._status, **status}
        with self._lock:  # the run's process closed the pipe: it has ended
            self._status = {**self._status, "state": "ended", "started": True}
        self.closed.set()

    def status(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._status)

    def command(self, action: str) -> None:
        sys.stdout.write(json.dumps({"command": action}) + "\n")
        sys.stdout.flush()


# -- what the page is sent --------------------------------------------------------------


class _Hub:
    """The logs and the control, made into what the page shows; shared by every page."""

    def __init__(self, path: Path, link: _Link, *, name: str, steps: int | None,
                 replay: bool) -> None:
        self.path = path
        self.link = link
        self.name = name
        self.steps = steps
        self.replay = replay
        self.files = _RunFiles(path)
        self.version = 0
        self.charts_version = 0
        self._charts: dict[str, Any] = {}
        #: The calls by endpoint, as the charts were last built (None: no line names one).
        self._endpoints: dict[str, Any] | None = None
        self._charts_lines: tuple[int, int] = (-1, -1)
        self._charts_at = 0.0
        self._charts_cost = 0.0
        self._status: dict[str, Any] = {}
        self._looked = 0.0
        self._step_charts: dict[int, tuple[dict[str, Any], dict[str, Any] | None]] = {}
        self._boundaries: tuple[int, list[int]] = (-1, [])
        #: The run's scenario, ``name (short hash)``, once its manifest is read (None: none).
        self.scenario: str | None = None
        self._manifest_read = False
        #: Pages following the stream now.
        self.streams = 0
        self.closing = False

    @property
    def ended(self) -> bool:
        """Whether the run is over (its last state was sent)."""
        return self._status.get("state") in ("ended", "finished")

    def refresh(self, *, force: bool = False) -> None:
        """Look at the control and the logs (at most every ``_TICK``); count a change."""
        now = time.monotonic()
        if not force and now - self._looked < _TICK * 0.8:
            return
        self._looked = now
        status = self.link.status()
        changed = status != self._status
        self._status = status
        if status.get("started"):
            changed = self.files.poll() or changed
            if not self._manifest_read:
                changed = self._read_manifest() or changed
        lines = len(self.files.telemetry)
        settled = status.get("state") != "playing" or bool(status.get("waiting"))
        interval = max(_CHART_INTERVAL, self._charts_cost / _CHART_SHARE)
        # New telemetry, or calls of steps it has (a call can outlive its window).
        key = (lines, self.files.calls.lines)
        if key != self._charts_lines and (
                settled or force or now - self._charts_at >= interval):
            self._charts, self._endpoints = self._build_charts(lines)
            self._charts_lines = key
            self._charts_at = time.monotonic()
            self._charts_cost = self._charts_at - now
            self.charts_version += 1
            changed = True
        if changed:
            self.version += 1

    def _read_manifest(self) -> bool:
        """Read the scenario of the run's manifest, once it is there; whether one was found."""
        try:
            manifest = json.loads((self.path / run_files()["manifest"]).read_text(
                encoding="utf-8"))
        except (OSError, ValueError):
            return False  # not written yet (or being written): the next look
        self._manifest_read = True
        if isinstance(manifest, dict):
            self.scenario = _scenario_label(manifest.get("scenario"))
        return self.scenario is not None

    def _build_charts(self, lines: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The charts of the first *lines* telemetry lines, and their steps' calls by endpoint."""
        from ._charts import figure_spec, society_charts  # noqa: PLC0415  (plotly, lazily)

        telemetry = self.files.telemetry[:lines]
        last = telemetry[-1].get("step", lines - 1) if telemetry else -1
        failed = [e for e in self.files.failed if int(e.get("step", 0)) <= int(last)]
        series = step_series(telemetry, failed)
        # The calls of the steps the telemetry has (a replay's slider: up to its step).
        calls = self.files.calls.stats(int(last), simulated=series.windowed)
        charts = {name: figure_spec(fig) for name, fig in society_charts(series, calls).items()}
        return charts, self.files.calls.endpoint_table(int(last))

    def _totals(self, telemetry: list[dict[str, Any]], events: int) -> dict[str, Any]:
        calls = sum(int(line.get("llm_calls", 0)) for line in telemetry)
        tokens = sum(int(line.get("prompt_tokens", 0)) + int(line.get("completion_tokens", 0))
                     for line in telemetry)
        cost = sum(float(line.get("cost", 0.0)) for line in telemetry)
        failed = sum(int(line.get("failed", 0)) for line in telemetry)
        return {"steps": len(telemetry), "events": events, "calls": calls, "tokens": tokens,
                "cost": round(cost, 9), "failed": failed}

    def snapshot(self, *, charts: bool) -> dict[str, Any]:
        """The page's state now: counters, the newest events, and (if asked) the charts."""
        rows = self.files.rows
        status = self._status
        out: dict[str, Any] = {
            "mode": "replay" if self.replay else "live", "name": self.name,
            "state": status.get("state", "starting"), "controls": bool(status.get("controls")),
            "paused_at": status.get("step") if status.get("waiting") else None,
            "steps_total": self.steps, "message": status.get("message"),
            "scenario": self.scenario,
            "totals": self._totals(self.files.telemetry, len(rows)),
            "events": rows[-NEWEST:][::-1], "position": len(rows),
            "charts_version": self.charts_version,
        }
        if charts:
            out["charts"] = self._charts
        if self._endpoints is not None:  # a run with endpoints: its calls by endpoint
            out["endpoints"] = self._endpoints
        return out

    def at(self, position: int) -> dict[str, Any]:
        """The page's state after the first *position* events (the slider of a replay)."""
        rows = self.files.rows
        position = max(0, min(position, len(rows)))
        step = int(rows[position - 1][1]) if position else -1
        telemetry = [line for line in self.files.telemetry
                     if int(line.get("step", 0)) <= step]
        if step not in self._step_charts:
            if len(self._step_charts) > 64:
                self._step_charts.clear()
            self._step_charts[step] = self._build_charts(len(telemetry))
        charts, endpoints = self._step_charts[step]
        return {"mode": "replay", "name": self.name, "state": self._status.get("state"),
                "controls": False, "steps_total": self.steps, "scenario": self.scenario,
                "totals": self._totals(telemetry, position),
                "events": rows[max(0, position - NEWEST):position][::-1],
                "position": position, "events_total": len(rows), "step": step,
                "boundaries": self.boundaries(), "charts": charts,
                "charts_version": -1 - step,
                **({"endpoints": endpoints} if endpoints is not None else {})}

    def boundaries(self) -> list[int]:
        """The slider positions at the end of each step (events before the next step)."""
        rows = self.files.rows
        if self._boundaries[0] != len(rows):
            ends = [number for number in range(1, len(rows) + 1)
                    if number == len(rows) or rows[number][1] != rows[number - 1][1]]
            self._boundaries = (len(rows), ends)
        return self._boundaries[1]


# -- the web app ------------------------------------------------------------------------


def _app(hub: _Hub, token: str) -> _TokenGate:
    from sse_starlette.sse import EventSourceResponse  # noqa: PLC0415
    from starlette.applications import Starlette  # noqa: PLC0415
    from starlette.responses import (  # noqa: PLC0415
        FileResponse,
        HTMLResponse,
        JSONResponse,
        PlainTextResponse,
    )
    from starlette.routing import Route  # noqa: PLC0415

    async def page(request: Request) -> Response:
        return HTMLResponse(_page().replace("__TOKEN__", token).replace(
            "__TITLE__", _html_escape(hub.name)))

    async def plotly_js(request: Request) -> Response:
        return FileResponse(_plotly_js(), media_type="text/javascript",
                            headers={"Cache-Control": "private, max-age=3600"})

    async def stream(request: Request) -> Response:
        async def messages() -> AsyncIterator[dict[str, str]]:
            hub.streams += 1
            try:
                async for message in follow():
                    yield message
            finally:
                hub.streams -= 1

        async def follow() -> AsyncIterator[dict[str, str]]:
            seen, charts_seen = -1, -1
            while not hub.closing:
                hub.refresh()
                if hub.version != seen:
                    seen = hub.version
                    send_charts = hub.charts_version != charts_seen
                    charts_seen = hub.charts_version
                    yield {"event": "snapshot",
                           "data": json.dumps(hub.snapshot(charts=send_charts))}
                if hub.ended and not hub.replay:
                    hub.refresh(force=True)
                    yield {"event": "snapshot", "data": json.dumps(hub.snapshot(charts=True))}
                    yield {"event": "end", "data": "{}"}
                    return
                if await request.is_disconnected():
                    return
                await asyncio.sleep(_TICK)
            yield {"event": "end", "data": "{}"}

        return EventSourceResponse(messages(), ping=10)

    async def snapshot(request: Request) -> Response:
        hub.refresh(force=True)
        raw = request.query_params.get("pos")
        if raw is None:
            return JSONResponse(hub.snapshot(charts=True))
        try:
            position = int(raw)
        except ValueError:
            return PlainTextResponse(f"pos must be an integer, got {raw!r}", status_code=400)
        return JSONResponse(hub.at(position))

    async def control(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in ACTIONS:
            return PlainTextResponse(f"unknown action {action!r} (one of: "
                                     f"{', '.join(ACTIONS)})", status_code=404)
        try:
            hub.link.command(action)
        except ConfigError as exc:
            return PlainTextResponse(str(exc), status_code=409)
        return JSONResponse({"ok": True, "action": action})

    app = Starlette(routes=[
        Route("/", page),
        Route("/plotly.min.js", plotly_js),
        Route("/stream", stream),
        Route("/api/snapshot", snapshot),
        Route("/api/control/{action}", control, methods=["POST"]),
    ])
    return _TokenGate(app, token)


class _TokenGate:
    """ASGI middleware: any request without the view's token gets 403, whatever its route."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            from urllib.parse import parse_qs  # noqa: PLC0415

            given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])
            if not secrets.compare_digest(given[-1].encode(), self.token):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                body = b"403 forbidden: this page needs the token of the URL the view printed\n"
                await send({"type": "http.response.start", "status": 403,
                            "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def _html_escape(text: str) -> str:
    import html  # noqa: PLC0415

    return html.escape(text, quote=True)


def _plotly_js() -> Path:
    spec = importlib.util.find_spec("plotly")
    if spec is None or spec.origin is None:
        raise ConfigError(f"plotly is not installed: {VIEW_EXTRA}")
    return Path(spec.origin).parent / "package_data" / "plotly.min.js"


# -- the server -------------------------------------------------------------------------


def _check_host(host: str, allow_remote: bool) -> None:
    if host not in LOCAL_HOSTS and not allow_remote:
        raise ConfigError(
            f"--host {host}: the view (with its stop button) would be reachable from other "
            "machines; it serves 127.0.0.1 only unless --allow-remote is given too")


def bind(host: str = "127.0.0.1", port: int = 0) -> tuple[socket.socket, str | None]:
    """A listening socket on *host*; port 0 picks a free one.

    Returns the socket and, when *port* was taken and another was picked,
    one line saying so.

    Raises:
        ConfigError: *host* cannot be listened on.
    """
    address = "127.0.0.1" if host == "localhost" else host
    family = socket.AF_INET6 if ":" in address else socket.AF_INET

    def listen(number: int) -> socket.socket:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, number))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        sock.set_inheritable(True)
        return sock

    try:
        return listen(port), None
    except OSError as exc:
        if port == 0 or exc.errno != errno.EADDRINUSE:
            raise ConfigError(f"cannot serve the view on {host}:{port}: {exc.strerror}") from None
    sock = listen(0)
    return sock, f"port {port} is in use; serving on port {sock.getsockname()[1]} instead"


def _url(host: str, port: int, token: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?token={token}"


class _Server:
    """uvicorn serving an app on a socket, in a thread of its own."""

    def __init__(self, app: Any, sock: socket.socket) -> None:
        import uvicorn  # noqa: PLC0415

        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.sock = sock
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       name="simulacra-view", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        with contextlib.suppress(OSError):
            self.sock.close()


def _serve_in_child() -> None:
    """The child process of ``LiveView(process=True)``: serve until the run's pipe closes."""
    options = json.loads(sys.argv[1])
    sock = socket.socket(fileno=int(options["fd"]))
    link = _PipeLink()
    hub = _Hub(Path(options["run_dir"]), link, name=str(options["name"]),
               steps=options.get("steps"), replay=False)
    server = _Server(_app(hub, str(options["token"])), sock)
    server.start()
    link.closed.wait()
    _last_word(hub)
    # Every page has had the last word: nothing is left to close gracefully, and the run's
    # command waits for this process to end.
    sys.stdout.flush()
    os._exit(0)


def _last_word(hub: _Hub, timeout: float = 2.0) -> None:
    """Let the pages that follow the stream get the run's last state, then end their streams."""
    deadline = time.monotonic() + timeout
    while hub.streams and time.monotonic() < deadline:
        time.sleep(0.02)
    hub.closing = True


@dataclass(frozen=True, slots=True)
class _Options:
    host: str
    port: int
    allow_remote: bool


class LiveView:
    """The live view of a society run: a page on 127.0.0.1 behind a random token.

    ::

        control = RunControl(paused=True)
        with LiveView("runs/demo", control=control, steps=20) as view:
            print(view.url)
            run_society(config, out="runs/demo", control=control)

    Without *control* it shows a run directory already written: a finished
    run is replayed in the page with a position slider; an unfinished one is
    shown as far as its files go, and followed if they grow.

    Args:
        run_dir: The run directory (a run about to start writes it).
        control: The run's control: the page's play, pause, step and stop
            act on it.
        name: The run's name, shown as the page's title.
        steps: How many steps (windows) the run has, shown as "step k of N".
        host: Where to listen; one of :data:`LOCAL_HOSTS` unless *allow_remote*.
        port: The port; 0 picks a free one. One that is taken is replaced by
            a free one, and :attr:`note` says so.
        allow_remote: Allow a *host* other machines can reach.
        process: Serve from a child process (the default for a run, so that
            the page costs the run nothing but a pipe); False serves from a
            thread of this process.

    Raises:
        ConfigError: A remote *host* without *allow_remote*; *host* cannot be
            listened on; without *control*, *run_dir* is not a run directory.
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, control: RunControl | None = None,
                 name: str | None = None, steps: int | None = None,
                 host: str = "127.0.0.1", port: int = 0, allow_remote: bool = False,
                 process: bool | None = None) -> None:
        _check_host(host, allow_remote)
        self.run_dir = Path(run_dir) if control is not None else check_view_dir(run_dir)
        self.control = control
        self.name = name or self.run_dir.name
        self.steps = steps if steps is not None else _steps_of(self.run_dir)
        self.process = control is not None if process is None else process
        self.token = secrets.token_urlsafe(18)
        self._options = _Options(host, port, allow_remote)
        self.url = ""
        #: One line when the port asked for was taken and another was picked, else None.
        self.note: str | None = None
        self._server: _Server | None = None
        self._child: subprocess.Popen[str] | None = None
        self._link: _ControlLink | None = None
        self._done = threading.Event()
        self._sender: threading.Thread | None = None

    @staticmethod
    def check(*, host: str = "127.0.0.1", allow_remote: bool = False) -> None:
        """Check, before any work, that a view can be served here on *host*.

        Raises:
            ConfigError: A package of the ``view`` extra is missing (the
                message names ``python -m pip install '.[view]'``), or *host* is
                remote and *allow_remote* is not set.
        """
        missing = view_missing()
        if missing is not None:
            raise ConfigError(missing)
        _check_host(host, allow_remote)

    def start(self) -> str:
        """Start serving; return the URL (with its token) to open."""
        sock, self.note = bind(self._options.host, self._options.port)
        port = int(sock.getsockname()[1])
        self.url = _url(self._options.host, port, self.token)
        if self.process and self.control is not None:
            self._start_child(sock)
        else:
            link: _Link
            if self.control is None:
                link = _NoLink(self.run_dir)
            else:
                link = self._link = _ControlLink(self.control)
            hub = _Hub(self.run_dir, link, name=self.name, steps=self.steps,
                       replay=self.control is None)
            self._hub = hub
            self._server = _Server(_app(hub, self.token), sock)
            self._server.start()
        return self.url

    def _start_child(self, sock: socket.socket) -> None:
        options = {"fd": sock.fileno(), "run_dir": str(self.run_dir.resolve()),
                   "token": self.token, "name": self.name, "steps": self.steps}
        root = str(_PACKAGE_ROOT)
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        code = "from simulacra.report._live import _serve_in_child; _serve_in_child()"
        # A session of its own: Ctrl-C in the terminal is for the run, which then closes
        # the pipe, and the child ends after it.
        self._child = subprocess.Popen(  # noqa: S603
            [sys.executable, "-c", code, json.dumps(options)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, pass_fds=(sock.fileno(),), env=env,
            start_new_session=True)
        sock.close()  # the child holds it now
        threading.Thread(target=self._commands, name="simulacra-view-commands",
                         daemon=True).start()
        self._sender = threading.Thread(target=self._send_status, name="simulacra-view-status",
                                        daemon=True)
        self._sender.start()

    def _commands(self) -> None:
        child = self._child
        if child is None or child.stdout is None:  # pragma: no cover (started with pipes)
            return
        for line in child.stdout:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                action = json.loads(line)["command"]
                if action in ACTIONS and self.control is not None:
                    _apply(self.control, action)

    def _send_status(self) -> None:
        child = self._child
        control = self.control
        if child is None or child.stdin is None or control is None:  # pragma: no cover
            return
        last: dict[str, Any] | None = None
        while True:
            done = self._done.wait(0.1)
            status = _control_status(control)
            if status != last:
                last = status
                try:
                    child.stdin.write(json.dumps(status) + "\n")
                    child.stdin.flush()
                except (OSError, ValueError):
                    return  # the child went away: the run goes on without its view
            if done:
                return

    def close(self, message: str | None = None) -> None:
        """Show the run's end (and *message*: how it ended) to open pages, then stop serving."""
        self._done.set()
        if self._sender is not None:
            self._sender.join(5)
        final = {"state": "ended", "started": True, "message": message}
        if self._child is not None:
            child = self._child
            with contextlib.suppress(OSError, ValueError, AttributeError):
                child.stdin.write(json.dumps(final) + "\n")  # type: ignore[union-attr]
                child.stdin.close()  # type: ignore[union-attr]
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()
            self._child = None
        if self._server is not None:
            if self._link is not None:
                self._link.final = final
                _last_word(self._hub)
            self._hub.closing = True
            self._server.stop()
            self._server = None

    def wait(self, timeout: float | None = None) -> bool:
        """Block while the server runs (``simulacra view``); False on *timeout*."""
        if self._server is None:
            return True
        self._server.thread.join(timeout)
        return not self._server.thread.is_alive()

    def __enter__(self) -> LiveView:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _steps_of(run_dir: Path) -> int | None:
    """``sim.steps`` of a run directory's config, if it can be read."""
    try:
        import yaml  # type: ignore[import-untyped]  # noqa: PLC0415

        config = yaml.safe_load((run_dir / run_files()["config"]).read_text(encoding="utf-8"))
        return int(config["sim"]["steps"])
    except Exception:  # only a label on the page
        return None


# -- the page ---------------------------------------------------------------------------


@functools.cache
def _page() -> str:
    """The page, with ``__TOKEN__`` and ``__TITLE__`` to fill in.

    Its markup, style and script are files of ``_assets/`` (``live.html``,
    ``live.css``, ``live.js``), read once, as the static report reads its own.
    """
    assets = resources.files("simulacra.report") / "_assets"
    html, css, js = ((assets / name).read_text(encoding="utf-8")
                     for name in ("live.html", "live.css", "live.js"))
    return html.replace("__STYLE__", css).replace("__SCRIPT__", js)
