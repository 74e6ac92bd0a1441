"""Seed tree and named random streams: where every random draw in simulacra comes from.

Layer 0. A study has one master seed; every stream is derived from it by a
*path* (``config/3 -> replication/17 -> stream "arrivals"``) with SHA-256
(scheme ``simulacra.seed.v1``), so the same ``(master seed, config,
replication)`` gives the same draws on every backend, worker count and
creation order. Nothing here touches the global ``random`` generator.

This package imports only the standard library (and ``simulacra.errors``);
numpy is optional and imported only when a numpy stream is requested.
"""

from simulacra._util import claim_public_module

from . import _small
from ._seed import SEED_SCHEME as SEED_SCHEME
from ._seed import SeedTree as SeedTree
from ._seed import as_seed_tree as as_seed_tree
from ._seed import derive_seed as derive_seed
from ._small import SmallRandom as SmallRandom
from ._streams import Streams as Streams


def install_small_random(compiled: type) -> None:
    """Serve ``SmallRandom`` from the compiled kernel's class (``simulacra.core`` calls it)."""
    _small.install(compiled)
    globals()["SmallRandom"] = compiled


__all__ = ["SEED_SCHEME", "SeedTree", "SmallRandom", "Streams", "as_seed_tree", "derive_seed"]

claim_public_module(__name__, globals())
