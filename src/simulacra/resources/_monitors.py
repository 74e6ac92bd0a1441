"""Monitors: time series with time-weighted means, sample tallies, and the monitor file.

A :class:`Monitor` is a quantity that holds its value between changes (a queue
length, a level, a utilisation): a step function of virtual time, kept as the
times at which it changed and the value it took. Its integral over time is
kept as a running sum, added to at each change, so the time-weighted mean is
exact and costs nothing to ask for. A :class:`Tally` keeps samples (waits,
sojourn times) for means, quantiles and histograms.

Resources, containers and stores make their own monitors when asked
(``Resource(sim, 3, monitor=True)`` or ``res.monitor()``); every monitor and
tally made on a Sim is in :func:`monitors(sim) <monitors>`, and
:func:`write_monitors` saves them in the ``simulacra.monitors.v1`` format that
``simulacra report`` reads.
"""

from __future__ import annotations

import bisect
import builtins
import itertools
import json
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, TypeGuard

from simulacra._util import install_hint
from simulacra.core import Sim
from simulacra.errors import ConfigError, TraceError

__all__ = [
    "KINDS",
    "MONITORS_FORMAT",
    "POLARS_EXTRA",
    "ContainerMonitor",
    "Monitor",
    "MonitorSet",
    "ResourceMonitor",
    "StoreMonitor",
    "Tally",
    "import_polars",
    "monitors",
    "read_monitors",
    "write_monitors",
]

#: The ``format`` field of a monitor file.
MONITORS_FORMAT: Final = "simulacra.monitors.v1"
#: What a series measures: its ``kind`` in a monitor file.
KINDS: Final = ("queue", "level", "utilisation", "count")
#: What to install for ``to_polars()`` and the data collector's tables.
POLARS_EXTRA: Final = install_hint("parallel")


def import_polars(what: str) -> Any:
    """Import polars for *what*, or raise a ConfigError naming the extra that installs it."""
    try:
        import polars  # noqa: PLC0415
    except ImportError:
        raise ConfigError(
            f"{what} needs polars, which is not installed: {POLARS_EXTRA}"
        ) from None
    return polars


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite(value: object, what: str) -> float:
    if not _is_number(value) or not math.isfinite(value):
        raise ConfigError(f"{what}: expected a finite number, got {value!r}")
    return value


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{what}(name=...): expected a non-empty str, got {name!r}")
    return name


def _check_sim(sim: object, what: str) -> Sim:
    if not isinstance(sim, Sim):
        raise ConfigError(f"{what}(sim, ...): expected a Sim, got {type(sim).__name__}")
    return sim


