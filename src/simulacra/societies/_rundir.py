"""Run directories: everything a run leaves behind, and what a replay reads back.

A run directory holds:

``config.yaml``
    the resolved config (defaults, file and overrides merged; the world
    factory as an absolute path), written before the first step;
``action_events.jsonl``
    every resolved action, one JSON object per line in resolution order
    (event-sourced: applying them to a fresh world rebuilds its state),
    flushed after every step;
``llm_recordings.sqlite``
    the model's completions keyed by request and call site
    (``simulacra.llm.RecordingStore``): a replay serves every call from here;
``telemetry.jsonl``
    one line per step: participants, failed turns, events by kind, model
    calls and tokens, wall-clock seconds, the world's probes, the running digest;
``calls.jsonl``
    one line per model call: latency, tokens, cost, outcome, request key
    (``simulacra.societies._calls``; telemetry, not in the digest);
``otel_spans.jsonl``
    with ``run.trace.otel: jsonl``, the OpenTelemetry spans of every step,
    turn and model call (``simulacra.societies._otel``; telemetry, not in the
    digest);
``digest.txt`` and ``summary.json``
    the run's digest, and the headline numbers, written at the end.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final, final

from simulacra._util import os_problem, plural, yaml_problem
from simulacra.agents import ActionEvent
from simulacra.errors import ConfigError

from ._rounds import StepReport

__all__ = ["RUN_FILES", "RunDirectory", "default_run_dir"]

#: The files of a run directory, by role.
RUN_FILES: Final[Mapping[str, str]] = {
    "config": "config.yaml",
    "events": "action_events.jsonl",
    "recordings": "llm_recordings.sqlite",
    "telemetry": "telemetry.jsonl",
    "digest": "digest.txt",
    "summary": "summary.json",
    "manifest": "manifest.json",
    "calls": "calls.jsonl",
    "otel": "otel_spans.jsonl",
}


def default_run_dir(name: str, seed: int | str, root: str | os.PathLike[str] = "runs") -> Path:
    """``runs/<name>-seed<seed>-<local time>``, made unique with a suffix if it exists."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{name}-seed{seed}")
    base = Path(root) / f"{safe}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def event_line(event: ActionEvent) -> str:
    """The line of ``action_events.jsonl`` that holds *event* (without its line end)."""
    return _dumps(event.to_json())


def _size_of(entry: os.DirEntry[str]) -> int:
    """The size of a file *entry*; 0 if it went away since it was listed (a ``-wal`` file)."""
    try:
        return entry.stat(follow_symlinks=False).st_size
    except FileNotFoundError:
        return 0


