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

from ._seed import SEED_SCHEME as SEED_SCHEME
from ._seed import SeedTree as SeedTree
from ._seed import as_seed_tree as as_seed_tree
from ._seed import derive_seed as derive_seed
from ._streams import Streams as Streams

__all__ = ["SEED_SCHEME", "SeedTree", "Streams", "as_seed_tree", "derive_seed"]

claim_public_module(__name__, globals())