class Monitor:
    """A value that holds between changes, recorded over virtual time.

    ``times[i]`` is when the value became ``values[i]``; it holds until
    ``times[i + 1]`` (the last one until now). A value recorded at the same
    time as the previous one replaces it: the last value at a time wins, and
    an interval of zero width adds nothing to the integral. A value equal to
    the current one is not recorded again, and a change undone within one
    instant leaves no point. So the series is canonical: one point per
    instant at which the value (as it stood at the end of that instant)
    changed, whatever happened in between.

    ::

        level = Monitor(sim, "inventory", kind="level", value=10)
        level.record(7)                      # at sim.now
        level.time_weighted_mean()           # integral of the value / elapsed time

    Args:
        sim: The simulation whose clock times the records.
        name: The series' name, unique among the monitors and tallies of *sim*.
        kind: What it measures: ``"queue"``, ``"level"``, ``"utilisation"`` or
            ``"count"`` (how ``simulacra report`` draws it).
        value: The value at ``sim.now``, when recording starts.

    Attributes:
        name: The series' name.
        kind: What it measures.
        sim: The simulation it belongs to.
        times: When the value changed (first: when recording started). Read
            it; do not change it.
        values: The value from each of those times on.

    Raises:
        ConfigError: A bad argument, or *name* is taken on *sim*.
    """

    __slots__ = ("_area", "_before", "kind", "name", "sim", "times", "values")

    def __init__(self, sim: Sim, name: str, *, kind: str = "level", value: float = 0) -> None:
        self.sim = _check_sim(sim, "Monitor")
        self.name = _check_name(name, "Monitor")
        if kind not in KINDS:
            raise ConfigError(f"Monitor(kind=...): expected one of {KINDS}, got {kind!r}")
        self.kind = kind
        self.times: list[float] = [sim.now]
        self.values: list[float] = [_finite(value, "Monitor(value=...)")]
        #: The integral of the value from times[0] to times[-1], and to times[-2].
        self._area = self._before = 0.0
        _register(sim, self)

    def __repr__(self) -> str:
        return (f"<Monitor {self.name!r} ({self.kind}): {len(self.times)} points from "
                f"t={self.times[0]!r}, now {self.values[-1]!r}>")

    def __len__(self) -> int:
        return len(self.times)

    @property
    def value(self) -> float:
        """The current value."""
        return self.values[-1]

    @property
    def start(self) -> float:
        """When recording started (or was last :meth:`reset`)."""
        return self.times[0]

    @property
    def max(self) -> float:
        """The largest value held (values replaced at the same instant are not counted)."""
        return max(self.values)

    @property
    def min(self) -> float:
        """The smallest value held."""
        return min(self.values)

    def record(self, value: float) -> None:
        """Record that the value is *value* from ``sim.now`` on.

        Raises:
            ConfigError: *value* is not a finite number.
        """
        self._set(self.sim.now, _finite(value, f"Monitor {self.name!r}: record(value)"))

    def _set(self, now: float, value: float) -> None:
        # The recording path of resources: checked by the caller.
        times = self.times
        last = times[-1]
        values = self.values
        if now == last:  # zero width: the last value at a time wins
            if len(values) > 1 and values[-2] == value:
                # Undone within the instant: as if it never changed (exactly:
                # the integral is restored, not recomputed).
                times.pop()
                values.pop()
                self._area = self._before
            else:
                values[-1] = value
        elif value != values[-1]:
            self._before = area = self._area
            self._area = area + values[-1] * (now - last)
            times.append(now)
            values.append(value)

    def integral(self, until: float | None = None) -> float:
        """The integral of the value over time, from :attr:`start` to *until* (default: now).

        Raises:
            ConfigError: *until* is before :attr:`start` or after ``sim.now``.
        """
        end = self._until(until)
        times, values = self.times, self.values
        if end >= times[-1]:
            return self._area + values[-1] * (end - times[-1])
        # Summed in the same order as the running sum, so a prefix gives the same bits.
        area = 0.0
        index = bisect.bisect_right(times, end) - 1
        for i in range(index):
            area += values[i] * (times[i + 1] - times[i])
        return area + values[index] * (end - times[index])

    def time_weighted_mean(self, until: float | None = None) -> float:
        """The mean over time from :attr:`start` to *until* (default: now).

        The integral of the value divided by the time elapsed. Over no time at
        all (*until* equal to :attr:`start`) it is the value at that time.

        Raises:
            ConfigError: *until* is before :attr:`start` or after ``sim.now``.
        """
        end = self._until(until)
        span = end - self.times[0]
        if span > 0:
            return self.integral(end) / span
        return self.values[bisect.bisect_right(self.times, end) - 1]

    def _until(self, until: float | None) -> float:
        now = self.sim.now
        if until is None:
            return now
        if not _is_number(until) or not self.times[0] <= until <= now:
            raise ConfigError(
                f"Monitor {self.name!r}: time_weighted_mean(until=...): expected a time from "
                f"the start {self.times[0]!r} to now {now!r}, got {until!r}"
            )
        return until

    def reset(self) -> None:
        """Forget the history: record again from ``sim.now``, starting at the current value.

        Call it at the end of a warm-up, so that means cover the steady state only.
        """
        value = self.values[-1]
        self.times[:] = [self.sim.now]
        self.values[:] = [value]
        self._area = self._before = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The series as the monitor file holds it (see :func:`write_monitors`)."""
        times = [float(t) for t in self.times]
        values = [float(v) for v in self.values]
        now = self.sim.now
        if now > times[-1]:  # the last value holds until now: say until when
            times.append(float(now))
            values.append(values[-1])
        return {"kind": self.kind, "t": times, "v": values,
                "time_weighted_mean": float(self.time_weighted_mean())}

    def to_polars(self) -> Any:
        """The series as a polars DataFrame with columns ``time`` and ``value``.

        Raises:
            ConfigError: polars is not installed (``python -m pip install '.[parallel]'``).
        """
        pl = import_polars("Monitor.to_polars()")
        return pl.DataFrame({"time": [float(t) for t in self.times],
                             "value": [float(v) for v in self.values]},
                            schema={"time": pl.Float64, "value": pl.Float64})


class Tally:
    """Samples of a quantity (waits, sojourn times), for means, quantiles and histograms.

    ::

        waits = Tally(sim, "wait")
        waits.record(sim.now - arrived)
        waits.mean(), waits.quantile(0.95), waits.histogram(bins=20)

    Statistics of an empty tally are ``nan``.

    Args:
        sim: The simulation it belongs to (it is listed in :func:`monitors`).
        name: Its name, unique among the monitors and tallies of *sim*.

    Attributes:
        name: Its name.
        samples: The samples, in the order recorded. Read it; do not change it.

    Raises:
        ConfigError: A bad argument, or *name* is taken on *sim*.
    """

    __slots__ = ("name", "samples", "sim")

    def __init__(self, sim: Sim, name: str) -> None:
        self.sim = _check_sim(sim, "Tally")
        self.name = _check_name(name, "Tally")
        self.samples: list[float] = []
        _register(sim, self)

    def __repr__(self) -> str:
        return f"<Tally {self.name!r}: {len(self.samples)} samples>"

    def __len__(self) -> int:
        return len(self.samples)

    def record(self, value: float) -> None:
        """Add one sample.

        Raises:
            ConfigError: *value* is not a finite number.
        """
        self.samples.append(_finite(value, f"Tally {self.name!r}: record(value)"))

    @property
    def count(self) -> int:
        """How many samples there are."""
        return len(self.samples)

    @property
    def max(self) -> float:
        """The largest sample (nan if none)."""
        return max(self.samples) if self.samples else math.nan

    @property
    def min(self) -> float:
        """The smallest sample (nan if none)."""
        return min(self.samples) if self.samples else math.nan

    def mean(self) -> float:
        """The mean of the samples (exactly rounded sum, ``math.fsum``); nan if none."""
        samples = self.samples
        return math.fsum(samples) / len(samples) if samples else math.nan

    def std(self) -> float:
        """The sample standard deviation (n - 1 in the denominator); nan if under two samples."""
        samples = self.samples
        if len(samples) < 2:
            return math.nan
        mean = self.mean()
        return math.sqrt(math.fsum((x - mean) ** 2 for x in samples) / (len(samples) - 1))

    def quantile(self, q: float) -> float:
        """The *q*-quantile, interpolating linearly between order statistics; nan if none.

        The same definition as ``numpy.quantile``'s default and
        ``statistics.quantiles(method="inclusive")``: 0 is the minimum, 1 the maximum.

        Raises:
            ConfigError: *q* is not a number from 0 to 1.
        """
        if not _is_number(q) or not 0 <= q <= 1:
            raise ConfigError(
                f"Tally {self.name!r}: quantile(q): expected a number from 0 to 1, got {q!r}"
            )
        if not self.samples:
            return math.nan
        ordered = sorted(self.samples)
        position = q * (len(ordered) - 1)
        low = math.floor(position)
        high = min(low + 1, len(ordered) - 1)
        fraction = position - low
        return ordered[low] + (ordered[high] - ordered[low]) * fraction

    def histogram(self, bins: int = 10, *,
                  range: tuple[float, float] | None = None) -> tuple[list[float], list[int]]:
        """Counts of the samples in *bins* equal-width bins: ``(edges, counts)``.

        As ``numpy.histogram``: ``len(edges) == bins + 1``, every bin is
        half-open ``[edge, next)`` except the last, which also holds its right
        edge; samples outside *range* are not counted. Without *range* the
        bins span the smallest to the largest sample (0 to 1 when there are
        none; a half-unit either side when all samples are equal).

        Raises:
            ConfigError: *bins* is not an int >= 1, or *range* is not (low, high)
                with finite low < high.
        """
        count: object = bins
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError(
                f"Tally {self.name!r}: histogram(bins=...): expected an int >= 1, got {bins!r}"
            )
        samples = self.samples
        given: object = range
        if range is None:
            low, high = (min(samples), max(samples)) if samples else (0.0, 1.0)
            if low == high:
                low, high = low - 0.5, high + 0.5
        else:
            ok = (isinstance(given, tuple) and len(given) == 2
                  and all(_is_number(x) and math.isfinite(x) for x in given)
                  and given[0] < given[1])
            if not ok:
                raise ConfigError(
                    f"Tally {self.name!r}: histogram(range=...): expected (low, high) with "
                    f"finite low < high, got {range!r}"
                )
            low, high = range
        width = (high - low) / bins
        edges = [low + width * i for i in builtins.range(bins)] + [high]
        counts = [0] * bins
        for x in samples:
            if low <= x <= high:
                # bisect on the edges themselves: no float drift between an edge and its bin.
                index = min(bisect.bisect_right(edges, x) - 1, bins - 1)
                counts[index] += 1
        return edges, counts

    def reset(self) -> None:
        """Drop every sample (at the end of a warm-up)."""
        self.samples.clear()

    def to_polars(self) -> Any:
        """The samples as a polars DataFrame with one column, ``value``.

        Raises:
            ConfigError: polars is not installed (``python -m pip install '.[parallel]'``).
        """
        pl = import_polars("Tally.to_polars()")
        return pl.DataFrame({"value": [float(x) for x in self.samples]},
                            schema={"value": pl.Float64})


class MonitorSet:
    """Named monitors and tallies, in the order they were added: what a monitor file holds.

    ``monitors(sim)`` is the set of everything made on a Sim; a resource's
    ``monitor()`` returns the set of its own series (:class:`ResourceMonitor`
    and the like). Build one of your own to save monitors of several Sims in
    one file (their names must differ).

    Args:
        *items: Monitors, tallies or other sets to add (see :meth:`add`).

    Raises:
        ConfigError: An item is of another type, or two have the same name.
    """

    __slots__ = ("_samples", "_series")

    def __init__(self, *items: Monitor | Tally | MonitorSet) -> None:
        self._series: dict[str, Monitor] = {}
        self._samples: dict[str, Tally] = {}
        self.add(*items)

    def __repr__(self) -> str:
        return (f"<{type(self).__name__}: {len(self._series)} series, "
                f"{len(self._samples)} tallies>")

    def add(self, *items: Monitor | Tally | MonitorSet) -> None:
        """Add monitors, tallies, or the contents of other sets.

        Adding what is already here again does nothing.

        Raises:
            ConfigError: An item is of another type, or has the name of another one.
        """
        for item in items:
            if isinstance(item, MonitorSet):
                self.add(*item._series.values(), *item._samples.values())
                continue
            if not isinstance(item, Monitor | Tally):
                raise ConfigError(
                    f"MonitorSet.add(...): expected a Monitor, Tally or MonitorSet, got "
                    f"{type(item).__name__} {item!r}"
                )
            held = self._find(item.name)
            if held is item:
                continue
            if held is not None:
                raise ConfigError(
                    f"monitor name {item.name!r} is taken by {held!r}; give each monitor and "
                    "tally its own name"
                )
            if isinstance(item, Monitor):
                self._series[item.name] = item
            else:
                self._samples[item.name] = item

    @property
    def series(self) -> Mapping[str, Monitor]:
        """The monitors by name, in the order added (read-only)."""
        return MappingProxyType(self._series)

    @property
    def samples(self) -> Mapping[str, Tally]:
        """The tallies by name, in the order added (read-only)."""
        return MappingProxyType(self._samples)

    def __len__(self) -> int:
        return len(self._series) + len(self._samples)

    def __iter__(self) -> Iterator[str]:
        """The names: series first, then tallies."""
        yield from self._series
        yield from self._samples

    def __contains__(self, name: object) -> bool:
        return name in self._series or name in self._samples

    def _find(self, name: str) -> Monitor | Tally | None:
        series = self._series.get(name)
        return series if series is not None else self._samples.get(name)

    def __getitem__(self, name: str) -> Monitor | Tally:
        found = self._find(name)
        if found is None:
            raise KeyError(f"no monitor or tally named {name!r}; there are {sorted(self)}")
        return found

    def reset(self) -> None:
        """Reset every monitor and tally here: statistics from ``sim.now`` on (a warm-up)."""
        for monitor in self._series.values():
            monitor.reset()
        for tally in self._samples.values():
            tally.reset()

    def to_dict(self) -> dict[str, Any]:
        """Everything here in the ``simulacra.monitors.v1`` format (see :func:`write_monitors`)."""
        return {
            "format": MONITORS_FORMAT,
            "series": {name: monitor.to_dict() for name, monitor in self._series.items()},
            "samples": {name: [float(x) for x in tally.samples]
                        for name, tally in self._samples.items()},
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write everything here to the monitor file *path*; see :func:`write_monitors`."""
        return _write(Path(path), self.to_dict())


