"""The agents of the social network: a persona, interests, and a language model to choose with.

Each turn an agent gets its feed (:class:`world.SocialObservation`), writes it
as a prompt in the social prompt convention (``simulacra.llm.social_prompt``,
which the scripted model understands and real models follow), and reads the
JSON action out of the reply. A reply that is not a valid action fails the
turn (the engine records it and goes on).

With a memory budget (``sim.agents_memory.max_tokens``; docs/social.md,
"Bounded memory") an agent also remembers its past turns in a
:class:`simulacra.AgentMemory`: each post newer than any it saw before (``saw``,
or ``mentioned`` when it mentions the agent) and its own action (``posted``,
``replied``, ``liked``, ``followed``, ``idle``). The prompt then carries a
``MEMORY:`` section after its first line, held to the budget; without a budget
the agent keeps no memory and its prompt is as it always was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from simulacra import InvalidAction
from simulacra.agents import ActionSpec, AgentMemory, LLMAgent
from simulacra.errors import ConfigError
from simulacra.llm import Completion, CompletionRequest, parse_social_action, social_prompt

try:
    from .world import SocialAction, SocialObservation
except ImportError:  # loaded with this directory on sys.path (`python examples/social`)
    from world import SocialAction, SocialObservation  # type: ignore[no-redef]

__all__ = ["INTERVIEW_SYSTEM", "SYSTEM", "SocialAgent"]

SYSTEM = ("You are a member of a small social network. Stay in character, keep posts short, "
          "and answer with the JSON object the task asks for, nothing else.")
INTERVIEW_SYSTEM = ("You are a member of a small social network, interviewed by a researcher. "
                    "Stay in character and answer in one or two sentences of plain text.")


class SocialAgent(LLMAgent):
    """A member of the network.

    Args:
        id: The handle (without ``@``).
        persona: A short description ("curious baker").
        interests: Topics it cares about.
        llm: Request settings: ``model``, ``temperature``, ``max_tokens``.
        memory: Its memory of past turns, shown in its prompt; None (the
            default): no memory, the prompt shows the present turn only.
    """

    #: The memory and the newest post seen are state only with a memory (see get_state).
    _NOT_STATE: ClassVar[frozenset[str]] = LLMAgent._NOT_STATE | {"memory", "last_seen"}
    #: Class defaults: an agent without a memory holds neither attribute itself.
    memory: AgentMemory | None = None
    last_seen: int = -1  # the newest post id remembered

    def __init__(self, id: str, *, persona: str, interests: tuple[str, ...],
                 llm: dict[str, Any], memory: AgentMemory | None = None) -> None:
        super().__init__(id)
        self.persona = persona
        self.interests = interests
        self.llm = llm
        self.turns = 0
        if memory is not None:
            self.memory = memory

    def prompt(self, spec: ActionSpec) -> CompletionRequest:
        seen: SocialObservation = self.observation
        text = social_prompt(seen.handle, persona=self.persona, interests=self.interests,
                             agents=seen.agents, feed=seen.feed, mentions=seen.mentions)
        self.turns += 1
        if self.memory is not None:
            text = self._remember_seen(text, seen, spec)
        return CompletionRequest.chat(text, system=SYSTEM, **self.llm)

    def _remember_seen(self, text: str, seen: SocialObservation, spec: ActionSpec) -> str:
        """*text* with the memory of past turns after its first line; then remember the feed."""
        memory = self.memory
        assert memory is not None  # the caller checked
        shown = memory.render()
        if shown:  # after "You are @...", before AGENTS: the scripted model reads around it
            first, _, rest = text.partition("\n")
            text = f"{first}\n{shown}\n{rest}"
        newest = self.last_seen
        for post_id, author, body, reply_to in seen.feed:
            if post_id > self.last_seen:
                kind = "mentioned" if post_id in seen.mentions else "saw"
                parent = "" if reply_to is None else f" (reply to #{reply_to})"
                memory.add(f"step {spec.step}: {kind} #{post_id} @{author}{parent}: {body}",
                           kind=kind, step=spec.step)
                newest = max(newest, post_id)
        self.last_seen = newest
        return text

    def _remember_done(self, action: SocialAction, spec: ActionSpec) -> None:
        memory = self.memory
        assert memory is not None  # the caller checked
        kind = _DONE.get(action.kind, action.kind)
        if action.kind in ("post", "reply"):
            where = "" if action.target is None else f" to #{action.target}"
            what = f"I {kind}{where}: {action.text}"
        elif action.kind == "like":
            what = f"I liked #{action.target}"
        elif action.kind == "follow":
            what = f"I followed {action.text or f'the author of #{action.target}'}"
        else:
            what = "I stayed idle"
        memory.add(f"step {spec.step}: {what}", kind=kind, step=spec.step)

    def get_state(self) -> dict[str, Any]:
        """As LLMAgent's, with ``memory`` and ``last_seen`` when the agent has a memory."""
        state = super().get_state()
        if self.memory is not None:
            state["memory"] = self.memory.get_state()
            state["last_seen"] = self.last_seen
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_state`'s attributes (the memory into this agent's memory)."""
        rest = dict(state)
        memory = rest.pop("memory", None)
        last_seen = rest.pop("last_seen", None)
        super().set_state(rest)
        if self.memory is not None and memory is not None:
            self.memory.set_state(memory)
            self.last_seen = int(last_seen if last_seen is not None else -1)

    def interview_prompt(self, question: str, seen: SocialObservation) -> CompletionRequest:
        """The request that asks this agent *question* (a scenario's interview).

        It shows the agent what it sees now; answering changes nothing (no
        turn is counted, and the call is not one of the agent's own).
        """
        feed = "\n".join(f"#{i} @{author}: {text}" for i, author, text, _ in seen.feed)
        text = (f"You are @{seen.handle}, a {self.persona} who cares about "
                f"{', '.join(self.interests)}.\nYour feed:\n{feed or '(empty)'}\n\n"
                f"INTERVIEW: {question}")
        return CompletionRequest.chat(text, system=INTERVIEW_SYSTEM, **self.llm)

    def parse(self, completion: Completion | None, spec: ActionSpec) -> SocialAction:
        if completion is None:
            return SocialAction("idle")
        try:
            action = parse_social_action(completion.text)
        except ConfigError as exc:
            raise InvalidAction(f"@{self.id}: {exc}") from None
        chosen = SocialAction(action["action"], action["text"], action["target"])
        if self.memory is not None:
            self._remember_done(chosen, spec)
        return chosen


#: What an action is called in the memory (its kind there).
_DONE = {"post": "posted", "reply": "replied", "like": "liked", "follow": "followed",
         "idle": "idle"}
