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
processed). Nothing else in the kernel is for use outside it.
"""

from simulacra.errors import Interrupt as Interrupt

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

__all__ = [
    "NORMAL",
    "PENDING",
    "URGENT",
    "ConditionValue",
    "Event",
    "Interrupt",
    "Process",
    "ProcessGenerator",
    "Sim",
    "TieStats",
    "Tracer",
]