class ResourceMonitor(MonitorSet):
    """The series of a monitored :class:`~simulacra.Resource` (see ``Resource.monitor()``).

    Attributes:
        name: The resource's monitor name; the series are ``NAME.utilisation``
            and ``NAME.queue``.
        utilisation: The fraction of slots in use (``count / capacity``), kind
            ``"utilisation"``: its time-weighted mean is the utilisation.
        queue: The number of requests waiting, kind ``"queue"``.
    """

    __slots__ = ("name", "queue", "utilisation")

    def __init__(self, sim: Sim, name: str, *, utilisation: float, queue: int) -> None:
        self.name = name
        self.utilisation, self.queue = _series(
            sim, name, ("utilisation", "utilisation", utilisation), ("queue", "queue", queue))
        super().__init__(self.utilisation, self.queue)


class ContainerMonitor(MonitorSet):
    """The series of a monitored :class:`~simulacra.Container` (see ``Container.monitor()``).

    Attributes:
        name: The container's monitor name; the series are ``NAME.level``,
            ``NAME.getters`` and ``NAME.putters``.
        level: The amount held, kind ``"level"``.
        getters: The gets waiting for enough to be there, kind ``"queue"``.
        putters: The puts waiting for room, kind ``"queue"``.
    """

    __slots__ = ("getters", "level", "name", "putters")

    def __init__(self, sim: Sim, name: str, *, level: float, getters: int,
                 putters: int) -> None:
        self.name = name
        self.level, self.getters, self.putters = _series(
            sim, name, ("level", "level", level), *_queues(getters, putters))
        super().__init__(self.level, self.getters, self.putters)


