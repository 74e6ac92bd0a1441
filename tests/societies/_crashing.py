"""A world factory for the resume tests: the social world, whose process dies at a given step.

``crash_at`` (a world parameter) makes ``probe(step)`` kill the process with
``os._exit`` after that step -- a crash, with no clean-up, in the middle of a run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

SOCIAL = Path(__file__).resolve().parents[2] / "examples" / "social"
if str(SOCIAL) not in sys.path:
    sys.path.insert(0, str(SOCIAL))

import model as social  # noqa: E402
from world import SocialWorld  # noqa: E402


class CrashingWorld(SocialWorld):
    crash_at: int | None = None

    _NOT_STATE = SocialWorld._NOT_STATE | {"crash_at"}

    def probe(self, step: int) -> dict[str, Any]:
        if self.crash_at is not None and step == self.crash_at:
            sys.stdout.flush()
            os._exit(9)
        return super().probe(step)


def build(*, crash_at: int | None = None, **kwargs: Any) -> tuple[SocialWorld, list[Any]]:
    world, agents = social.build(**kwargs)
    crashing = CrashingWorld.__new__(CrashingWorld)
    crashing.__dict__.update(world.__dict__)
    crashing.crash_at = crash_at
    return crashing, agents
