"""A social world whose first agent SIGKILLs its own process at a step: for the chaos tests.

The kill happens only where *variable* is "1" (a shard's process, a Dask worker), never in
the run's own process; with *once*, only the first time (the file marks it done).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def killing_model(variable: str, once: Path | None = None) -> str:
    """The source of ``killing.py``, whose ``build(kill_at=...)`` wraps the social demo's."""
    guard = "" if once is None else f" and not os.path.exists({str(once)!r})"
    mark = "" if once is None else f"open({str(once)!r}, 'w').close()"
    return textwrap.dedent(f"""\
        import os, signal, sys
        sys.path.insert(0, {str(ROOT / 'examples' / 'social')!r})
        import model as social

        def build(kill_at=None, **kwargs):
            world, agents = social.build(**kwargs)
            first = agents[0]

            class Killing(type(first)):
                def act(self, spec):
                    if (spec.step == kill_at and os.environ.get({variable!r}) == "1"{guard}):
                        {mark}
                        os.kill(os.getpid(), signal.SIGKILL)
                    return super().act(spec)

            first.__class__ = Killing
            return world, agents
        """)
