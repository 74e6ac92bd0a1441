"""Named random streams owned by one simulation."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from simulacra.errors import ConfigError

from ._seed import SeedTree, _check_name

if TYPE_CHECKING:
    from numpy.random import Generator

    from ._small import SmallRandom

__all__ = ["Streams"]

_PY_KEY = "random:"  # getstate() key prefix of a random.Random stream
_NP_KEY = "numpy:"  # getstate() key prefix of a numpy Generator stream
_SMALL_KEY = "small:"  # getstate() key prefix of a SmallRandom stream


def _check_state(key: str, kind: str, setstate: Any, value: object) -> None:
    """Set *value* on a scratch stream; ConfigError naming *key* if it is no *kind* state."""
    try:
        setstate(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"state[{key!r}] must be a {kind} state, got {type(value).__name__} ({exc})"
        ) from None


class Streams:
    """Named random streams owned by one simulation, created on first use.

    ``rng(name)`` is a ``random.Random`` seeded by ``root.stream(name)``;
    ``np_rng(name)`` is a numpy ``Generator`` seeded by ``root.np_rng(name)``;
    ``small_rng(name)`` is a :class:`SmallRandom` (32 bytes of state) seeded
    by ``root.small_rng(name)``.
    Each stream is derived from its path, so creating streams in a different
    order, or adding a new one, never changes the draws of another.

    A ``Streams`` belongs to one simulation (one thread); it takes no locks.

    Args:
        root: The seed-tree node of the simulation that owns the streams.

    Raises:
        ConfigError: *root* is not a :class:`SeedTree`.
    """

    __slots__ = ("_np", "_py", "_root", "_small")

    _root: SeedTree
    _py: dict[str, random.Random]
    _np: dict[str, Generator]
    _small: dict[str, SmallRandom]

    def __init__(self, root: SeedTree) -> None:
        if not isinstance(root, SeedTree):
            raise ConfigError(
                f"root must be a SeedTree, got {type(root).__name__} {root!r}"
                " (use simulacra.rng.as_seed_tree(seed) to build one)"
            )
        self._root = root
        self._py = {}
        self._np = {}
        self._small = {}

    @property
    def root(self) -> SeedTree:
        """The seed-tree node every stream is derived from."""
        return self._root

    def rng(self, name: str) -> random.Random:
        """Return the ``random.Random`` stream *name*, creating it on first use.

        The same object is returned on every call with the same name.

        Raises:
            ConfigError: *name* is not a non-empty str.
        """
        try:
            return self._py[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name, rejected below
            pass
        stream = self._root.stream(_check_name(name))
        self._py[name] = stream
        return stream

    def np_rng(self, name: str) -> Generator:
        """Return the numpy ``Generator`` stream *name*, creating it on first use.

        The same object is returned on every call with the same name. Its
        seed is tagged apart from ``rng(name)``'s (see ``SeedTree.np_rng``).

        Raises:
            ConfigError: *name* is not a non-empty str, or numpy is not installed.
        """
        try:
            return self._np[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name, rejected below
            pass
        generator = self._root.np_rng(_check_name(name))
        self._np[name] = generator
        return generator

    def small_rng(self, name: str) -> SmallRandom:
        """Return the :class:`SmallRandom` stream *name*, creating it on first use.

        The same object is returned on every call with the same name. Its
        seed is tagged apart from ``rng(name)``'s (see ``SeedTree.small_rng``).

        Raises:
            ConfigError: *name* is not a non-empty str.
        """
        stream = self._small.get(name) if type(name) is str else None
        if stream is None:  # made on first use; root.small_rng checks the name
            stream = self._small[name] = self._root.small_rng(name)
        return stream

    def names(self) -> list[str]:
        """Return the sorted names of every stream created so far (all kinds)."""
        return sorted(self._py.keys() | self._np.keys() | self._small.keys())

    def getstate(self) -> dict[str, object]:
        """Return the state of every stream created so far, for a checkpoint.

        Keys are ``"random:<name>"`` (value: ``random.Random.getstate()``),
        ``"numpy:<name>"`` (value: ``Generator.bit_generator.state``) and
        ``"small:<name>"`` (value: ``SmallRandom.getstate()``), so the kinds
        never clash. The result is plain, picklable data and shares
        nothing mutable with the live streams.
        """
        state: dict[str, object] = {}
        for name in sorted(self._py):
            state[_PY_KEY + name] = self._py[name].getstate()
        for name in sorted(self._np):
            state[_NP_KEY + name] = self._np[name].bit_generator.state
        for name in sorted(self._small):
            state[_SMALL_KEY + name] = self._small[name].getstate()
        return state

    def setstate(self, state: Mapping[str, object]) -> None:
        """Restore every stream to the checkpoint *state* from :meth:`getstate`.

        Streams named in *state* continue exactly where they were when it was
        taken. Streams that exist now but are absent from *state* did not exist
        at the checkpoint, so they are reset to the start of their stream (as
        if created fresh). Existing generator objects are updated in place, so
        references held by model code stay valid. Nothing changes if *state*
        is invalid.

        Raises:
            ConfigError: *state* is not a mapping, a key is not
                ``"random:<name>"`` / ``"numpy:<name>"`` / ``"small:<name>"``, or a value is not a
                valid state for its kind of stream.
        """
        if not isinstance(state, Mapping):
            raise ConfigError(
                f"state must be a mapping from Streams.getstate(), got {type(state).__name__}"
            )
        # Validate everything on scratch generators first, so a bad entry changes nothing.
        py_states: dict[str, Any] = {}
        np_states: dict[str, Any] = {}
        small_states: dict[str, Any] = {}
        entries: Iterable[tuple[object, object]] = state.items()  # keys unchecked until here
        for key, value in entries:
            if isinstance(key, str) and key.startswith(_PY_KEY) and len(key) > len(_PY_KEY):
                _check_state(key, "random.Random", random.Random().setstate, value)
                py_states[key[len(_PY_KEY) :]] = value
            elif isinstance(key, str) and key.startswith(_NP_KEY) and len(key) > len(_NP_KEY):
                name = key[len(_NP_KEY) :]
                scratch_np = self._np.get(name)
                if scratch_np is None:
                    scratch_np = self._root.np_rng(name)
                saved = scratch_np.bit_generator.state
                try:
                    scratch_np.bit_generator.state = value  # type: ignore[assignment]
                except (TypeError, ValueError, KeyError) as exc:
                    raise ConfigError(
                        f"state[{key!r}] must be a numpy bit_generator state, got"
                        f" {type(value).__name__} ({exc!r})"
                    ) from None
                finally:
                    scratch_np.bit_generator.state = saved
                np_states[name] = value
            elif (isinstance(key, str) and key.startswith(_SMALL_KEY)
                  and len(key) > len(_SMALL_KEY)):
                name = key[len(_SMALL_KEY):]
                _check_state(key, "SmallRandom", self._root.small_rng(name).setstate, value)
                small_states[name] = value
            else:
                raise ConfigError(
                    f"state key {key!r} must be 'random:<name>', 'numpy:<name>' or"
                    " 'small:<name>' as produced by Streams.getstate()"
                )
        for name, py_stream in self._py.items():
            if name not in py_states:
                py_stream.setstate(self._root.stream(name).getstate())
        for name, value in py_states.items():
            self.rng(name).setstate(value)
        for name, generator in self._np.items():
            if name not in np_states:
                generator.bit_generator.state = self._root.np_rng(name).bit_generator.state
        for name, value in np_states.items():
            self.np_rng(name).bit_generator.state = value
        for name, small in self._small.items():
            if name not in small_states:
                small.setstate(self._root.small_rng(name).getstate())
        for name, value in small_states.items():
            self.small_rng(name).setstate(value)

    def __repr__(self) -> str:
        return f"Streams({self._root!r}, names={self.names()!r})"
