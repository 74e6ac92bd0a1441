"""The agents of the social network: a persona, interests, and a language model to choose with.

Each turn an agent gets its feed (:class:`world.SocialObservation`), writes it
as a prompt in the social prompt convention (``simulacra.llm.social_prompt``,
which the scripted model understands and real models follow), and reads the
JSON action out of the reply. A reply that is not a valid action fails the
turn (the engine records it and goes on).
"""

from __future__ import annotations

from typing import Any

from simulacra import InvalidAction
from simulacra.agents import ActionSpec, LLMAgent
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
    """

    def __init__(self, id: str, *, persona: str, interests: tuple[str, ...],
                 llm: dict[str, Any]) -> None:
        super().__init__(id)
        self.persona = persona
        self.interests = interests
        self.llm = llm
        self.turns = 0

    def prompt(self, spec: ActionSpec) -> CompletionRequest:
        seen: SocialObservation = self.observation
        text = social_prompt(seen.handle, persona=self.persona, interests=self.interests,
                             agents=seen.agents, feed=seen.feed, mentions=seen.mentions)
        self.turns += 1
        return CompletionRequest.chat(text, system=SYSTEM, **self.llm)

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
        return SocialAction(action["action"], action["text"], action["target"])
