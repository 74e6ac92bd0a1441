"""``simulacra run CONFIG.yaml [key.path=value ...]`` and ``simulacra replay RUN_DIR``.

``run`` reads a layered run config (built-in defaults, the file, dotted
overrides), shows a progress bar on stderr, writes a run directory (``--out``,
or ``run.out`` in the config, or ``runs/<name>-seed<seed>-<time>``) and ends
with a summary table on stdout. ``replay`` re-runs a run directory from its
recorded completions -- no model is called -- and checks that the digest is
the one the run ended with.

Exit status: 0 done (replay: the run and its events match); 1 the run failed
(its provider became unusable, more than ``run.max_failed_fraction`` of its
turns failed, or a write of the run directory failed during the run) or the
replay does not match (the message says where); 2 bad input: a usage or config
error (the message names the dotted field), a failed preflight of the
provider, or a run directory found missing or damaged before the run began
(``--resume``: no checkpoint, a damaged one, recordings missing, short or
unreadable; ``replay``: recordings unreadable; the message names the file);
3 stopped by ``run.budget``, with a checkpoint; 130 stopped by
SIGINT or SIGTERM (Ctrl-C), with a checkpoint. The message of 3 and 130 says
how to continue: ``simulacra run --resume RUN_DIR``.

Layer 7: uses the public front door ``simulacra`` only, imported lazily.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from simulacra._util import plural
from simulacra.executors import ProgressBar

__all__ = ["add_replay_command", "is_config_target", "run_config"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BUDGET = 3
EXIT_INTERRUPTED = 130

_E = TypeVar("_E", bound=BaseException)

CONFIG_SUFFIXES = (".yaml", ".yml")
#: The progress bar moves for turns at most this often (seconds); a step moves it too.
_TURN_S = 0.1


def is_config_target(target: str) -> bool:
    """Whether ``simulacra run TARGET`` names a run config rather than a model function."""
    return target.lower().endswith(CONFIG_SUFFIXES)


class _Progress(ProgressBar):
    """The bar of a society run, counting turns (or nothing, when disabled).

    The round engine has a known number of turns (agents x steps). The
    event-driven engine does not (an agent may act several times in a window,
    or not at all), so its bar counts windows of virtual time instead. The bar
    is drawn at the first progress, not before: a run that fails its checks
    prints its one error line, and no bar.
    """

    def __init__(self, enabled: bool, total: int, label: str, *, unit: str = "turns",
                 per_step: float | None = None, steps: int = 0) -> None:
        super().__init__(enabled, total, label, unit=unit)
        #: With participation below 1, the turns a step is expected to take: the bar's
        #: total is what is done plus that for every step to come (exact at the end).
        self._per_step = per_step
        self._steps = steps
        self._counted = threading.Lock()
        self._done = 0
        #: Turns not yet shown, and when the bar last moved for turns.
        self._pending = 0
        self._moved = 0.0
        #: "turns" counts turns; "steps" or "windows" counts steps (report.step + 1).
        self._windows = unit != "turns"
        #: Whether a turn or a step has finished, bar or no bar: the run has begun its
        #: work. An error before that was found in what the command was given (a damaged
        #: checkpoint or recording store): bad input, exit 2, not a failed run.
        self.began = False

    def turn(self) -> None:
        # Called after every turn, from the workers: counted here, and the bar moved at
        # most every _TURN_S seconds (redrawing it for each of a million turns took
        # longer than the turns).
        self.began = True
        if self.enabled and not self._windows:
            with self._counted:
                self._pending += 1
                now = time.monotonic()
                if now - self._moved < _TURN_S:
                    return
                pending, self._pending, self._moved = self._pending, 0, now
            self.advance(pending)

    def step(self, report: Any) -> None:
        self.began = True
        if self.enabled:
            with self._counted:
                self._pending = 0  # the step's turns, counted whole below
                self._done = report.step + 1 if self._windows else (
                    self._done + report.participants)
            total = None
            if self._per_step is not None:
                left = max(0, self._steps - (report.step + 1))
                total = self._done + round(left * self._per_step)
            self.update(completed=self._done, total=total, description=f"step {report.step + 1}")

    @contextlib.contextmanager
    def shown(self) -> Iterator[None]:
        try:
            yield
        finally:
            self.stop()


def _progress(enabled: bool, config: Any, label: str) -> _Progress:
    sim = config.sim
    if sim.engine.step.built_in == "round":
        share = float(sim.engine.participation)
        if share < 1.0:  # the expected turns; each step's end makes the total exact so far
            per_step = sim.agents * share
            return _Progress(enabled, max(1, round(sim.steps * per_step)), label,
                             per_step=per_step, steps=sim.steps)
        return _Progress(enabled, sim.steps * sim.agents, label)
    return _Progress(enabled, sim.steps, label, unit="windows")


def _print_summary(title: str, rows: Mapping[str, Any], out: Any) -> None:
    from rich import box  # noqa: PLC0415
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    # The title is a line of its own: as the table's, it would wrap at the table's width.
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in rows.items():
        table.add_row(str(key), str(value))
    # The terminal's width (rich reads it); 80 columns when the output is not a terminal.
    console = Console(file=out, highlight=False, soft_wrap=False)
    if not console.is_terminal:
        console.width = 80
    try:
        console.print(title, markup=False)
        console.print(table)
    except SystemExit:  # rich's answer to a closed pipe (Console.on_broken_pipe): the CLI's
        raise BrokenPipeError(errno.EPIPE, "stdout was closed") from None


def _bad_input(exc: BaseException) -> int:
    """The one line of input found damaged or missing before the run began: exit 2.

    The message names the file and what is wrong with it (and, for a damaged newest
    checkpoint, which older one ``--from-checkpoint`` resumes from).
    """
    print(f"error: {exc}", file=sys.stderr)
    return EXIT_USAGE


def _failure(exc: BaseException) -> int:
    import simulacra  # noqa: PLC0415

    damaged = _cause(exc, simulacra.RecordingDamaged)
    if damaged is not None:  # the recordings were damaged before the command: bad input
        return _bad_input(damaged)
    cause = exc.__cause__
    extra = f" ({type(cause).__name__}: {cause})" if cause is not None and str(cause) not in str(
        exc) else ""
    print(f"error: {type(exc).__name__}: {exc}{extra}", file=sys.stderr)
    return EXIT_FAILED


@contextlib.contextmanager
def _stoppable(control: Any) -> Iterator[None]:
    """SIGINT and SIGTERM stop the run at the end of the step; a second one stops it at once.

    Once a signal has stopped the run, the process is on its way out with the run saved:
    from then on both signals are ignored rather than given back to the handlers before.
    A second Ctrl-C can come after the run has already stopped at the end of its step (the
    two presses a few milliseconds apart, the run at a step's end); under Python's own
    handler it would raise in the middle of the exit message, and while the interpreter
    finalizes (which puts SIG_DFL back for any handler but SIG_IGN) it would kill the
    process by the signal, with no word of the checkpoint already written.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signalled = False

    def handler(signum: int, frame: Any) -> None:
        nonlocal signalled
        signalled = True
        name = signal.Signals(signum).name
        if control.reason is not None:
            if getattr(control, "settled", False):
                # The step in progress has finished: its checkpoint is being written.
                # Cutting that short would lose it, so the stop goes on.
                print(f"\n{name}: the step has finished; writing its checkpoint",
                      file=sys.stderr, flush=True)
                return
            raise KeyboardInterrupt(name)
        control.request_stop(name)
        print(f"\n{name}: stopping after this step (again: stop at once)", file=sys.stderr,
              flush=True)

    previous = {number: signal.signal(number, handler)
                for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, signal.SIG_IGN if signalled else old)


def _society(call: Callable[[Any], Any], where: str, view: Any = None, *, name: str = "",
             steps: int = 0) -> Any:
    """Run *call(control)* under the signal handlers; an int is an exit status to return.

    With *view* (``ViewOptions``), the live view of the run is served while it goes; it
    shows how the run ended, then closes, before this returns.
    """
    import simulacra  # noqa: PLC0415

    control = simulacra.RunControl(paused=bool(view is not None and view.paused))
    live = None if view is None else view.start(where, control, name=name, steps=steps)
    ended = "the run failed"
    try:
        with _stoppable(control):
            run = call(control)
        ended = f"finished: digest {run.digest}"
        if control.reason is not None:  # the signal came in the last step: nothing to stop
            print(f"{control.reason}: it came during the last step, which finished the run "
                  "(nothing to resume)", file=sys.stderr)
        return run
    except simulacra.RunStopped as exc:
        ended = str(exc)
        print(f"{'budget' if exc.reason == 'budget' else 'interrupted'}: {exc}",
              file=sys.stderr)
        return EXIT_BUDGET if exc.reason == "budget" else EXIT_INTERRUPTED
    except simulacra.SimError as exc:
        if control.reason is None or not _interrupted(exc):
            ended = f"{type(exc).__name__}: {exc}"
            raise
        # The second signal's KeyboardInterrupt, turned into an error by the code it
        # interrupted (a recordings write rolled back): a stop at once all the same.
        ended = "stopped at once (Ctrl-C twice)"
        return _stopped_at_once(where)
    except KeyboardInterrupt:
        ended = "stopped at once (Ctrl-C twice)"
        return _stopped_at_once(where)
    finally:
        if live is not None:
            live.close(ended)


def _interrupted(exc: BaseException) -> bool:
    """Whether *exc* was raised because a KeyboardInterrupt cut its work short."""
    return _cause(exc, KeyboardInterrupt) is not None


def _cause(exc: BaseException, kind: type[_E]) -> _E | None:
    """The first exception of *kind* in *exc*'s chain of causes (itself included), or None."""
    seen: BaseException | None = exc
    for _ in range(16):
        if seen is None:
            return None
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _stopped_at_once(where: str) -> int:
    """The one line of a run stopped by a second signal, naming the checkpoint it resumes from."""
    import simulacra  # noqa: PLC0415

    rundir = simulacra.RunDirectory(where)
    step = rundir.last_checkpoint()
    finished = rundir.finished_steps()
    if step is not None and finished > step and rundir.file("recordings").exists():
        print(f"interrupted: stopped at once in step {finished}; writing the checkpoint of "
              f"step {finished} from the recordings (again: leave it at step {step})",
              file=sys.stderr, flush=True)
        if _catch_up(where, finished):
            print(f"interrupted: `simulacra run --resume {where}` continues from its "
                  f"checkpoint of step {finished}", file=sys.stderr)
            return EXIT_INTERRUPTED
        step = rundir.last_checkpoint()
    if step is not None:
        again = ""
        if finished > step:
            # The steps that finished after the checkpoint are in the files and their calls
            # in the recordings: a resume runs them again, served, and goes on from there.
            steps = (f"the finished step {step} runs" if finished == step + 1
                     else f"the finished steps {step}-{finished - 1} run")
            again = (f"; {steps} again from the recordings, without calling the model"
                     if rundir.file("recordings").exists()
                     else f"; {steps} again, calling the model again (run.record is off)")
        print(f"interrupted: stopped at once; `simulacra run --resume {where}` continues "
              f"from its checkpoint of step {step}{again}", file=sys.stderr)
    else:
        print(f"interrupted: stopped at once, before any checkpoint was written: {where} "
              "cannot be resumed; run it again", file=sys.stderr)
    return EXIT_INTERRUPTED


def _catch_up(where: str, finished: int) -> bool:
    """Write the checkpoint of the last finished step of a run stopped in the middle of a step.

    The state of that step is gone from memory, but its calls are in the recordings:
    the run is resumed from its newest checkpoint with a model that only serves them
    (strict: nothing is asked of the real model), and stopped at the end of step
    *finished* - 1, which writes its checkpoint. A Ctrl-C meanwhile gives up (the run
    keeps the older checkpoint); so does anything the recordings cannot serve.
    """
    import simulacra  # noqa: PLC0415
    from simulacra.llm import RecordingStore, ReplayModel  # noqa: PLC0415

    control = simulacra.RunControl()

    def on_step(report: Any) -> None:
        if report.step + 1 >= finished:
            control.request_stop("catch-up")

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with RecordingStore(simulacra.RunDirectory(where).file("recordings"),
                            readonly=True) as store:
            simulacra.resume_society(where, model=ReplayModel(store, strict=True),
                                     on_step=on_step, control=control)
    except simulacra.RunStopped:
        return simulacra.RunDirectory(where).last_checkpoint() == finished
    except (simulacra.SimError, KeyboardInterrupt, OSError):
        return False
    finally:
        signal.signal(signal.SIGINT, previous)
    return False  # it ran to its end: nothing stopped it where asked


def _bytes(size: int) -> str:
    """A size as people read it: 812 B, 254 KB, 3.1 MB (powers of 1000)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if size >= scale:
            value = size / scale
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{size} B"


def _report(config: Any, run: Any, *, resumed: bool, as_json: bool) -> int:
    if as_json:
        import json  # noqa: PLC0415

        path = Path(run.run_dir) / "summary.json" if run.run_dir is not None else None
        if path is not None and path.is_file():
            print(path.read_text(encoding="utf-8"), end="")
        else:
            print(json.dumps({"digest": run.digest, "llm": dict(run.llm),
                              "failures": dict(run.failures), "summary": dict(run.summary)},
                             indent=2, sort_keys=True, default=str))
    else:
        _print_summary(_title(config, run, resumed=resumed), _rows(config, run), sys.stdout)
        # Whole lines, never folded: users copy them.
        print(f" digest         {run.digest}")
        print(f" run directory  {run.run_dir}")
        if run.run_dir is not None:
            import simulacra  # noqa: PLC0415

            size = simulacra.RunDirectory(run.run_dir).size_bytes()
            print(f" on disk        {_bytes(size)}")
        _print_samples(run.world, sys.stdout)
    return _judge(run)


def _print_samples(world: Any, out: Any) -> None:
    """The world's sample excerpts (the social world: its longest threads), fitted to the width."""
    samples = getattr(world, "samples", None)
    threads = samples(3) if callable(samples) else []
    if not threads:
        return
    import shutil  # noqa: PLC0415
    import textwrap  # noqa: PLC0415

    width = min(shutil.get_terminal_size((80, 24)).columns, 100) if out.isatty() else 80
    print("\nsample threads (the longest mention chains):", file=out)
    for number, lines in enumerate(threads, 1):
        print(f"  {number}.", file=out)
        for line in lines:
            print(textwrap.fill(line, width=width, initial_indent="     ",
                                subsequent_indent="       ", max_lines=3, placeholder=" ..."),
                  file=out)


def run_config(target: str, overrides: Sequence[str], *, seed: int | None, out: str | None,
               progress: bool, usage_error: Callable[[str], Exception],
               as_json: bool = False, view: Any = None) -> int:
    """``simulacra run CONFIG.yaml [overrides]``: run, write the run directory, print a summary.

    *view* (``ViewOptions``) serves the live view while the run goes.
    """
    import simulacra  # noqa: PLC0415  (layer 7 uses the front door, and only when needed)

    items = list(overrides)
    if seed is not None:
        items.append(f"seed={seed}")
    try:
        config = simulacra.load_config(target, items)
    except simulacra.ConfigError as exc:
        raise usage_error(str(exc)) from None
    from simulacra.societies import default_run_dir  # noqa: PLC0415

    where = out or config.run.out or str(default_run_dir(config.name, config.seed))
    sim = config.sim
    if config.run.preflight:
        try:  # before the progress bar, the run directory or any model call
            simulacra.preflight_provider(config)
        except simulacra.ProviderUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except simulacra.ConfigError as exc:  # e.g. openai_compatible without a base_url
            raise usage_error(str(exc)) from None
    bar = _progress(progress, config,
                    f"{config.name}: {plural(sim.agents, 'agent')} x {plural(sim.steps, 'step')}")

    def call(control: Any) -> Any:
        with bar.shown():
            return simulacra.run_society(config, out=where, on_step=bar.step, on_turn=bar.turn,
                                         control=control)

    try:
        run = _society(call, where, view, name=config.name, steps=sim.steps)
    except simulacra.ConfigError as exc:
        raise usage_error(str(exc)) from None
    except simulacra.SimError as exc:
        return _failure(exc)
    if isinstance(run, int):
        return run
    return _report(config, run, resumed=False, as_json=as_json)


def _judge(run: Any) -> int:
    """EXIT_FAILED (with one line saying why) when more turns failed than the run allows."""
    failures = run.failures
    if not run.too_many_failures:
        return EXIT_OK
    limit = run.config.run.max_failed_fraction
    kinds = ", ".join(f"{kind} {count}" for kind, count in failures["by_kind"].items())
    print(f"error: {failures['failed']} of {plural(failures['turns'], 'turn')} failed "
          f"({failures['fraction']:.0%}: {kinds}), more than run.max_failed_fraction="
          f"{limit:g}; the run directory is complete: {run.run_dir}", file=sys.stderr)
    return EXIT_FAILED


def _title(config: Any, run: Any, *, resumed: bool) -> str:
    sim = config.sim
    how = "resumed, " if resumed else ""
    return (f"{config.name}: {how}{plural(sim.agents, 'agent')}, "
            f"{plural(run.result.steps, 'step')}, "
            f"{plural(run.result.event_count, 'event')} ({sim.engine.step.built_in} engine, "
            f"{sim.engine.mode}, seed {config.seed})")


def _steps(first: int, count: int) -> str:
    """Steps *first* .. *first + count - 1* as the event log numbers them: "steps 3-5"."""
    if count <= 0:
        return f"no step (from step {first})"
    return f"step {first}" if count == 1 else f"steps {first}-{first + count - 1}"


def _rate(per_s: float) -> str:
    """A rate per second as people read it: 1,074/s, 12/s, 0.2/s."""
    return f"{per_s:,.0f}/s" if per_s >= 10 else f"{per_s:.2g}/s"


def _duration_us(us: float) -> str:
    """A duration given in microseconds, in the unit that reads best: 930.9 us, 12.3 ms, 5.06 s."""
    if us < 1e3:
        return f"{us:.1f} us"
    if us < 1e6:
        return f"{us / 1e3:.1f} ms"
    return f"{us / 1e6:,.2f} s"


def _rows(config: Any, run: Any) -> dict[str, Any]:
    """The summary table: the world's summary, then what the run cost, counted once."""
    sim = config.sim
    llm = run.llm
    rows = dict(run.summary)
    failures = run.failures
    if failures.get("failed"):
        rows["failed turns"] = (f"{failures['failed']} of {failures['turns']} "
                                f"({failures['fraction']:.1%})")
        for kind, count in failures["by_kind"].items():
            first = failures["first"][kind]
            rows[f"  {kind}"] = (f"{count}; first: @{first['agent']} in step {first['step']}: "
                                 f"{first['message']}")
    scenario = getattr(run, "scenario", None) or {}
    if scenario:
        rows["scenario"] = (f"{scenario['name']} ({scenario['sha256'][:12]}): "
                            f"{scenario['applied']} of {plural(scenario['changes'], 'change')} "
                            "applied")
    sessions = llm.get("sessions", [])
    # A resumed run's totals are the whole run's (every session, the steps of each
    # counted once); what this session made and served is its own. The rows say which,
    # and the rows under "model calls" add up to it.
    resumed = len(sessions) > 1
    whole = ", whole run" if resumed else ""
    moved = llm.get("fallbacks") or []
    if moved:  # this session's calls that went to a fallback, their endpoint being down
        rows["fallbacks"] = ", ".join(f"{m['calls']} from {m['from']} to {m['to']}"
                                      for m in moved)
    rows["model calls"] = (f"{llm.get('calls', 0)}{whole} ("
                           + (f"endpoints: {', '.join(sim.llm.endpoints)}" if sim.llm.endpoints
                              else f"{sim.llm.provider}, {sim.llm.model}") + ")")
    speed = llm.get("throughput") or {}
    made, served = speed.get("calls_made", 0), speed.get("served_from_recordings", 0)
    if resumed:
        for number, session in enumerate(sessions, 1):
            last = number == len(sessions)
            who = "this session" if last else f"session {number}"
            key = f"  {who}, {_steps(int(session['from_step']), int(session['steps']))}"
            rows[key] = (f"{session['calls']}: {made} made, {served} from recordings" if last
                         else f"{session['calls']}")
    elif speed:
        rows["  made / from recordings"] = f"{made} / {served}"
    if speed:
        rate = speed.get("per_s")
        if speed.get("us_per_agent_step") is None:  # no turn resolved: no time per turn
            rate = None
        rows["agent-steps"] = (f"{speed.get('agent_steps', 0)}{whole}"
                               + ("" if rate is None else
                                  f" ({_rate(rate)}, {_duration_us(speed['us_per_agent_step'])} "
                                  "each)"))
        rows["  needing no call"] = f"{speed.get('no_call_share', 0.0):.1%}"
        if speed.get("turns_started_early"):
            rows["  started early"] = (f"{speed['turns_started_early']} (the world names who "
                                       "affects whom)")
        if speed.get("turns_committed_ahead"):
            rows["  committed ahead"] = (f"{speed['turns_committed_ahead']} (out of order: "
                                         "before the kernel reached them)")
        if speed.get("turns_carried_over"):
            rows["  carried over"] = (f"{speed['turns_carried_over']} (this session's turns "
                                      "whose calls went on past a step's end)")
        steps_taken, calls = speed.get("agent_steps", 0), llm.get("calls", 0)
        if steps_taken and calls > steps_taken:
            # Calls against events: an agent-step is a resolved turn (one event or more).
            rows["  calls per agent-step"] = (
                f"{calls / steps_taken:.2f}: a turn called more than once, or its "
                "answer came after the run's end (called, not resolved)")
    rows["tokens"] = (f"{llm.get('prompt_tokens', 0)} prompt, "
                      f"{llm.get('completion_tokens', 0)} completion{whole}")
    if llm.get("cost") and llm.get("endpoints"):
        rows["cost"] = f"{llm['cost']:.4g}{whole} (each endpoint at its own pricing)"
    elif llm.get("cost"):
        pricing = llm.get("pricing") or {}
        rows["cost"] = (f"{llm['cost']:.4g}{whole} ({pricing.get('prompt_per_mtok', 0):g} / "
                        f"{pricing.get('completion_per_mtok', 0):g} per million prompt / "
                        "completion tokens)")
    shards = (f", {sim.engine.shards} shards ({sim.engine.shard_mode})"
              if sim.engine.shards > 1 else "")
    rows["wall clock"] = (f"{run.result.wall_s:.2f} s{whole}"
                          f" ({sim.engine.mode}, concurrency {sim.engine.concurrency}{shards})")
    return rows


def resume_run(run_dir: str, *, progress: bool, overrides: Sequence[str] = (),
               from_checkpoint: int | None = None, re_record: bool = False,
               as_json: bool = False, view: Any = None) -> int:
    """``simulacra run --resume RUN_DIR``: continue a run from its last checkpoint.

    *view* (``ViewOptions``) serves the live view while it goes.
    """
    import simulacra  # noqa: PLC0415

    where = Path(run_dir)
    if not where.is_dir():
        print(f"error: run directory not found: {run_dir!r} "
              f"({'a file, not a directory' if where.exists() else 'it does not exist'}); "
              "--resume takes the directory a run wrote", file=sys.stderr)
        return EXIT_USAGE
    if not (where / "config.yaml").is_file():
        print(f"error: {run_dir!r} is not a run directory: it has no config.yaml "
              "(--resume takes the directory a run wrote)", file=sys.stderr)
        return EXIT_USAGE
    if (where / "digest.txt").is_file():  # before its servers are asked anything
        print(f"error: run directory {run_dir!r} holds a finished run; nothing to resume",
              file=sys.stderr)
        return EXIT_USAGE
    bar: _Progress | None = None
    try:
        config = simulacra.load_config(str(where / "config.yaml"), list(overrides))
        sim = config.sim
        if config.run.preflight:
            try:
                simulacra.preflight_provider(config)
            except simulacra.ProviderUnavailable as exc:
                print(f"error: {exc}", file=sys.stderr)
                return EXIT_USAGE
            except simulacra.ConfigError as exc:  # e.g. a key variable that is not set
                print(f"error: {exc}", file=sys.stderr)
                return EXIT_USAGE
        bar = shown = _Progress(progress, sim.steps, f"resume {Path(run_dir).name}",
                                unit="steps")

        def call(control: Any) -> Any:
            with shown.shown():
                return simulacra.resume_society(run_dir, on_step=shown.step, on_turn=shown.turn,
                                                from_checkpoint=from_checkpoint,
                                                re_record=re_record, overrides=tuple(overrides),
                                                control=control)

        run = _society(call, run_dir, view, name=config.name, steps=sim.steps)
    except simulacra.ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except simulacra.CheckpointError as exc:
        # Before the first step: no checkpoint to resume from, or a damaged one, or
        # recordings missing, short or damaged (bad input). Once steps ran, only
        # writing a checkpoint can fail: the run failed.
        return _failure(exc) if bar is not None and bar.began else _bad_input(exc)
    except simulacra.SimError as exc:
        return _failure(exc)
    if isinstance(run, int):
        return run
    return _report(config, run, resumed=True, as_json=as_json)


def _cmd_replay(args: argparse.Namespace) -> int:
    import simulacra  # noqa: PLC0415

    run_dir = Path(args.run_dir)
    bar: _Progress | None = None
    try:
        summary = simulacra.RunDirectory(run_dir).read_summary()
        steps = int(summary.get("steps", 0))
        bar = shown = _Progress(not args.no_progress, steps, f"replay {run_dir.name}",
                                unit="steps")
        with shown.shown():
            report = simulacra.replay_run(run_dir, overrides=tuple(args.overrides), out=args.out,
                                          on_step=shown.step, on_turn=shown.turn, check=False)
    except simulacra.ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except simulacra.RecordingError as exc:
        # Before the first turn: the recordings are not a store this simulacra reads
        # (garbage, truncated, another format): bad input. Later, a write of --out failed.
        return _failure(exc) if bar is not None and bar.began else _bad_input(exc)
    except simulacra.SimError as exc:
        return _failure(exc)
    print(f"replayed {run_dir}")
    print(f"{plural(report.calls_served, 'completion')} served from the recordings, "
          f"{plural(report.model_calls, 'model call')}")
    if not report.matches:
        if report.digest != report.expected:
            print(f"error: digest mismatch: the run ended with {report.expected}, the replay "
                  f"with {report.digest}; first difference: "
                  f"{report.divergence or 'in the final state'}", file=sys.stderr)
        else:
            print(f"error: event log mismatch: {report.divergence}", file=sys.stderr)
        return EXIT_FAILED
    print(f"digest matches: {report.digest}")
    print("the 1 event of action_events.jsonl matches" if report.event_count == 1
          else f"all {report.event_count} events of action_events.jsonl match")
    return EXIT_OK


def add_replay_command(commands: Any) -> None:
    """Add ``replay RUN_DIR`` to the ``simulacra`` subcommands."""
    replay = commands.add_parser(
        "replay",
        help="re-run a run directory from its recordings and check the digest",
        description=("Re-run a run directory's config with every model call served from its "
                     "recordings (strict: no model is called) and check that the digest "
                     "matches the run's."),
    )
    replay.add_argument("run_dir", metavar="RUN_DIR", help="a run directory of `simulacra run`")
    replay.add_argument("overrides", nargs="*", metavar="KEY.PATH=VALUE",
                        help="dotted overrides of how to run, e.g. sim.engine.mode=sequential")
    replay.add_argument("--out", metavar="DIR", help="also write the replay as a run directory")
    replay.add_argument("--no-progress", action="store_true", help="no progress bar")
    replay.set_defaults(command_fn=_cmd_replay)
