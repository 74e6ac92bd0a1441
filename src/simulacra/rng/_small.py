"""``SmallRandom``: a random stream of 32 bytes (xoshiro256++), for large populations.

A ``random.Random`` holds a Mersenne Twister of 2.5 kB. One per entity is what
keeps an entity's draws independent of the partition, but at 16,384 entities a
core that is 40 MB of generator state, and the draws of a cheap event handler
miss the cache on every event. ``SmallRandom`` is xoshiro256++ (Blackman and
Vigna; the generator behind Rust's ``SmallRng``): 256 bits of state, a period of
2**256 - 1, and the methods a model draws with. Its outputs are defined here,
bit for bit, by this pure-Python class; the compiled kernel
(``simulacra.core._ckernel``) has the same class in C, which ``simulacra.core``
installs when it loads, and the tests hold the two to identical draws.

Seeding: a seed in ``[0, 2**128)`` (a :class:`SeedTree` stream seed) is split
into its high and low 64 bits, and each half gives two state words by
SplitMix64, the seeding its authors recommend.

Methods and their definitions (``next()`` is the generator's 64-bit output):

* ``random()``: ``(next() >> 11) * 2**-53``, in ``[0, 1)``;
* ``uniform(a, b)``: ``a + (b - a) * random()``;
* ``expovariate(lambd=1.0)``: ``-log(1.0 - random()) / lambd``;
* ``getrandbits(k)``, ``0 <= k <= 64``: ``next() >> (64 - k)`` (0 for k = 0);
* ``randrange(start, stop=None, step=1)`` and ``randint(a, b)``: ``random``'s
  meaning, for integers of 64 bits; an index below ``n`` takes
  ``next() >> (64 - n.bit_length())`` until one is below ``n``;
* ``choice(seq)`` and ``shuffle(x)`` (Fisher-Yates from the end, as ``random``);
* ``getstate()``/``setstate(state)``: the four state words, a tuple of ints.

It is no base class (neither implementation may be subclassed), and a copy or
an unpickled stream is of the class installed where it is made: the compiled
one wherever the compiled kernel runs.

Not a cryptographic generator; not ``random.Random``'s stream (the same seed
gives other draws).
"""

from __future__ import annotations

from collections.abc import MutableSequence, Sequence
from math import log as _log
from typing import Any, TypeVar

__all__ = ["SmallRandom"]

_T = TypeVar("_T")
_MASK = (1 << 64) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UNIT = 1.0 / 9007199254740992.0  # 2**-53


def _splitmix(x: int) -> tuple[int, int]:
    """One SplitMix64 step: (the next counter, its output word)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return x, z ^ (z >> 31)


def _words(seed: object) -> tuple[int, int, int, int]:
    """The four state words of *seed*; TypeError or ValueError when it is no seed."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"SmallRandom seed must be an int in [0, 2**128), got "
                        f"{type(seed).__name__} {seed!r}")
    if not 0 <= seed < 1 << 128:
        raise ValueError(f"SmallRandom seed must be an int in [0, 2**128), got {seed!r}")
    x, a = _splitmix(seed >> 64)
    x, b = _splitmix(x)
    y, c = _splitmix(seed & _MASK)
    y, d = _splitmix(y)
    return a, b, c, d


def _check_int64(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"SmallRandom.{what} must be an int, got {type(value).__name__} "
                        f"{value!r}")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise OverflowError(f"SmallRandom.{what} must fit in 64 bits, got {value!r}")
    return value


def _rebuild(state: tuple[int, int, int, int]) -> Any:
    """Unpickle a SmallRandom (either implementation) from its state words."""
    stream = SmallRandom(0)  # the class installed now: compiled or pure
    stream.setstate(state)
    return stream


