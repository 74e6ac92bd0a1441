"""The one progress bar: drawn at the first progress, stopped once, or nothing at all."""

from __future__ import annotations

from simulacra.executors import ProgressBar


def test_a_disabled_bar_does_nothing() -> None:
    bar = ProgressBar(False, 10, "study")

    bar.start()
    bar.advance(3)
    bar.update(completed=5, total=20, description="x")
    bar.stop()

    assert not bar.enabled


def test_the_bar_is_drawn_at_the_first_progress_and_not_again_after_stop() -> None:
    bar = ProgressBar(True, 10, "study", unit="turns", eta=True, completed=2)
    rich = bar._bar
    task = rich.tasks[0]
    assert (task.completed, task.total, task.description) == (2, 10, "study")
    assert not rich.live.is_started  # a command that fails its checks shows no bar

    bar.advance(3)
    assert rich.live.is_started
    bar.update(completed=7, total=12, description="step 2")
    assert (task.completed, task.total, task.description) == (7, 12, "step 2")
    bar.stop()
    assert not rich.live.is_started

    bar.advance()  # counted, never drawn again
    assert not rich.live.is_started
    assert task.completed == 8


def test_the_columns_say_the_unit_and_the_time_left_when_asked() -> None:
    def texts(bar: ProgressBar) -> list[str]:
        return [getattr(c, "text_format", "") for c in bar._bar.columns]

    assert "turns" in texts(ProgressBar(True, 1, "run", unit="turns"))
    assert "ETA" in texts(ProgressBar(True, 1, "study", eta=True))
    assert "ETA" not in texts(ProgressBar(True, 1, "run"))