#: One encoder for every line (json.dumps with options builds one per call).
_dumps: Callable[[object], str] = json.JSONEncoder(
    sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode


@final
class RunDirectory:
    """Writes (or reads) one run directory.

    ::

        with RunDirectory.create("runs/demo", config.data) as rundir:
            engine = RoundEngine(..., on_step=rundir.on_step)
            result = engine.run(steps)
            rundir.finish(result_fields)

    Args:
        path: The directory.
    """

    __slots__ = ("_events", "_telemetry", "path")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._events: IO[str] | None = None
        self._telemetry: IO[str] | None = None

    def file(self, role: str) -> Path:
        """The path of one of :data:`RUN_FILES` (``"events"``, ``"recordings"``...)."""
        return self.path / RUN_FILES[role]

    @classmethod
    def check_free(cls, path: str | os.PathLike[str]) -> RunDirectory:
        """*path* as a run directory not yet made, having checked it holds no run; writes nothing.

        Raises:
            ConfigError: *path* holds a run directory already.
        """
        rundir = cls(path)
        if rundir.file("config").exists() or rundir.file("events").exists():
            raise ConfigError(f"run directory {str(rundir.path)!r} already holds a run; "
                              "choose another --out")
        return rundir

    @classmethod
    def create(cls, path: str | os.PathLike[str], config: Mapping[str, Any]) -> RunDirectory:
        """Make the directory (it must not hold a run already) and write the config.

        Raises:
            ConfigError: *path* holds a run directory already, or cannot be made.
        """
        import yaml  # type: ignore[import-untyped]  # noqa: PLC0415  (lazy)

        rundir = cls.check_free(path)
        try:
            rundir.path.mkdir(parents=True, exist_ok=True)
            with rundir.file("config").open("w", encoding="utf-8") as file:
                yaml.safe_dump(dict(config), file, sort_keys=False, allow_unicode=True)
            rundir._events = rundir.file("events").open("w", encoding="utf-8")
            rundir._telemetry = rundir.file("telemetry").open("w", encoding="utf-8")
        except OSError as exc:
            rundir.close()
            # The message names the directory; str(exc) would name it (or its file) again.
            failed = exc.filename
            which = (f" ({Path(failed).name})" if isinstance(failed, str)
                     and Path(failed).parent == rundir.path else "")
            raise ConfigError(f"cannot write run directory {str(rundir.path)!r}: "
                              f"{os_problem(exc)}{which}") from None
        return rundir

    def on_step(self, report: StepReport, extra: Mapping[str, Any] | None = None) -> None:
        """Append the step's events and telemetry, and flush both (an engine ``on_step``).

        *extra* adds fields to the step's telemetry line (its cost, say).
        """
        events, telemetry = self._events, self._telemetry
        if events is None or telemetry is None:
            raise ConfigError(f"run directory {str(self.path)!r} is not open for writing")
        events.write("".join(event_line(e) + "\n" for e in report.events))
        events.flush()
        line = report.telemetry()
        if extra:
            line.update(extra)
        telemetry.write(_dumps(line) + "\n")
        telemetry.flush()

    @property
    def checkpoints(self) -> Path:
        """The folder of this run's checkpoints."""
        return self.path / "checkpoints"

    def positions(self) -> dict[str, int]:
        """Byte offsets of the logs now (flushed): where a resumed run continues them."""
        events, telemetry = self._events, self._telemetry
        if events is None or telemetry is None:
            raise ConfigError(f"run directory {str(self.path)!r} is not open for writing")
        events.flush()
        telemetry.flush()
        return {"events": events.tell(), "telemetry": telemetry.tell()}

    @classmethod
    def reopen(cls, path: str | os.PathLike[str], positions: Mapping[str, int]) -> RunDirectory:
        """Open an unfinished run to continue it from a checkpoint's *positions*.

        The logs are cut back to the checkpoint (lines written after it, before
        the run stopped, are dropped: the resumed run writes them again) and
        opened for appending.

        Raises:
            ConfigError: *path* holds no run, a finished one, or logs shorter
                than the checkpoint says.
        """
        rundir = cls(path)
        rundir.read_config()
        if rundir.file("digest").exists():
            raise ConfigError(f"run directory {str(rundir.path)!r} holds a finished run "
                              f"({rundir.file('digest').name} exists); nothing to resume")
        handles = []
        try:
            for role in ("events", "telemetry"):
                where = rundir.file(role)
                size = where.stat().st_size if where.exists() else -1
                if size < positions[role]:
                    what = ("missing" if size < 0 else
                            f"{plural(size, 'byte')}, shorter than the {positions[role]} the "
                            "checkpoint was taken at")
                    raise ConfigError(f"{where}: {what}; the run directory was changed")
                handle = where.open("r+", encoding="utf-8")
                handle.truncate(positions[role])
                handle.seek(positions[role])
                handles.append(handle)
        except BaseException:
            for handle in handles:
                handle.close()
            raise
        rundir._events, rundir._telemetry = handles
        return rundir

    def finish(self, digest: str, summary: Mapping[str, Any]) -> None:
        """Write ``digest.txt`` and ``summary.json`` and close the logs."""
        self.close()
        self.file("digest").write_text(digest + "\n", encoding="utf-8")
        self.file("summary").write_text(
            json.dumps(dict(summary), indent=2, sort_keys=True, ensure_ascii=False) + "\n",
            encoding="utf-8")

    def close(self) -> None:
        """Close the logs (idempotent)."""
        for name in ("_events", "_telemetry"):
            handle = getattr(self, name)
            if handle is not None:
                handle.close()
                setattr(self, name, None)

    # -- reading -------------------------------------------------------------------

    def read_config(self) -> dict[str, Any]:
        """The resolved config this run stored.

        Raises:
            ConfigError: The directory holds no run.
        """
        import yaml  # noqa: PLC0415  (lazy)

        where = self.file("config")
        if not where.is_file():
            if not self.path.exists():
                raise ConfigError(f"{str(self.path)!r} is not a run directory: it does not exist")
            raise ConfigError(f"{str(self.path)!r} is not a run directory: no {where.name}")
        try:
            with where.open(encoding="utf-8") as file:
                data = yaml.safe_load(file)
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}: not valid YAML ({yaml_problem(exc)}); the run "
                              "directory was changed or damaged") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: not a run config")
        return data

    def read_digest(self) -> str:
        """The digest the run ended with.

        Raises:
            ConfigError: The run did not finish (no ``digest.txt``), or its
                ``digest.txt`` was deleted (``summary.json`` says it finished).
        """
        where = self.file("digest")
        recorded = self.read_summary().get("digest")
        if not where.is_file():
            if isinstance(recorded, str):
                raise ConfigError(
                    f"{str(self.path)!r} has no {where.name}, but summary.json says the run "
                    f"finished with digest {recorded[:12]}...: {where.name} was deleted; the "
                    "run directory was changed or damaged")
            raise ConfigError(f"{str(self.path)!r} has no {where.name}: the run did not finish")
        return where.read_text(encoding="utf-8").strip()

    def read_events(self) -> list[ActionEvent]:
        """Every event of ``action_events.jsonl``, in order."""
        return list(self.iter_events())

    def last_checkpoint(self) -> int | None:
        """The step of the newest checkpoint in ``checkpoints/``, or None if there is none."""
        from ._checkpoint import checkpoint_files, checkpoint_step  # noqa: PLC0415

        files = checkpoint_files(self.checkpoints)
        return checkpoint_step(files[-1]) if files else None

    def finished_steps(self) -> int:
        """How many steps the run has finished, as ``telemetry.jsonl`` counts them (a line each).

        0 when there is no telemetry (yet). Steps a resume cut back are not counted:
        a resume truncates the file to its checkpoint.
        """
        try:
            with self.file("telemetry").open("rb") as lines:
                return sum(1 for line in lines if line.strip())
        except OSError:
            return 0

    def size_bytes(self) -> int:
        """The bytes the run directory holds: every regular file under it, checkpoints included.

        Counts what is on disk now (SQLite's ``-wal`` and ``-shm`` files of a
        run still writing too); links are not followed. A directory that does
        not exist holds 0 bytes.

        Raises:
            ConfigError: The directory cannot be read.
        """
        total = 0
        pending = [self.path]
        while pending:
            folder = pending.pop()
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(Path(entry.path))
                        elif entry.is_file(follow_symlinks=False):
                            total += _size_of(entry)
            except FileNotFoundError:  # gone while we looked: it holds nothing
                continue
            except OSError as exc:
                raise ConfigError(f"cannot measure run directory {str(self.path)!r}: "
                                  f"{os_problem(exc) if folder == self.path else exc}") from None
        return total

    def iter_events(self, kind: str | None = None) -> Iterator[ActionEvent]:
        """The events of ``action_events.jsonl`` one by one (the file is read as it goes).

        Args:
            kind: Only the events of this kind. A line is parsed only when it
                holds ``"kind":"<kind>"`` (as :func:`event_line` writes it; a
                quote inside a text is escaped, so no text can fake it): a
                run's failed turns are found without decoding its other events.
        """
        mark = None if kind is None else f'"kind":{json.dumps(kind, ensure_ascii=False)}'
        with self.file("events").open(encoding="utf-8") as file:
            for line in file:
                if mark is not None and mark not in line:
                    continue
                if line.strip():
                    event = ActionEvent.from_json(json.loads(line))
                    if kind is None or event.kind == kind:
                        yield event

    def read_event_lines(self) -> list[str]:
        """The lines of ``action_events.jsonl`` as written (without line ends).

        Raises:
            ConfigError: The file is missing or not UTF-8.
        """
        where = self.file("events")
        try:
            return where.read_bytes().decode("utf-8").splitlines()
        except FileNotFoundError:
            raise ConfigError(f"{str(self.path)!r} has no {where.name}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{where}: not UTF-8 text ({exc})") from None

    def read_summary(self) -> dict[str, Any]:
        """``summary.json`` as a dict (empty if the run did not finish)."""
        where = self.file("summary")
        if not where.is_file():
            return {}
        try:
            data = json.loads(where.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}: not valid JSON ({exc}); the run directory was changed "
                              "or damaged") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: not a summary (a JSON object)")
        return data

    def __enter__(self) -> RunDirectory:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"
