"""The discrete-event kernel (layer 1): ``Sim``, events, processes, conditions, interrupts.

It imports only the standard library and layer 0 (``simulacra.errors``,
``simulacra.rng``). One ``Sim`` belongs to one thread; the kernel takes no locks.

Low-level extension API, for layer-2 resources and nothing else: every event in
the hot loop is an :class:`Event`; a resource marks its own events by setting
the ``_owner`` slot to itself and keeps per-event data in ``_data``. An owner
may define ``_exit_request(event, exc_type)``, which ``with event:`` calls on
exit -- except for an owner with a ``_marker`` event (a Resource), whose
release at the end of ``with res.request()`` the kernel inlines: such an owner
keeps granted requests in ``users`` and busy time in ``_busy``, cancels a
waiting request with ``_cancel(request, now)``, and has its ``_marker``
scheduled as the release event (see ``Event.__exit__``). Events are made
with ``Sim.event()`` and triggered with ``succeed``; on hot paths a resource
may instead set ``_value``/``_ok`` and call ``sim._now_append(event)``
itself, which is exactly what ``succeed`` does.
For ``simulacra.parallel`` (conservative PDES), a keyed Sim also offers
``sim._next_key()`` (reserve the key of the next normal event of the current
origin), ``sim._schedule_keyed(event, when, key)`` (schedule a triggered
event with such a key) and ``sim._cur_key`` (the key of the event being
processed). A layer-2 module may keep data of its own per Sim in
``sim._extras`` (None, or a dict of it keyed by the module's name): it is held
by the Sim and goes with it. A layer that hands a failed event's exception on
as the kernel does (offload, pausable agents) copies it with
:func:`copy_failure`. Nothing else in the kernel is for use outside it.

Two kernels, one set of classes: ``SIMULACRA_KERNEL=auto|compiled|python``
(default ``auto``) chooses whether the compiled fast paths of ``_ckernel``
(a C extension built by ``pip install`` where a compiler is present) are put
into these classes at import; :data:`KERNEL` says which runs. Everything off
the fast paths is the Python code in ``_kernel``, so there is only ever one
``Sim``, ``Event`` and ``Process`` class in a process (see docs/design.md,
"Compiled kernel").
"""

import os as _os
import sys as _sys
from collections.abc import Callable as _Callable
from types import ModuleType as _ModuleType
from typing import Any as _Any

from simulacra.errors import ConfigError as _ConfigError
from simulacra.errors import Interrupt as Interrupt

from . import _kernel as _pure
from ._kernel import NORMAL as NORMAL
from ._kernel import PENDING as PENDING
from ._kernel import URGENT as URGENT
from ._kernel import ConditionValue as ConditionValue
from ._kernel import Event as Event
from ._kernel import Process as Process
from ._kernel import ProcessGenerator as ProcessGenerator
from ._kernel import Sim as Sim
from ._kernel import TieStats as TieStats
from ._kernel import Tracer as Tracer


def _rebuild_times(items: list[float]) -> list[float]:
    """A Sim's heap of future times, from a pickle or a deep copy, of this process's kernel.

    The compiled kernel's heap is a C type of its own; it pickles as the list of
    its items in heap order, which pushed one by one in that order is the same heap.
    """
    heap = _pure._new_times()
    push = getattr(_pure, "heappush")  # noqa: B009  (heapq's, or the compiled kernel's)
    for item in items:
        push(heap, item)
    return heap


def _rebuild_buckets(items: list[tuple[float, _Any]]) -> dict[float, _Any]:
    """A Sim's map from future times to their events, from a pickle or a deep copy.

    The compiled kernel's map is a C type of its own; it pickles as the list of its
    (time, events) pairs and is rebuilt as this process's kernel makes it.
    """
    buckets = _pure._new_buckets()
    for when, events in items:
        buckets[when] = events
    return buckets


def _select_kernel() -> tuple[str, _Callable[[_ModuleType], None] | None]:
    """The kernel SIMULACRA_KERNEL asks for, and the compiled kernel's resources hook."""
    choice = _os.environ.get("SIMULACRA_KERNEL", "auto")
    if choice not in ("auto", "compiled", "python"):
        raise _ConfigError(
            f"SIMULACRA_KERNEL={choice!r}: expected 'auto', 'compiled' or 'python'"
        )
    if choice == "python":
        return "python", None
    try:
        # Optional: built only where there is a C compiler.
        from ._ckernel import install, install_resources  # noqa: PLC0415
    except ImportError as exc:
        if choice == "compiled":
            why = ("is not built for this Python" if isinstance(exc, ModuleNotFoundError)
                   else f"does not load ({exc})")
            raise _ConfigError(
                f"SIMULACRA_KERNEL=compiled, but the compiled kernel (simulacra.core._ckernel) "
                f"{why} ({_sys.version.split()[0]}); build it with `python -m pip install .` "
                "(it needs a C compiler and the Python headers), or set SIMULACRA_KERNEL=auto"
            ) from None
        return "python", None
    try:
        install(_pure)
    except ImportError:  # a second interpreter: the compiled kernel serves the first
        if choice == "compiled":
            raise
        return "python", None
    from simulacra.rng import install_small_random  # noqa: PLC0415

    from . import _ckernel  # noqa: PLC0415

    # The compiled SmallRandom: the same draws as the pure one (simulacra.rng._small).
    install_small_random(_ckernel.SmallRandom)
    import copyreg  # noqa: PLC0415

    # A Sim (and all that reaches one) deep-copies and pickles as under the pure kernel.
    copyreg.pickle(type(_pure._new_times()), lambda heap: (_rebuild_times, (list(heap),)))
    copyreg.pickle(type(_pure._new_buckets()), lambda m: (_rebuild_buckets, (m.items(),)))
    return "compiled", install_resources


_KERNEL, _COMPILED = _select_kernel()
#: Which kernel runs in this process: ``"compiled"`` (the C fast paths of
#: ``simulacra.core._ckernel`` are installed) or ``"python"``.
KERNEL: str = _KERNEL

#: The per-entity stream of 32 bytes (``simulacra.rng``'s), compiled where the kernel is.
from simulacra.rng import SmallRandom as SmallRandom  # noqa: E402

#: A fresh copy of a failed event's exception whose ``__cause__`` is the original
#: (SimPy's failure copy; the exception itself where its type will not copy): what
#: the kernel raises or throws into each receiver, so receivers share no traceback.
copy_failure: _Callable[[BaseException], BaseException] = _pure._copy_exception


def accelerate(module: _ModuleType) -> None:
    """Put the compiled kernel's fast paths into a layer-2 module's classes.

    For ``simulacra.resources`` (its ``_resources`` module) and nothing else;
    a no-op under the Python kernel.
    """
    if _COMPILED is not None:
        _COMPILED(module)


__all__ = [
    "KERNEL",
    "NORMAL",
    "PENDING",
    "URGENT",
    "ConditionValue",
    "Event",
    "Interrupt",
    "Process",
    "ProcessGenerator",
    "Sim",
    "SmallRandom",
    "TieStats",
    "Tracer",
]
