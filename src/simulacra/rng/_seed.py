r"""The seed tree: every seed in a study is derived from one master seed by a path.

A seed is never drawn from another generator and never depends on the order in
which things were created: it is a pure function of ``(master seed, path)``.

The derivation (scheme ``simulacra.seed.v1``) is part of the public contract and
is pinned by known-answer tests. It is::

    item(tag, payload) = tag                              # 1 ASCII byte
                       + len(payload).to_bytes(8, "big")  # unsigned length prefix
                       + payload

    int n   -> item(b"i", sign + magnitude)
               sign      = b"\x00" if n >= 0 else b"\x01"
               magnitude = abs(n) as big-endian bytes of minimal length (0 -> b"")
    str s   -> item(b"s", s.encode("utf-8"))               # no Unicode normalisation
    bytes b -> item(b"b", b)

    message = item(SEED_SCHEME) + item(master_seed) + item(path[0]) + item(path[1]) + ...
    seed    = int.from_bytes(sha256(message).digest()[:16], "big")   # in [0, 2**128)

The scheme tag comes first, so the hash is domain-separated from any other use
of SHA-256; each item carries its type and length, so the encoding is
injective: ``("1",)`` and ``(1,)`` differ, and so do ``("a", "bc")`` and
``("ab", "c")``. ``bool`` is rejected everywhere (``True == 1`` would make two
spellings of one path), as are ``float``, ``None`` and every other type.
"""

from __future__ import annotations

import hashlib
import importlib
import operator
import random
import secrets
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from simulacra._util import install_hint
from simulacra.errors import ConfigError

if TYPE_CHECKING:
    from numpy.random import Generator

    from ._small import SmallRandom

__all__ = ["SEED_SCHEME", "SeedTree", "as_seed_tree", "derive_seed"]

SEED_SCHEME = "simulacra.seed.v1"
"""The version and domain tag hashed first into every derived seed."""

_STREAM_TAG = "stream"  # SeedTree.stream(name) is seeded by path + ("stream", name)
_NP_STREAM_TAG = "np_stream"  # SeedTree.np_rng(name) is seeded by path + ("np_stream", name)
_SMALL_STREAM_TAG = "small_stream"  # SeedTree.small_rng(name): path + ("small_stream", name)

_LEN = 8  # bytes in the big-endian length prefix of every item


def _item(tag: bytes, payload: bytes) -> bytes:
    return tag + len(payload).to_bytes(_LEN, "big") + payload


