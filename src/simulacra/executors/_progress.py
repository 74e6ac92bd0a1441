"""A progress bar on stderr for work that is counted: replications, turns, steps.

One bar for every command that shows one (``simulacra experiment``,
``simulacra run CONFIG.yaml``, ``--resume``, ``replay``): the same columns in
the same order, drawn by ``rich``, which is imported when a bar is made.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["ProgressBar"]


class ProgressBar:
    """A rich progress bar on stderr, or nothing at all.

    The columns: the description, the bar, ``done/total``, the *unit* (when
    given), the time elapsed, and with *eta* the time remaining. The bar is
    drawn at :meth:`start`, or at the first :meth:`advance` or :meth:`update`,
    not before: a command that fails its checks prints its one error line and
    no bar. Every method may be called from any thread.

    Args:
        enabled: Whether to show a bar at all (a disabled bar does nothing).
        total: The count the bar goes to.
        description: The text before the bar.
        unit: The word after ``done/total`` (``"turns"``, ``"windows"``).
        eta: Show the time remaining.
        completed: The count already done when the bar starts (read back
            from an earlier, interrupted run).
    """

    __slots__ = ("_bar", "_lock", "_started", "_task")

    def __init__(self, enabled: bool, total: int, description: str, *, unit: str | None = None,
                 eta: bool = False, completed: int = 0) -> None:
        self._bar: Any = None
        self._task: Any = None
        self._lock = threading.Lock()
        self._started = False
        if not enabled:
            return
        try:
            from rich.console import Console  # noqa: PLC0415
            from rich.progress import (  # noqa: PLC0415
                BarColumn,
                MofNCompleteColumn,
                Progress,
                ProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
        except ImportError:  # pragma: no cover (rich is a dependency)
            return
        columns: list[ProgressColumn] = [TextColumn("{task.description}"), BarColumn(),
                                         MofNCompleteColumn()]
        if unit is not None:
            columns.append(TextColumn(unit))
        columns.append(TimeElapsedColumn())
        if eta:
            columns += [TextColumn("ETA"), TimeRemainingColumn()]
        self._bar = Progress(*columns, console=Console(stderr=True), transient=False)
        self._task = self._bar.add_task(description, total=total, completed=completed)

    @property
    def enabled(self) -> bool:
        """Whether there is a bar to draw (it was asked for, and rich is installed)."""
        return self._bar is not None

    def start(self) -> None:
        """Draw the bar now (once; later calls do nothing)."""
        if self._bar is None:
            return
        with self._lock:
            if not self._started:
                self._started = True
                self._bar.start()

    def advance(self, count: int = 1) -> None:
        """Move the bar on by *count*."""
        if self._bar is not None:
            self.start()
            self._bar.advance(self._task, count)

    def update(self, *, completed: int | None = None, total: int | None = None,
               description: str | None = None) -> None:
        """Set what is done, the total or the description (those given)."""
        if self._bar is not None:
            self.start()
            self._bar.update(self._task, completed=completed, total=total,
                             description=description)

    def stop(self) -> None:
        """Stop drawing, leaving the bar's last state on the terminal; it is not drawn again."""
        if self._bar is None:
            return
        with self._lock:
            if self._started:
                self._bar.stop()
            self._started = True  # a bar never drawn stays undrawn
