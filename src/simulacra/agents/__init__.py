"""Agents, messages, phases and sequences (layer 3).

Agents never read each other's state: they talk through messages with a
well-defined delivery time. A step is a :class:`Sequence` of :class:`Phase` objects;
messages sent in phase N are in their recipients' inboxes when phase N+1
begins, in the total order ``(phase, sender id, sender's seq)``. Random draws
come from per-agent, per-phase streams derived from the model's seed tree. So
the same seed gives the same result whichever backend runs the agents
(``simulacra.backends``, layer 5) and however they are partitioned.

This package holds the model side (:class:`Agent`, :class:`Message`,
:class:`Context`, :class:`Phase`, :class:`Sequence`, :class:`AgentSpec`),
the state and message digests, and :class:`Population`, the pure phase runner
that backends drive.

Imports: the standard library, ``simulacra.errors``, ``simulacra.rng`` and
``simulacra.trace`` (public surfaces only).
"""

from simulacra._util import claim_public_module

from ._agent import Agent as Agent
from ._agent import AgentId as AgentId
from ._agent import AgentSpec as AgentSpec
from ._agent import check_agent_class as check_agent_class
from ._agent import check_id as check_id
from ._agent import copy_initial_state as copy_initial_state
from ._agent import is_immutable as is_immutable
from ._agent import private_copy as private_copy
from ._context import Context as Context
from ._context import Entry as Entry
from ._context import Fanout as Fanout
from ._context import Frame as Frame
from ._context import Message as Message
from ._context import close_context as close_context
from ._context import count_entries as count_entries
from ._context import expand_entries as expand_entries
from ._context import new_context as new_context
from ._copies import COPY_ADVICE as COPY_ADVICE
from ._copies import PICKLE_ADVICE as PICKLE_ADVICE
from ._copies import first_failure as first_failure
from ._copies import payload_error as payload_error
from ._copies import state_error as state_error
from ._copies import type_name as type_name
from ._digest import MESSAGE_SCHEME as MESSAGE_SCHEME
from ._digest import STATE_SCHEME as STATE_SCHEME
from ._digest import MessageDigest as MessageDigest
from ._digest import canonical_line as canonical_line
from ._digest import state_digest as state_digest
from ._memory import MEMORY_POLICIES as MEMORY_POLICIES
from ._memory import MIN_ENTRY_TOKENS as MIN_ENTRY_TOKENS
from ._memory import AgentMemory as AgentMemory
from ._memory import min_memory_tokens as min_memory_tokens
from ._phase import Action as Action
from ._phase import Phase as Phase
from ._phase import Sequence as Sequence
from ._population import Population as Population
from ._population import freeze_world as freeze_world
from ._population import snapshot_copy_error as snapshot_copy_error
from ._population import snapshot_when as snapshot_when
from ._population import sorted_ids as sorted_ids
from ._refs import object_ref as object_ref
from ._refs import resolve_ref as resolve_ref
from ._world import WORLD_SCHEME as WORLD_SCHEME
from ._world import ActionEvent as ActionEvent
from ._world import ActionSpec as ActionSpec
from ._world import Actor as Actor
from ._world import LLMAgent as LLMAgent
from ._world import World as World

__all__ = [
    # the model side
    "Agent", "AgentId", "AgentSpec", "Message", "Context", "Phase", "Sequence", "Action",
    # digests
    "state_digest", "MessageDigest", "canonical_line", "STATE_SCHEME", "MESSAGE_SCHEME",
    # for engines and backends
    "Population", "Frame", "new_context", "close_context", "freeze_world", "sorted_ids",
    "check_id", "check_agent_class", "is_immutable", "private_copy", "object_ref",
    "resolve_ref", "Entry", "Fanout", "expand_entries", "count_entries",
    # state and payloads that cannot be copied or pickled: the errors that name them
    "copy_initial_state", "first_failure", "state_error", "payload_error", "snapshot_when",
    "snapshot_copy_error", "type_name", "COPY_ADVICE", "PICKLE_ADVICE",
    # LLM agent societies: observe/act agents and worlds (game masters)
    "World", "LLMAgent", "Actor", "ActionSpec", "ActionEvent", "WORLD_SCHEME",
    # a prompt memory held to a token budget
    "AgentMemory", "min_memory_tokens", "MEMORY_POLICIES", "MIN_ENTRY_TOKENS",
]

claim_public_module(__name__, globals())
del claim_public_module