class StoreMonitor(MonitorSet):
    """The series of a monitored store (:class:`~simulacra.Store` and its kinds).

    Attributes:
        name: The store's monitor name; the series are ``NAME.items``,
            ``NAME.getters`` and ``NAME.putters``.
        items: The number of items held, kind ``"count"``.
        getters: The gets waiting for an item, kind ``"queue"``.
        putters: The puts waiting for room, kind ``"queue"``.
    """

    __slots__ = ("getters", "items", "name", "putters")

    def __init__(self, sim: Sim, name: str, *, items: int, getters: int, putters: int) -> None:
        self.name = name
        self.items, self.getters, self.putters = _series(
            sim, name, ("items", "count", items), *_queues(getters, putters))
        super().__init__(self.items, self.getters, self.putters)


class _SimMonitors:
    """What the registry keeps per Sim: its monitor set and a counter for default names."""

    __slots__ = ("named", "set")

    def __init__(self) -> None:
        self.set = MonitorSet()
        self.named = 0


def _entry(sim: Sim) -> _SimMonitors:
    """The Sim's monitors, kept on the Sim (``sim._extras``), so they go with it.

    (A module-level ``WeakKeyDictionary`` of Sims kept every monitored Sim alive:
    its monitors, the values, refer back to their Sim.)
    """
    extras = sim._extras
    if extras is None:
        extras = sim._extras = {}
    entry: _SimMonitors | None = extras.get("monitors")
    if entry is None:
        entry = extras["monitors"] = _SimMonitors()
    return entry


