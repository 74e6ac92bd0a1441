"""Every malformed model reply becomes InvalidAction (a failed turn), never another error."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulacra
from simulacra.llm import Completion, parse_social_action

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "examples") not in sys.path:
    sys.path.insert(0, str(ROOT / "examples"))

from social.agents import SocialAgent  # noqa: E402

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                  max_size=3),
    max_leaves=8,
)
_fields = st.fixed_dictionaries({}, optional={
    "action": st.sampled_from(["post", "reply", "like", "follow", "idle", "shout"]) | _json,
    "text": st.text(max_size=20) | _json,
    "target": st.integers(-3, 10**20) | st.text(max_size=4).map(lambda t: "#" + t) | _json
    | st.sampled_from(["²", "٣", "#²", "3", "#7", "-1", " 4", "1_0", "0x1"]),
})
_replies = (
    st.text(max_size=60)
    | _fields.map(json.dumps)
    | _fields.map(lambda d: f"Sure! ```json\n{json.dumps(d)}\n``` hope that helps")
    | st.integers(1, 3000).map(lambda n: "{" + '"a":[' * n + "]" * n + "}")
)


def test_the_reported_reply_is_an_invalid_action() -> None:
    with pytest.raises(simulacra.ConfigError, match="target must be an int"):
        parse_social_action('{"action":"reply","target":"²"}')


@settings(max_examples=400, deadline=None)
@given(text=_replies)
def test_any_reply_parses_or_raises_config_error(text: str) -> None:
    try:
        action = parse_social_action(text)
    except simulacra.ConfigError:
        return
    assert action["action"] in ("post", "reply", "like", "follow", "idle")
    assert isinstance(action["text"], str)
    target: Any = action["target"]
    assert target is None or (isinstance(target, int) and not isinstance(target, bool))


@settings(max_examples=200, deadline=None)
@given(text=_replies)
def test_the_social_agent_turns_every_bad_reply_into_invalid_action(text: str) -> None:
    agent = SocialAgent("ada0", persona="p", interests=("chess",), llm={})
    try:
        agent.parse(Completion(text=text), None)  # type: ignore[arg-type]
    except simulacra.InvalidAction:
        pass
