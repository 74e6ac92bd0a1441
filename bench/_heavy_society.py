"""The social demo with CPU-bound turns: each agent thinks for ``think_us`` microseconds.

``bench/society_shards.py`` names this factory: the turn's own work (a loop of
SHA-256 over the agent's last observation, as much as takes about ``think_us``
on one core) is done before the social agent's usual turn, so that the turns,
not the model calls, dominate the run and shards have something to share.
The digest is the social demo's: the thinking changes nothing the world sees.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

SOCIAL = Path(__file__).resolve().parents[1] / "examples" / "social"


def _social_package() -> Any:
    """examples/social as a package of its own name: bench/ has an agents.py and a social.py."""
    name = "_simulacra_bench_social"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, SOCIAL / "__init__.py", submodule_search_locations=[str(SOCIAL)])
        assert spec is not None
        assert spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules[name] = package
        spec.loader.exec_module(package)
    return importlib.import_module(name + ".model"), importlib.import_module(name + ".agents")


social, _agents = _social_package()
SocialAgent = _agents.SocialAgent

#: SHA-256 rounds of a 64-byte block per microsecond on one core (about; calibrated
#: once per process by _rounds_per_us).
_RATE: list[float] = []


def _rounds_per_us() -> float:
    if not _RATE:
        block = b"x" * 64
        start = time.perf_counter()
        for _ in range(20_000):
            block = hashlib.sha256(block).digest()
        _RATE.append(20_000 / ((time.perf_counter() - start) * 1e6))
    return _RATE[0]


class ThinkingAgent(SocialAgent):  # type: ignore[misc, valid-type]
    """A social agent that thinks (hashes) for a while before its usual turn."""

    rounds = 1

    def act(self, spec: Any) -> Any:
        block = repr(self.observation).encode()[:64]
        for _ in range(self.rounds):
            block = hashlib.sha256(block).digest()
        return super().act(spec)


def build(*, think_us: float = 1000.0, **kwargs: Any) -> tuple[Any, list[Any]]:
    world, agents = social.build(**kwargs)
    ThinkingAgent.rounds = max(1, int(think_us * _rounds_per_us()))
    for agent in agents:
        agent.__class__ = ThinkingAgent
    return world, agents