def _register(sim: Sim, item: Monitor | Tally) -> None:
    _entry(sim).set.add(item)


def _series(sim: Sim, name: str, *parts: tuple[str, str, float]) -> list[Monitor]:
    """A resource's series ``NAME.PART``, one per ``(part, kind, value)``, in that order.

    The names are checked before any series is made (none is left over).
    """
    _names_free(sim, name, tuple(part for part, _, _ in parts))
    return [Monitor(sim, f"{name}.{part}", kind=kind, value=value) for part, kind, value in parts]


def _queues(getters: int, putters: int) -> tuple[tuple[str, str, float], tuple[str, str, float]]:
    """The getters and putters series of a container or a store, as :func:`_series` takes them."""
    return ("getters", "queue", getters), ("putters", "queue", putters)


def _names_free(sim: Sim, name: str, parts: tuple[str, ...]) -> None:
    """Refuse a resource's monitor name before any of its series is made (none is left over)."""
    taken = _entry(sim).set
    for part in parts:
        held = taken._find(f"{name}.{part}")
        if held is not None:
            raise ConfigError(
                f"monitor name {name!r}: its series {name}.{part} would take the name of "
                f"{held!r}; give each resource its own monitor name"
            )


def default_name(sim: Sim, kind: str) -> str:
    """A name for the monitors of a resource made with ``monitor=True``: ``kind-N``.

    N counts the resources of *sim* named this way (1, 2, ...), in the order
    their monitors were made: deterministic, like everything else on a Sim.
    """
    entry = _entry(sim)
    entry.named += 1
    return f"{kind}-{entry.named}"