def _encode_int(value: int) -> bytes:
    magnitude = -value if value < 0 else value
    sign = b"\x01" if value < 0 else b"\x00"
    return _item(b"i", sign + magnitude.to_bytes((magnitude.bit_length() + 7) // 8, "big"))


def _encode_str(value: str, field: str) -> bytes:
    try:
        return _item(b"s", value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"{field} must be a str encodable as UTF-8, got {value!r} ({exc.reason})"
        ) from None


_SCHEME_ITEM = _item(b"s", SEED_SCHEME.encode("utf-8"))


def _reject(field: str, value: object, expected: str) -> NoReturn:
    raise ConfigError(f"{field} must be {expected}, got {type(value).__name__} {value!r}")


def _check_master(value: object, field: str = "master_seed") -> int | str | bytes:
    """Return *value* as a valid master seed (int, str or bytes) or raise ConfigError."""
    if isinstance(value, bytes):
        return bytes(value)
    return _check_element(value, field, "an int, str or bytes")


def _check_element(value: object, field: str, expected: str = "an int or a str") -> int | str:
    """Return *value* as a valid path element (int or str) or raise ConfigError.

    *expected* names what the field takes, in the error (a master seed may also be bytes).
    """
    if isinstance(value, bool):
        _reject(field, value, f"{expected} (bool is ambiguous: True == 1)")
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str.__str__(value)  # a plain str, even for a subclass
    if not isinstance(value, float) and hasattr(type(value), "__index__"):
        try:
            return operator.index(value)  # type: ignore[arg-type]  # e.g. numpy.int64
        except TypeError:
            pass
    return _reject(field, value, expected)


def _check_path(path: tuple[object, ...], offset: int = 0) -> tuple[int | str, ...]:
    return tuple(_check_element(v, f"path[{i}]") for i, v in enumerate(path, offset))


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        _reject("name", name, "a non-empty str (the stream name)")
    return name


def _hash_path(master_seed: int | str | bytes, path: tuple[int | str, ...]) -> Any:
    """SHA-256 so far over the scheme, *master_seed* and *path* (already-validated parts)."""
    h = hashlib.sha256(_SCHEME_ITEM)
    if isinstance(master_seed, int):
        h.update(_encode_int(master_seed))
    elif isinstance(master_seed, str):
        h.update(_encode_str(master_seed, "master_seed"))
    else:
        h.update(_item(b"b", master_seed))
    for i, element in enumerate(path):
        if isinstance(element, int):
            h.update(_encode_int(element))
        else:
            h.update(_encode_str(element, f"path[{i}]"))
    return h


def _derive(master_seed: int | str | bytes, path: tuple[int | str, ...]) -> int:
    """Derive a seed from already-validated parts."""
    return int.from_bytes(_hash_path(master_seed, path).digest()[:16], "big")


def derive_seed(master_seed: int | str | bytes, *path: int | str) -> int:
    """Derive the 128-bit seed of *path* under *master_seed*.

    The result is the first 16 bytes (big-endian) of SHA-256 over the canonical
    encoding of ``(SEED_SCHEME, master_seed, *path)`` described in this
    module's docstring. It is the same on every platform, Python version and
    process (no salted ``hash()`` is involved).

    Args:
        master_seed: The study's master seed: an int (any sign or size), a str
            or bytes.
        *path: The path below the master seed, e.g. ``"config", 3,
            "replication", 17``. Each element is an int or a str; ``"1"`` and
            ``1`` are different paths.

    Returns:
        An int in ``[0, 2**128)``.

    Raises:
        ConfigError: *master_seed* or a path element is a bool, float, None or
            any other unsupported type; the message names the position.
    """
    return _derive(_check_master(master_seed), _check_path(path))


def _child_streams(head: Any, tail: bytes, at: int,
                   indices: Iterable[int | str]) -> Iterator[random.Random]:
    for index in indices:
        element = _check_element(index, f"path[{at}]")
        h = head.copy()
        h.update(_encode_int(element) if isinstance(element, int)
                 else _encode_str(element, f"path[{at}]"))
        h.update(tail)
        yield random.Random(int.from_bytes(h.digest()[:16], "big"))


class SeedTree:
    """An immutable node in the seed tree of one study.

    ``SeedTree(master_seed)`` is the root; :meth:`child` goes down by a path.
    Two nodes are equal when their master seed and path are equal; the hash is
    derived from :attr:`seed`, so it is the same in every process. Nodes are
    plain data and pickle as ``(master_seed, path)``.

    Example::

        root = SeedTree(20250611)
        rep = root.config(3).replication(17)  # == root.child("config", 3, "replication", 17)
        arrivals = rep.stream("arrivals")     # seeded by rep.child("stream", "arrivals").seed

    Args:
        master_seed: The study's master seed (int, str or bytes; not bool).
        _path: The path from the root to this node. Use :meth:`child` instead
            of passing it.

    Raises:
        ConfigError: An argument has an unsupported type.
    """

    __slots__ = ("_master_seed", "_path", "_seed")

    _master_seed: int | str | bytes
    _path: tuple[int | str, ...]
    _seed: int | None

    def __init__(self, master_seed: int | str | bytes, _path: tuple[int | str, ...] = ()) -> None:
        if not isinstance(_path, tuple | list):
            _reject("path", _path, "a tuple of ints and strs")
        object.__setattr__(self, "_master_seed", _check_master(master_seed))
        object.__setattr__(self, "_path", _check_path(tuple(_path)))
        object.__setattr__(self, "_seed", None)

    @classmethod
    def _trusted(cls, master_seed: int | str | bytes, path: tuple[int | str, ...]) -> SeedTree:
        """Build a node from parts that are already validated."""
        node = object.__new__(cls)
        object.__setattr__(node, "_master_seed", master_seed)
        object.__setattr__(node, "_path", path)
        object.__setattr__(node, "_seed", None)
        return node

    @property
    def master_seed(self) -> int | str | bytes:
        """The master seed at the root of this tree."""
        return self._master_seed

    @property
    def path(self) -> tuple[int | str, ...]:
        """The path from the root to this node (``()`` for the root)."""
        return self._path

    @property
    def seed(self) -> int:
        """This node's 128-bit seed: ``derive_seed(master_seed, *path)`` (computed once)."""
        seed = self._seed
        if seed is None:
            seed = _derive(self._master_seed, self._path)
            object.__setattr__(self, "_seed", seed)
        return seed

    def child(self, *path: int | str) -> SeedTree:
        """Return the node at ``self.path + path``.

        ``tree.child(a).child(b) == tree.child(a, b)``.

        Raises:
            ConfigError: A path element is not an int or a str (bool rejected).
        """
        return SeedTree._trusted(self._master_seed, self._path + _check_path(path))

    def replication(self, index: int) -> SeedTree:
        """Return ``child("replication", index)``: the node of one replication.

        Raises:
            ConfigError: *index* is not a non-negative int.
        """
        return self.child("replication", _check_index(index))

    def config(self, index: int) -> SeedTree:
        """Return ``child("config", index)``: the node of one configuration.

        Raises:
            ConfigError: *index* is not a non-negative int.
        """
        return self.child("config", _check_index(index))

    def stream(self, name: str) -> random.Random:
        """Return a NEW ``random.Random`` for the stream *name* of this node.

        It is seeded with ``derive_seed(master_seed, *path, "stream", name)``,
        i.e. ``self.child("stream", name).seed``. Every call returns a fresh
        generator at the start of the stream; to keep one generator per name,
        use :class:`~simulacra.rng.Streams`.

        Raises:
            ConfigError: *name* is not a non-empty str.
        """
        return random.Random(self._stream_seed(_STREAM_TAG, name))

    def child_streams(self, label: int | str, indices: Iterable[int | str],
                      name: str) -> Iterator[random.Random]:
        """``self.child(label, i).stream(name)`` for each i of *indices*, lazily.

        The same generators, for a population: the part of the seed's hash
        that every index shares is computed once, so a million agents' streams
        cost a million short hashes (a fifth of the cost of going through
        :meth:`child` and :meth:`stream` for each).

        Raises:
            ConfigError: *label*, an index or *name* has an unsupported type.
        """
        (label,) = _check_path((label,))
        tail = _encode_str(_STREAM_TAG, "path") + _encode_str(_check_name(name), "name")
        head = _hash_path(self._master_seed, (*self._path, label))
        return _child_streams(head, tail, len(self._path) + 1, indices)

    def np_rng(self, name: str) -> Generator:
        """Return a NEW ``numpy.random.Generator`` (PCG64) for the stream *name*.

        It is seeded with ``derive_seed(master_seed, *path, "np_stream", name)``:
        a separately tagged seed, so the numpy stream and the ``random.Random``
        stream of the same name are derived independently. numpy is imported
        only when this is called.

        Raises:
            ConfigError: *name* is not a non-empty str, or numpy is not installed.
        """
        np_random = _import_numpy_random()
        seed = self._stream_seed(_NP_STREAM_TAG, name)
        generator: Generator = np_random.Generator(np_random.PCG64(seed))
        return generator

    def small_rng(self, name: str) -> SmallRandom:
        """Return a NEW :class:`~simulacra.rng.SmallRandom` for the stream *name*.

        32 bytes of state (xoshiro256++) where ``stream`` holds 2.5 kB: one per
        entity of a large population. Seeded with ``derive_seed(master_seed,
        *path, "small_stream", name)``, a tag of its own, so its draws are
        independent of ``stream(name)``'s.

        Raises:
            ConfigError: *name* is not a non-empty str.
        """
        from . import _small  # noqa: PLC0415  (the class installed now: compiled or pure)

        stream: SmallRandom = _small.SmallRandom(self._stream_seed(_SMALL_STREAM_TAG, name))
        return stream

    def _stream_seed(self, tag: str, name: str) -> int:
        return _derive(self._master_seed, (*self._path, tag, _check_name(name)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SeedTree):
            return NotImplemented
        return (
            type(self._master_seed) is type(other._master_seed)
            and self._master_seed == other._master_seed
            and self._path == other._path
        )

    def __hash__(self) -> int:
        return hash(self.seed)

    def __repr__(self) -> str:
        if self._path:
            return f"SeedTree({self._master_seed!r}, path={self._path!r})"
        return f"SeedTree({self._master_seed!r})"

    def __reduce__(self) -> tuple[type[SeedTree], tuple[int | str | bytes, tuple[int | str, ...]]]:
        return (SeedTree, (self._master_seed, self._path))

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"SeedTree is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"SeedTree is immutable; cannot delete {name!r}")


def _check_index(index: object) -> int:
    checked = _check_element(index, "index")
    if not isinstance(checked, int) or checked < 0:
        _reject("index", index, "a non-negative int")
    return checked


def _import_numpy_random() -> Any:
    """Import ``numpy.random`` on first use; numpy is an optional dependency."""
    try:
        return importlib.import_module("numpy.random")
    except ImportError:
        raise ConfigError(
            f"np_rng needs numpy, which is not installed: {install_hint('numpy')}"
        ) from None


def as_seed_tree(seed: int | str | bytes | SeedTree | None) -> SeedTree:
    """Turn any accepted ``seed=`` argument into a :class:`SeedTree`.

    A ``SeedTree`` is returned as is; an int, str or bytes becomes the root
    ``SeedTree(seed)``. ``None`` draws a fresh 128-bit master seed from OS
    entropy (:mod:`secrets`): the run is then NOT reproducible unless the
    returned tree's ``master_seed`` is recorded.

    Raises:
        ConfigError: *seed* is a bool, float or another unsupported type.
    """
    if isinstance(seed, SeedTree):
        return seed
    if seed is None:
        return SeedTree._trusted(secrets.randbits(128), ())
    return SeedTree._trusted(_check_master(seed, "seed"), ())
