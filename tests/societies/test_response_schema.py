"""``sim.llm.response_schema``: the social demo's turns send their reply's JSON schema.

Against the project's real OpenAI-compatible server on 127.0.0.1, in both forms
a server may honour (OpenAI's ``json_schema``, llama.cpp's ``json_object``):
every request carries the schema, and the replies made to follow it all parse.
Off (the default), the requests are what they always were.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import simulacra
from simulacra.llm import SOCIAL_SCHEMA, ScriptedServer

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"


@pytest.mark.parametrize("form", ["json_schema", "json_object"])
def test_each_turn_sends_the_reply_schema_in_the_form_asked(tmp_path: Path, form: str) -> None:
    with ScriptedServer(seed=0) as server:
        run = simulacra.run_society(simulacra.load_config(CONFIG, [
            "sim.agents=6", "sim.steps=2", "sim.llm.provider=openai_compatible",
            f"sim.llm.base_url={server.base_url}", "sim.llm.model=scripted",
            "sim.llm.response_schema=true", f"sim.llm.schema_format={form}"]),
            out=tmp_path / "run")
        bodies = [r["body"] for r in server.requests if r.get("body")]
    assert len(bodies) == run.llm["calls"] == 12
    for body in bodies:
        sent = body["response_format"]
        assert sent["type"] == form
        schema = sent["schema"] if form == "json_object" else sent["json_schema"]["schema"]
        assert schema == SOCIAL_SCHEMA
    assert run.result.failed == 0  # the replies that follow the schema all parse
    assert simulacra.replay_run(tmp_path / "run").matches


def test_off_the_requests_carry_no_schema_and_the_stored_config_is_as_before(
        tmp_path: Path) -> None:
    with ScriptedServer(seed=0) as server:
        simulacra.run_society(simulacra.load_config(CONFIG, [
            "sim.agents=4", "sim.steps=1", "sim.llm.provider=openai_compatible",
            f"sim.llm.base_url={server.base_url}", "sim.llm.model=scripted"]),
            out=tmp_path / "run")
        bodies = [r["body"] for r in server.requests if r.get("body")]
    assert bodies
    assert all("response_format" not in body for body in bodies)
    stored = (tmp_path / "run" / "config.yaml").read_text()
    assert "response_schema" not in stored
    assert "schema_format" not in stored
    assert json.dumps(SOCIAL_SCHEMA)  # plain JSON data