def monitors(sim: Sim) -> MonitorSet:
    """Every monitor and tally made on *sim*, in the order they were made.

    It is the live set: monitors made later appear in it too. Save it with
    ``monitors(sim).save(path)``, reset it at the end of a warm-up with
    ``monitors(sim).reset()``.

    Raises:
        ConfigError: *sim* is not a Sim.
    """
    return _entry(_check_sim(sim, "monitors")).set


def write_monitors(path: str | os.PathLike[str], *items: Monitor | Tally | MonitorSet | Sim,
                   ) -> Path:
    """Write monitors and tallies to the monitor file *path* (JSON); return the path.

    *items* are monitors, tallies, sets of them (a resource's ``monitor()``,
    ``monitors(sim)``) or Sims (everything made on them). The file is::

        {"format": "simulacra.monitors.v1",
         "series": {NAME: {"kind": "queue" | "level" | "utilisation" | "count",
                           "t": [floats], "v": [floats], "time_weighted_mean": float}},
         "samples": {NAME: [floats]}}

    ``v[i]`` holds from ``t[i]`` to ``t[i + 1]``; the last point is the value
    at the time of writing (``sim.now``), so the last interval is explicit.
    ``time_weighted_mean`` runs from ``t[0]`` to that time. The file is
    written to a temporary name and then renamed, so a reader never sees half
    of one.

    Raises:
        ConfigError: No items, an item of another type, or two with one name.
        OSError: The file cannot be written.
    """
    if not items:
        raise ConfigError("write_monitors(path, *items): give at least one monitor, tally, "
                          "MonitorSet or Sim")
    collected = MonitorSet()
    for item in items:
        collected.add(monitors(item) if isinstance(item, Sim) else item)
    return collected.save(path)


def _write(path: Path, payload: dict[str, Any]) -> Path:
    text = json.dumps(payload, allow_nan=False, separators=(",", ":"))
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(text + "\n", encoding="utf-8")
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def read_monitors(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a monitor file written by :func:`write_monitors`.

    Returns:
        The file's object: ``format``, ``series`` and ``samples`` as described
        in :func:`write_monitors`.

    Raises:
        TraceError: The file is not JSON, is of another format or version, or a
            field is missing or malformed; the message names the file and field.
        OSError: The file cannot be read.
    """
    where = os.fspath(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(f"{where}: not a monitor file (not JSON: {exc})") from exc
    if not isinstance(data, dict) or "format" not in data:
        raise TraceError(f"{where}: not a monitor file (no 'format' field)")
    if data["format"] != MONITORS_FORMAT:
        raise TraceError(
            f"{where}: format {data['format']!r} is not one this version reads "
            f"({MONITORS_FORMAT!r})"
        )
    for key in ("series", "samples"):
        if not isinstance(data.get(key), dict):
            raise TraceError(f"{where}: field {key!r} is missing or not an object")
    for name, series in data["series"].items():
        _check_series(where, name, series)
    for name, samples in data["samples"].items():
        if not isinstance(samples, list) or not all(map(_is_number, samples)):
            raise TraceError(f"{where}: samples[{name!r}] must be a list of numbers")
    return data


def _check_series(where: str, name: str, series: object) -> None:
    field = f"{where}: series[{name!r}]"
    if not isinstance(series, dict):
        raise TraceError(f"{field} must be an object")
    if series.get("kind") not in KINDS:
        raise TraceError(f"{field}: kind must be one of {KINDS}, got {series.get('kind')!r}")
    times, values = series.get("t"), series.get("v")
    if not isinstance(times, list) or not isinstance(values, list) or not times:
        raise TraceError(f"{field}: 't' and 'v' must be non-empty lists")
    if len(times) != len(values):
        raise TraceError(f"{field}: 't' has {len(times)} points but 'v' has {len(values)}")
    if not all(map(_is_number, times)) or not all(map(_is_number, values)):
        raise TraceError(f"{field}: 't' and 'v' must hold numbers")
    if any(b < a for a, b in itertools.pairwise(times)):
        raise TraceError(f"{field}: 't' must not decrease")
    if not _is_number(series.get("time_weighted_mean")):
        raise TraceError(f"{field}: time_weighted_mean must be a number")