class SmallRandom:
    """A random stream of 32 bytes of state (xoshiro256++); see the module's docstring.

    Args:
        seed: An int in ``[0, 2**128)``.

    Raises:
        TypeError: *seed* is not an int.
        ValueError: *seed* is negative or has more than 128 bits.
    """

    __slots__ = ("_s0", "_s1", "_s2", "_s3")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # As the compiled class, which is no base type: a subclass that overrode a
        # method would draw otherwise in one of the two.
        raise TypeError("type 'simulacra.SmallRandom' is not an acceptable base type")

    def __init__(self, seed: int = 0) -> None:
        self._s0, self._s1, self._s2, self._s3 = _words(seed)

    def _next(self) -> int:
        s0, s1, s2, s3 = self._s0, self._s1, self._s2, self._s3
        total = (s0 + s3) & _MASK
        result = ((((total << 23) | (total >> 41)) & _MASK) + s0) & _MASK
        t = (s1 << 17) & _MASK
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        self._s0, self._s1, self._s2 = s0, s1, s2
        self._s3 = ((s3 << 45) | (s3 >> 19)) & _MASK
        return result

    def _below(self, n: int) -> int:
        shift = 64 - n.bit_length()
        r = self._next() >> shift
        while r >= n:
            r = self._next() >> shift
        return r

    def random(self) -> float:
        """A float in [0, 1), from the top 53 bits of one output."""
        return (self._next() >> 11) * _UNIT

    def uniform(self, a: float, b: float) -> float:
        """``a + (b - a) * random()``."""
        return a + (b - a) * self.random()

    def expovariate(self, lambd: float = 1.0) -> float:
        """An exponential draw of rate *lambd*: ``-log(1.0 - random()) / lambd``."""
        return -_log(1.0 - self.random()) / lambd

    def getrandbits(self, k: int) -> int:
        """An int of *k* random bits, ``0 <= k <= 64``."""
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"SmallRandom.getrandbits(k): k must be an int, got "
                            f"{type(k).__name__} {k!r}")
        if not 0 <= k <= 64:
            raise ValueError(f"SmallRandom.getrandbits(k): k must be in [0, 64], got {k}")
        return self._next() >> (64 - k) if k else 0

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        """A random int of ``range(start, stop, step)`` (of ``range(start)`` without *stop*)."""
        if stop is None:
            start, stop = 0, _check_int64(start, "randrange stop")
        else:
            start = _check_int64(start, "randrange start")
            stop = _check_int64(stop, "randrange stop")
        step = _check_int64(step, "randrange step")
        if step == 1:
            n = stop - start
        elif step > 0:
            n = (stop - start + step - 1) // step
        elif step < 0:
            n = (stop - start + step + 1) // step
        else:
            raise ValueError("SmallRandom.randrange: zero step")
        if n <= 0:
            raise ValueError(f"SmallRandom.randrange: empty range ({start}, {stop}, {step})")
        return start + step * self._below(n)

    def randint(self, a: int, b: int) -> int:
        """A random int of ``[a, b]``, both included."""
        b = _check_int64(b, "randint b")
        if b == _INT64_MAX:
            raise OverflowError("SmallRandom.randint b must be below 2**63 - 1")
        return self.randrange(a, b + 1)

    def choice(self, seq: Sequence[_T]) -> _T:
        """A random element of the non-empty sequence *seq*."""
        n = len(seq)
        if not n:
            raise IndexError("Cannot choose from an empty sequence")
        return seq[self._below(n)]

    def shuffle(self, x: MutableSequence[Any]) -> None:
        """Shuffle *x* in place (Fisher-Yates from the end, as ``random.shuffle``)."""
        for i in range(len(x) - 1, 0, -1):
            j = self._below(i + 1)
            x[i], x[j] = x[j], x[i]

    def getstate(self) -> tuple[int, int, int, int]:
        """The four 64-bit state words."""
        return (self._s0, self._s1, self._s2, self._s3)

    def setstate(self, state: tuple[int, int, int, int]) -> None:
        """Continue from *state*, four ints in ``[0, 2**64)``, not all zero."""
        words: Any = state  # checked here: any object may come in
        if not isinstance(words, (tuple, list)) or len(words) != 4:
            raise TypeError(f"SmallRandom state must be a tuple of 4 ints, got "
                            f"{type(state).__name__} {state!r}"[:200])
        for word in words:
            if isinstance(word, bool) or not isinstance(word, int):
                raise TypeError(f"SmallRandom state must be a tuple of 4 ints, got "
                                f"{type(word).__name__} {word!r} in it"[:200])
            if not 0 <= word <= _MASK:
                raise ValueError(f"SmallRandom state words must be in [0, 2**64), got {word}")
        if not any(words):
            raise ValueError("SmallRandom state must not be all zero")
        self._s0, self._s1, self._s2, self._s3 = (int(word) for word in words)

    def __reduce__(self) -> tuple[Any, tuple[tuple[int, int, int, int]]]:
        return _rebuild, (self.getstate(),)

    def __repr__(self) -> str:
        return "SmallRandom(<xoshiro256++>)"


#: The pure-Python class, kept under its own name when the compiled one is installed.
PySmallRandom = SmallRandom


def install(compiled: Any) -> None:
    """Serve ``SmallRandom`` from the compiled kernel's class (called by simulacra.core)."""
    global SmallRandom  # noqa: PLW0603
    SmallRandom = compiled  # type: ignore[misc]
