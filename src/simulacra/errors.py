"""Every exception simulacra raises on purpose.

This is a leaf module: it imports nothing from simulacra, so every layer may
import it. Each leaf also subclasses the builtin it behaves like, so code that
catches ``ValueError`` or ``RuntimeError`` keeps working::

    SimError
    ├── ScheduleError
    │   ├── EmptySchedule          no events left (also RuntimeError, as in SimPy)
    │   ├── InvalidDelay           a negative, NaN or non-numeric delay (also ValueError)
    │   └── UntilInPast            run(until=t) with t <= now (also ValueError)
    ├── EventError
    │   ├── AlreadyTriggered       succeed()/fail() on a triggered event (also RuntimeError)
    │   ├── EventNotReady          .value/.ok of a pending event (also AttributeError)
    │   ├── NotAnEvent             a process yielded something else (also TypeError)
    │   └── ForeignEvent           an event of another Sim (also ValueError)
    ├── ProcessError
    │   ├── DeadProcess            interrupting a finished process (also RuntimeError)
    │   └── SelfInterrupt          a process interrupting itself (also RuntimeError)
    ├── ResourceError
    │   ├── CapacityExceeded       more than a container can ever hold (also ValueError)
    │   └── ForeignRequest         releasing another resource's request (also ValueError)
    ├── ConfigError                a bad argument or setting (also ValueError)
    ├── ThreadOwnershipError       a Sim driven from a second thread (also RuntimeError)
    ├── DeterminismError           two runs that must match did not
    ├── TraceError                 an unreadable or malformed trace (also ValueError)
    └── Interrupt                  thrown into a process by Process.interrupt()
    KernelBug                      an invariant inside simulacra broke; please report it
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AlreadyTriggered",
    "CapacityExceeded",
    "ConfigError",
    "DeadProcess",
    "DeterminismError",
    "EmptySchedule",
    "EventError",
    "EventNotReady",
    "ForeignEvent",
    "ForeignRequest",
    "Interrupt",
    "InvalidDelay",
    "KernelBug",
    "NotAnEvent",
    "ProcessError",
    "ResourceError",
    "ScheduleError",
    "SelfInterrupt",
    "SimError",
    "ThreadOwnershipError",
    "TraceError",
    "UntilInPast",
]


class SimError(Exception):
    """Base class for every error simulacra raises deliberately."""


class ScheduleError(SimError):
    """Something is wrong with when an event was asked to happen."""


class EmptySchedule(ScheduleError, RuntimeError):
    """No events are left.

    Raised by ``step()`` on an empty schedule, and by ``run(until=event)`` when
    the events ran out before *event* was triggered.
    """


class InvalidDelay(ScheduleError, ValueError):
    """A delay was negative, NaN or not a number."""


class UntilInPast(ScheduleError, ValueError):
    """``run(until=t)`` was given a time that is not after ``now``."""


class EventError(SimError):
    """An event was used in a way its state does not allow."""


class AlreadyTriggered(EventError, RuntimeError):
    """``succeed()`` or ``fail()`` on an event that was already triggered."""


class EventNotReady(EventError, AttributeError):
    """The value or outcome of an event that has not been triggered yet was read."""


class NotAnEvent(EventError, TypeError):
    """A process yielded (or awaited) something that is not an event."""


class ForeignEvent(EventError, ValueError):
    """An event that belongs to another ``Sim`` was yielded or combined."""


class ProcessError(SimError):
    """A process was used in a way its state does not allow."""


class DeadProcess(ProcessError, RuntimeError):
    """A process that has already finished was interrupted."""


class SelfInterrupt(ProcessError, RuntimeError):
    """A process tried to interrupt itself."""


class ResourceError(SimError):
    """A resource, container or store was misused."""


class CapacityExceeded(ResourceError, ValueError):
    """A put can never fit: it asks for more than the capacity."""


class ForeignRequest(ResourceError, ValueError):
    """A request was released on a resource it does not belong to."""


class ConfigError(SimError, ValueError):
    """A bad argument or setting: the message names the field, value and expectation."""


class ThreadOwnershipError(SimError, RuntimeError):
    """A ``Sim`` was driven from a thread other than the one running it."""


class DeterminismError(SimError):
    """Two runs that must give the same trace did not."""


class TraceError(SimError, ValueError):
    """A trace file or record could not be read or is malformed."""


class Interrupt(SimError):
    """Thrown into a process by ``Process.interrupt(cause)``.

    The cause is available as :attr:`cause`.
    """

    @property
    def cause(self) -> Any:
        """The *cause* given to ``Process.interrupt()``, or ``None``."""
        return self.args[0] if self.args else None

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.cause!r})"


class KernelBug(Exception):  # deliberately outside SimError
    """An invariant inside simulacra broke. This should never happen: please report it."""
