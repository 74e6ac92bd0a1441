"""Pausable agents: plain blocking functions on a Sim's virtual time (layer 2).

:class:`PausableHost` runs them on greenlets, one at a time, started, paused and
resumed from host code; :class:`AsyncHost` runs them on threads, with
:class:`Channel` and :class:`AgentLock` to share state (``docs/pausable.md``).

Imports: the standard library, ``simulacra.core``, ``simulacra.rng``,
``simulacra.errors`` and greenlet.
"""

from simulacra._util import claim_public_module

from ._async import AgentLock as AgentLock
from ._async import AsyncAgent as AsyncAgent
from ._async import AsyncContext as AsyncContext
from ._async import AsyncHost as AsyncHost
from ._async import Channel as Channel
from ._greenlet import AgentStatus as AgentStatus
from ._greenlet import LLMHandle as LLMHandle
from ._greenlet import PausableAgent as PausableAgent
from ._greenlet import PausableContext as PausableContext
from ._greenlet import PausableHost as PausableHost

__all__ = [
    "PausableHost", "PausableAgent", "PausableContext", "LLMHandle", "AgentStatus", "AsyncHost",
    "AsyncAgent", "AsyncContext", "Channel", "AgentLock",
]

claim_public_module(__name__, globals())
del claim_public_module
