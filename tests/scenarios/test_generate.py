"""Scenarios from documents: passages and their ids, generation, record and replay, checking.

The fixtures in tests/scenarios/data were recorded once over real HTTP
(data/make_fixtures.py); the tests replay them and expect the shipped
artifacts byte for byte, with no model call. Every test that calls a
"model" calls a scripted one, in process or behind a ScriptedServer on
127.0.0.1.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from simulacra._util import install_hint
from simulacra.cli import main
from simulacra.errors import ScenarioError
from simulacra.llm import (
    CallSite,
    Completion,
    CompletionRequest,
    RecordingStore,
    ReplayModel,
    ScriptedModel,
    ScriptedRule,
    ScriptedServer,
)
from simulacra.scenarios import (
    DEFAULT_MAX_TOKENS,
    GENERATE_TASK,
    Knob,
    Knobs,
    Passage,
    Scenario,
    check_artifacts,
    generate_scenarios,
    load_scenario,
    parse_passage_id,
    read_documents,
    reply_schema,
    scripted_scenario_model,
    split_passages,
)

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))

from make_fixtures import DOCS, MODEL, OPTIONS, TARGET  # noqa: E402

KNOBS = Knobs(
    Knob("lanes", "int", 2, low=1, high=6, doc="checkout lanes open"),
    Knob("scanner", "bool", True, doc="the barcode scanner works"),
)


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    # Targets and documents are named relative to the repository, as the fixtures were made.
    monkeypatch.chdir(ROOT)


def cli(*args: str) -> int:
    return main(["scenarios", *args])


def artifacts(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.json"))}


def write_docs(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "shop.md").write_text(
        "# Shop floor\n\n## Lanes\nTwo checkout lanes are open on weekdays.\n\n"
        "The barcode scanner of lane 1 fails when it is cold.\n", encoding="utf-8")
    return folder


def rule(*replies: str) -> ScriptedModel:
    """A model that gives *replies* in turn, one per try (by the call site's n)."""
    def reply(request: CompletionRequest, _rng: Any) -> str:
        tries = sum(m.role == "assistant" for m in request.messages)
        return replies[min(tries, len(replies) - 1)]
    return ScriptedModel(0, rules=[ScriptedRule("canned", lambda r: True, reply)])


#: The grounding of good()'s intervention: the off word of its quote, and two assumptions.
GROUNDED = {"value": {"citation": 0, "text": "fails"},
            "at": {"assumption": "the document gives no time; ten minutes in"},
            "duration": {"assumption": "the document gives no length; five minutes"}}


def good(passage: Passage, name: str = "cold-scanner", *,
         grounding: dict[str, Any] | None = GROUNDED) -> str:
    """A reply that fits KNOBS, quotes *passage* and grounds each value (unless told not to)."""
    intervention: dict[str, Any] = {"knob": "scanner", "at": 10, "value": False, "duration": 5}
    if grounding is not None:
        intervention["grounding"] = grounding
    return json.dumps({
        "name": name, "description": "the scanner fails",
        "interventions": [intervention],
        "citations": [{"passage": passage.id, "quote": "scanner of lane 1\n  fails"}]})


# -- passages ----------------------------------------------------------------------------


def test_passages_split_on_blank_lines_and_headings_and_keep_their_offsets() -> None:
    text = "# Title\n\n## Derating\nAbove 35 °C it derates.\nStill derated.\n\nNext.\n# H\nbody"
    passages = split_passages(text, "spec.md")

    assert [p.text for p in passages] == [
        "# Title\n\n## Derating\nAbove 35 °C it derates.\nStill derated.", "Next.", "# H\nbody"]
    for p in passages:
        assert text[p.start:p.end] == p.text
        assert p.id == f"spec.md#{p.start}-{p.end}:{p.sha256[:12]}"
        assert parse_passage_id(p.id) == ("spec.md", p.start, p.end, p.sha256[:12])
    assert split_passages(text, "spec.md") == passages  # a pure function of the text


def test_ids_do_not_depend_on_newlines_or_on_how_the_documents_are_named(
        tmp_path: Path) -> None:
    write_docs(tmp_path / "a")
    crlf = tmp_path / "b"
    crlf.mkdir()
    (crlf / "shop.md").write_bytes((tmp_path / "a" / "shop.md").read_bytes()
                                   .replace(b"\n", b"\r\n"))
    by_dir = [p.id for d in read_documents([tmp_path / "a"]) for p in d.passages()]
    by_file = [p.id for d in read_documents([tmp_path / "a" / "shop.md"]) for p in d.passages()]
    by_crlf = [p.id for d in read_documents([crlf]) for p in d.passages()]

    assert by_dir == by_file == by_crlf
    assert by_dir[0].startswith("shop.md#0-")


@pytest.mark.parametrize(("content", "expected"), [
    (None, "no such file or directory"),
    (b"\xff\xfe\x00", "byte 0 is not UTF-8"),
    (b"  \n\n ", "holds no text to cite"),
])
def test_a_document_that_cannot_be_read_names_the_file(tmp_path: Path, content: bytes | None,
                                                        expected: str) -> None:
    path = tmp_path / "broken.txt"
    if content is not None:
        path.write_bytes(content)

    with pytest.raises(ScenarioError, match=expected) as info:
        read_documents([path])
    assert "broken.txt" in str(info.value)


def test_a_directory_without_documents_says_what_it_looks_for(tmp_path: Path) -> None:
    (tmp_path / "notes.csv").write_text("a,b\n", encoding="utf-8")

    with pytest.raises(ScenarioError, match=r"holds no document \(.md"):
        read_documents([tmp_path])


def _pdf(text: str) -> bytes:
    """A one-page PDF with *text* in Helvetica, offsets computed."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode("latin-1")
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
               b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
               b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)


def test_a_pdf_is_read_through_the_pdf_extra(tmp_path: Path) -> None:
    pytest.importorskip("pypdf")
    (tmp_path / "manual.pdf").write_bytes(_pdf("Chargers derate above 35 C."))

    [document] = read_documents([tmp_path])

    assert document.file == "manual.pdf"
    assert "Chargers derate above 35 C." in document.text


def test_without_pypdf_a_pdf_names_the_extra(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "manual.pdf").write_bytes(_pdf("x"))
    monkeypatch.setitem(sys.modules, "pypdf", None)  # import pypdf now raises ImportError

    with pytest.raises(ScenarioError, match=re.escape(install_hint("pdf"))):
        read_documents([tmp_path])


def test_a_damaged_pdf_says_so(tmp_path: Path) -> None:
    pytest.importorskip("pypdf")
    (tmp_path / "manual.pdf").write_bytes(b"%PDF-1.4\nnot really\n")

    with pytest.raises(ScenarioError, match=r"manual.pdf'.*cannot read the PDF"):
        read_documents([tmp_path])


# -- generation ----------------------------------------------------------------------------


def test_a_reply_whose_quote_is_not_in_its_passage_is_rejected_and_asked_again(
        tmp_path: Path) -> None:
    documents = read_documents([write_docs(tmp_path)])
    passage = documents[0].passages()[-1]
    wrong = json.loads(good(passage))
    wrong["citations"][0]["quote"] = "the scanner never fails"
    model = rule(json.dumps(wrong), good(passage))
    rejected: list[tuple[int, int, str]] = []

    [scenario] = generate_scenarios(documents, KNOBS, model, target="shop.py:KNOBS",
                                    model_name="m", count=1, tries=2,
                                    on_reject=lambda *a: rejected.append(a))

    assert rejected == [(0, 0, "citation 0: the quote 'the scanner never fails' does not appear "
                         f"in passage {passage.id} word for word; copy the words exactly")]
    assert scenario.provenance["tries"] == 2
    assert [c["site"] for c in scenario.provenance["recording"]["calls"]] == [
        "scenario-0/0", "scenario-0/1"]
    assert scenario.provenance["passages"] == [{"id": passage.id, "sha256": passage.sha256}]
    assert scenario.target == "shop.py:KNOBS"


@pytest.mark.parametrize(("reply", "reason"), [
    ("I think the scanner could fail.", "holds no JSON object"),
    ('{"name": "x", "interventions": []', "holds no JSON object"),
    ('{"name": "x", "interventions": [], "extra": 1}', "unknown field(s) 'extra'"),
    ('{"name": "x", "interventions": [{"knob": "lane", "at": 1, "value": 3}], '
     '"citations": [{"passage": "P", "quote": "q"}]}', "no knob 'lane'"),
    ('{"name": "x", "interventions": [{"knob": "lanes", "at": 1, "value": 9}], '
     '"citations": [{"passage": "P", "quote": "q"}]}', "must be <= 6"),
    ('{"name": "x", "interventions": [{"knob": "lanes", "at": 1, "value": 3}]}',
     "cites no passage"),
    ('{"name": "x", "interventions": [{"knob": "lanes", "at": 1, "value": 3}], '
     '"citations": [{"passage": "shop.md#0-5:000000000000", "quote": "Shop"}]}',
     "not one of the passages given"),
])
def test_a_model_that_never_gives_a_valid_scenario_is_one_clear_error(
        tmp_path: Path, reply: str, reason: str) -> None:
    documents = read_documents([write_docs(tmp_path)])

    with pytest.raises(ScenarioError) as info:
        generate_scenarios(documents, KNOBS, rule(reply), target="shop.py:KNOBS",
                           model_name="m", count=2, tries=2)

    message = str(info.value)
    assert message.startswith("documents shop.md (target shop.py:KNOBS): the model gave no "
                              "valid scenario 1 of 2 in 2 tries; the last reply was rejected: ")
    assert reason in message


def test_the_follow_up_tells_the_model_why(tmp_path: Path) -> None:
    documents = read_documents([write_docs(tmp_path)])
    seen: list[CompletionRequest] = []

    def reply(request: CompletionRequest, _rng: Any) -> str:
        seen.append(request)
        return "no"

    model = ScriptedModel(0, rules=[ScriptedRule("r", lambda r: True, reply)])
    with pytest.raises(ScenarioError):
        generate_scenarios(documents, KNOBS, model, target="t", model_name="m", count=1,
                           tries=3)

    assert [len(r.messages) for r in seen] == [2, 4, 6]
    assert seen[0].messages[1].content.startswith(GENERATE_TASK)
    assert seen[2].messages[-2].content == "no"
    assert seen[2].messages[-1].content.startswith("REJECTED: the reply holds no JSON object")


def test_names_must_differ(tmp_path: Path) -> None:
    documents = read_documents([write_docs(tmp_path)])
    passage = documents[0].passages()[-1]

    with pytest.raises(ScenarioError, match="the name 'cold-scanner' is taken"):
        generate_scenarios(documents, KNOBS, rule(good(passage)), target="t", model_name="m",
                           count=2, tries=1)


def test_a_well_quoted_reply_that_grounds_nothing_is_rejected_and_asked_again(
        tmp_path: Path) -> None:
    # The quote is in its passage, the knob and values fit: before, such a reply was
    # accepted with none of its values grounded. Now the model is told how to ground them.
    documents = read_documents([write_docs(tmp_path)])
    passage = documents[0].passages()[-1]
    rejected: list[tuple[int, int, str]] = []
    seen: list[CompletionRequest] = []
    replies = [good(passage, grounding=None), good(passage)]

    def reply(request: CompletionRequest, _rng: Any) -> str:
        seen.append(request)
        return replies[len(seen) - 1]

    model = ScriptedModel(0, rules=[ScriptedRule("r", lambda r: True, reply)])
    [scenario] = generate_scenarios(documents, KNOBS, model, target="t", model_name="m",
                                    count=1, tries=2, on_reject=lambda *a: rejected.append(a))

    reason = ("intervention 0 (knob 'scanner') does not ground its value and at and duration: "
              'give "grounding": {"value": GROUND, "at": GROUND, "duration": GROUND}, each '
              'GROUND {"citation": <the index of a citation>, "text": "<words of its quote that '
              'state it>"} or {"assumption": "<why it was chosen>"}')
    assert rejected == [(0, 0, reason)]
    assert seen[1].messages[-1].content.startswith(f"REJECTED: {reason}\n")
    assert scenario.provenance["tries"] == 2
    [item] = scenario.interventions
    assert item.grounding is not None
    assert item.grounding["value"].text == "fails"
    assert item.grounding["at"].assumption == "the document gives no time; ten minutes in"


@pytest.mark.parametrize(("grounding", "reason"), [
    ({**GROUNDED, "duration": None}, "does not ground its duration: "),
    ({k: v for k, v in GROUNDED.items() if k != "at"}, "does not ground its at: "),
    ({**GROUNDED, "value": {"citation": 0, "text": "lane 1"}},
     "value False matches nothing in its quote 'scanner of lane 1\\n  fails' (grounded in "
     "'lane 1')"),
    ({**GROUNDED, "at": {"citation": 0, "text": "lane 1"}},
     "at 10.0 matches nothing in its quote"),
    ({**GROUNDED, "value": {"citation": 0, "text": "the scanner breaks"}},
     "is grounded in 'the scanner breaks', which is not in its quote"),
    ({**GROUNDED, "value": {"citation": 3, "text": "fails"}},
     "is grounded in citation 3, which the scenario does not have"),
])
def test_a_reply_grounded_in_part_or_falsely_is_never_accepted(
        tmp_path: Path, grounding: dict[str, Any], reason: str) -> None:
    documents = read_documents([write_docs(tmp_path)])
    passage = documents[0].passages()[-1]

    with pytest.raises(ScenarioError) as info:
        generate_scenarios(documents, KNOBS, rule(good(passage, grounding=grounding)),
                           target="t", model_name="m", count=1, tries=2)

    assert "the model gave no valid scenario 1 of 1 in 2 tries" in str(info.value)
    assert reason in str(info.value)


def test_every_request_bounds_its_tokens_and_sends_the_reply_schema(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    documents = read_documents([write_docs(tmp_path)])
    passages = documents[0].passages()
    seen: list[CompletionRequest] = []

    def reply(request: CompletionRequest, _rng: Any) -> str:
        seen.append(request)
        return good(passages[-1])

    model = ScriptedModel(0, rules=[ScriptedRule("r", lambda r: True, reply)])
    [made] = generate_scenarios(documents, KNOBS, model, target="t", model_name="m", count=1)
    [bounded] = generate_scenarios(documents, KNOBS, model, target="t", model_name="m",
                                   count=1, max_tokens=400, schema=False)

    assert seen[0].max_tokens == DEFAULT_MAX_TOKENS == 1024
    assert seen[0].response_schema == reply_schema(KNOBS, passages)
    assert (seen[1].max_tokens, seen[1].response_schema_json) == (400, None)
    assert (made.provenance["max_tokens"], made.provenance["response_schema"]) == (1024, True)
    assert (bounded.provenance["max_tokens"], bounded.provenance["response_schema"]) == (
        400, False)
    schema = reply_schema(KNOBS, passages)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(json.loads(good(passages[-1]).replace('"duration": 5',
                                                              '"duration": 5, "note": ""')),
                        schema)
    assert schema["properties"]["interventions"]["items"]["properties"]["knob"]["enum"] == [
        "lanes", "scanner"]
    assert schema["properties"]["citations"]["items"]["properties"]["passage"]["enum"] == [
        p.id for p in passages]
    # Bounded lists: held to a schema, a small model otherwise repeats an item to max_tokens.
    assert (schema["properties"]["interventions"]["maxItems"],
            schema["properties"]["citations"]["maxItems"]) == (4, 3)
    # The reply form the prompt shows has the grounding fields, and says how to fill them.
    prompt = seen[0].messages[1].content
    assert '"grounding": {"value": <GROUND>, "at": <GROUND>, "duration": <GROUND, or null' \
        in prompt
    assert 'GROUND is {"citation": <the index of one of your citations, from 0>' in prompt
    assert "four hours is 4 or 240 (minutes)" in prompt


def test_the_schema_s_nulls_mean_not_given(tmp_path: Path) -> None:
    documents = read_documents([write_docs(tmp_path)])
    passage = documents[0].passages()[-1]
    reply = json.loads(good(passage))
    item = reply["interventions"][0]
    item.update(duration=None, note="keeps the value")
    item["grounding"]["duration"] = None

    [scenario] = generate_scenarios(documents, KNOBS, rule(json.dumps(reply)), target="t",
                                    model_name="m", count=1, tries=1)

    [made] = scenario.interventions
    assert made.duration is None
    assert made.grounding is not None
    assert set(made.grounding) == {"value", "at"}


def test_a_reply_cut_off_at_max_tokens_says_so(tmp_path: Path) -> None:
    documents = read_documents([write_docs(tmp_path)])

    class Rambles:
        def complete(self, request: CompletionRequest, *,
                     site: CallSite | None = None) -> Completion:
            return Completion('{"name": "cold-scanner", "interventions": [{"kn',
                              finish_reason="length")

        async def acomplete(self, request: CompletionRequest, *,
                            site: CallSite | None = None) -> Completion:
            return self.complete(request, site=site)

    with pytest.raises(ScenarioError, match=re.escape(
            "the last reply was rejected: the reply was cut off at max_tokens=32 tokens")):
        generate_scenarios(documents, KNOBS, Rambles(), target="t", model_name="m", count=1,
                           tries=1, max_tokens=32)
    with pytest.raises(ScenarioError, match="max_tokens must be an int >= 1 or None"):
        generate_scenarios(documents, KNOBS, Rambles(), target="t", model_name="m",
                           max_tokens=0)


def test_the_scripted_responder_fits_any_knobs(tmp_path: Path) -> None:
    documents = read_documents([DATA / "docs"])
    knobs = Knobs(Knob("rate", "float", 0.0, low=0.0, high=0.5), Knob("mode", "str", "a"),
                  Knob("level", "int", 1, choices=(1, 2)), Knob("open", "bool", False))

    made = generate_scenarios(documents, knobs, scripted_scenario_model(), target="t",
                              model_name="scripted", count=6, tries=1, until=100.0)

    assert len({s.name for s in made}) == 6
    for scenario in made:
        scenario.check(knobs, end=100.0)
        scenario.save(tmp_path)
    notes: list[str] = []
    check_artifacts(tmp_path, documents=documents, knobs=knobs, until=100.0, notes=notes,
                    require_grounding=True)  # what it invents, it says it assumed
    assert notes
    assert all("assumed: invented by the scripted stand-in model" in n for n in notes)


# -- the command: record, replay, check ------------------------------------------------------


def test_the_shipped_recordings_replay_to_the_shipped_artifacts_with_no_model_call(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Every option of the recorded run is given, the provider too: --replay must call nothing.
    with ScriptedServer() as server:
        status = cli("generate", DOCS, "--target", TARGET, "--out", str(tmp_path), *OPTIONS,
                     "--provider", "openai_compatible", "--base-url", server.base_url,
                     "--model", MODEL, "--replay", "tests/scenarios/data/recordings.sqlite")
        assert server.calls == 0

    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert artifacts(tmp_path) == artifacts(DATA / "artifacts"), (
        "the replay differs from the shipped artifacts; if the prompt changed on purpose, "
        "re-make them: python tests/scenarios/data/make_fixtures.py")
    assert "replayed from tests/scenarios/data/recordings.sqlite (no model called)" in captured.out
    assert "try 1 of 3: rejected: citation 0: the quote" in captured.err  # recorded, replayed
    assert not list(DATA.glob("recordings.sqlite-*"))  # a replay leaves no -wal or -shm


def test_a_strict_replay_serves_every_call(tmp_path: Path) -> None:
    store = RecordingStore(DATA / "recordings.sqlite", readonly=True)
    try:
        model = ReplayModel(store, strict=True)
        made = generate_scenarios(read_documents([DATA / "docs"]),
                                  load_knobs(), model, target=TARGET, model_name=MODEL,
                                  count=3, tries=3, until=480.0, recording="recordings.sqlite")
        assert model.misses == 0
        assert model.calls_served == len(store) == 4
    finally:
        store.close()
    assert {s.filename: s.artifact().encode() for s in made} == artifacts(DATA / "artifacts")


def load_knobs() -> Knobs:
    import ferry

    return ferry.KNOBS


def test_a_recorded_run_over_http_replays_byte_for_byte(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = tmp_path / "rec.sqlite"
    with ScriptedServer(scripted_scenario_model()) as server:
        assert cli("generate", DOCS, "--target", TARGET, "--out", str(tmp_path / "live"),
                   "--count", "2", "--provider", "openai_compatible", "--base-url",
                   server.base_url, "--model", "m1", "--record", str(record)) == 0
        calls = server.calls
        assert cli("generate", DOCS, "--target", TARGET, "--out", str(tmp_path / "again"),
                   "--count", "2", "--replay", str(record)) == 0  # --model read from it
        assert server.calls == calls == 2
    capsys.readouterr()

    assert artifacts(tmp_path / "live") == artifacts(tmp_path / "again")
    assert len(artifacts(tmp_path / "live")) == 2
    [first, *_] = sorted((tmp_path / "live").glob("*.json"))
    provenance = load_scenario(first).provenance
    assert provenance["model"] == "m1"
    assert provenance["recording"]["file"] == "rec.sqlite"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again", "live", "rec.sqlite"]


@pytest.mark.parametrize(("options", "max_tokens", "response_format"), [
    ([], 1024, "json_schema"),
    (["--max-tokens", "900", "--schema-format", "json_object"], 900, "json_object"),
    (["--schema-format", "none"], 1024, None),
])
def test_the_command_sends_max_tokens_and_the_schema_in_the_form_asked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str],
        max_tokens: int, response_format: str | None) -> None:
    record = tmp_path / "rec.sqlite"
    with ScriptedServer(scripted_scenario_model()) as server:
        assert cli("generate", DOCS, "--target", TARGET, "--out", str(tmp_path / "live"),
                   "--count", "1", "--provider", "openai_compatible", "--base-url",
                   server.base_url, "--model", "m1", "--record", str(record), *options) == 0
        [sent] = [r["body"] for r in server.requests]
        # A replay names the same options (the request, schema and bound included, is the key).
        assert cli("generate", DOCS, "--target", TARGET, "--out", str(tmp_path / "again"),
                   "--count", "1", "--replay", str(record), *options) == 0
        assert server.calls == 1
    capsys.readouterr()

    assert sent["max_tokens"] == max_tokens
    if response_format is None:
        assert "response_format" not in sent
    elif response_format == "json_object":
        assert sent["response_format"]["type"] == "json_object"
        assert sent["response_format"]["schema"]["required"] == [
            "name", "description", "interventions", "citations"]
    else:
        assert sent["response_format"]["type"] == "json_schema"
        assert sent["response_format"]["json_schema"]["strict"] is True
    [artifact] = (tmp_path / "live").glob("*.json")
    provenance = load_scenario(artifact).provenance
    assert provenance["max_tokens"] == max_tokens
    assert provenance["response_schema"] is (response_format is not None)
    assert provenance["generator"] == "simulacra.scenarios.generate.v2"
    assert artifacts(tmp_path / "live") == artifacts(tmp_path / "again")
    assert cli("check", str(tmp_path / "live"), "--docs", DOCS, "--require-grounding") == 0


def test_a_replay_with_another_max_tokens_misses(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    status = cli("generate", DOCS, "--target", TARGET, "--out", str(tmp_path / "out"),
                 *OPTIONS, "--max-tokens", "100",
                 "--replay", "tests/scenarios/data/recordings.sqlite")

    err = capsys.readouterr().err
    assert status == 2
    assert "this call site was recorded with a different request" in err
    assert "--max-tokens" in err
    assert not (tmp_path / "out").exists()


def test_the_command_s_max_tokens_default_is_the_library_s() -> None:
    from simulacra.cli import _scenarios

    assert _scenarios._DEFAULT_MAX_TOKENS == DEFAULT_MAX_TOKENS


def test_the_default_provider_needs_no_server_and_grounds_the_ferry_documents(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Until grounding, the default invented values (3 artifacts); now it carries the
    # documents' numbers and leaves out what it cannot ground (the closed berths).
    out = tmp_path / "out"
    assert cli("generate", *sorted(str(p.relative_to(ROOT)) for p in (DATA / "docs").iterdir()),
               "--target", "tests/scenarios/data/ferry.py", "--out", str(out)) == 0
    first = artifacts(out)
    assert cli("generate", DOCS, "--target", TARGET, "--out", str(tmp_path / "two")) == 0
    assert "left out 'two berths'" in capsys.readouterr().err

    assert first == artifacts(tmp_path / "two")  # deterministic; files or their directory
    made = {s.name: s for s in load_scenarios_in(out)}
    [gate] = made["gate-incident-ticket-gate"].interventions
    assert (gate.value, gate.at, gate.duration) == (False, 460.0, 90.0)  # 07:40, ninety minutes
    [sea] = made["terminal-operations-sea-state"].interventions
    assert sea.value == "storm"
    assert sea.grounding is not None
    assert sea.grounding["at"].assumption is not None
    assert cli("check", str(out), "--docs", DOCS, "--target", TARGET) == 0
    captured = capsys.readouterr()
    assert "ok: 2 artifacts" in captured.out
    assert "at 0.0 assumed: the passage states no start time" in captured.err


def load_scenarios_in(folder: Path) -> list[Scenario]:
    return [load_scenario(p) for p in sorted(folder.glob("*.json"))]


def test_a_replay_that_lacks_a_call_is_one_line_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options = [o if o != "3" else "4" for o in OPTIONS]  # --count 4: one more than recorded
    status = cli("generate", DOCS, "--target", TARGET, "--out", str(tmp_path / "out"),
                 *options, "--replay", "tests/scenarios/data/recordings.sqlite")

    err = capsys.readouterr().err
    assert status == 2
    assert err.count("error:") == 1
    assert "no recording for call site agent='scenario-0' n=0" in err
    assert "differ from the recorded run" in err
    assert not (tmp_path / "out").exists()


class Never:
    """A model whose every reply is rejected (an empty object)."""

    def complete(self, request: CompletionRequest, *,
                 site: CallSite | None = None) -> Completion:
        return Completion("{}", model="never")

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        return self.complete(request, site=site)


def test_a_failed_generation_writes_no_artifact_and_keeps_what_it_paid_for(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = tmp_path / "rec.sqlite"
    partial = tmp_path / "rec.sqlite.partial"
    args = ("generate", DOCS, "--target", TARGET, "--out", str(tmp_path / "out"),
            "--provider", "openai_compatible", "--model", "never", "--record", str(record))
    with ScriptedServer(Never()) as server:
        status = cli(*args, "--tries", "2", "--base-url", server.base_url)
        err = capsys.readouterr().err
        assert status == 2
        assert ("error: documents gate-incident.txt, storm-report.md, terminal-operations.md "
                f"(target {TARGET}): the model gave no valid scenario 1 of 3 in 2 tries") in err
        assert err.splitlines()[-1] == (
            f"  hint: the 2 model calls paid for so far are kept in {partial}; run the same "
            "command with --resume to continue without paying for them again")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.sqlite.partial"]

        # A third try, resumed: the two paid calls come from the recording, one is made.
        status = cli(*args, "--tries", "3", "--base-url", server.base_url, "--resume")
        assert status == 2
        assert server.served == 3
        assert "in 3 tries" in capsys.readouterr().err
        store = RecordingStore(partial, readonly=True)
        assert len(store) == 3
        store.close()


def test_an_unreachable_provider_is_exit_1(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedServer() as server:
        server.fail_next(100, 400)
        status = cli("generate", DOCS, "--target", TARGET, "--out", str(tmp_path / "out"),
                     "--provider", "openai_compatible", "--base-url", server.base_url,
                     "--model", "m")

    assert status == 1
    assert capsys.readouterr().err.startswith("error: the model could not be called: ")
    assert not (tmp_path / "out").exists()


class FailsAfter:
    """Answers as the scripted scenario model for *n* calls; then its server fails (HTTP 400)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.inner = scripted_scenario_model()
        self.answered = 0
        self.server: ScriptedServer | None = None

    def complete(self, request: CompletionRequest, *,
                 site: CallSite | None = None) -> Completion:
        assert self.server is not None
        if self.answered >= self.n:
            raise RuntimeError("the server is down")
        self.answered += 1
        if self.answered == self.n:  # every later request fails at once (400: no retry)
            self.server.fail_next(1000, 400, body="the GPU is on fire")
        return self.inner.complete(request, site=site)

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        return self.complete(request, site=site)


@pytest.mark.parametrize("record", [False, True])
def test_a_run_whose_server_fails_resumes_without_paying_again(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], record: bool) -> None:
    def generate(server: ScriptedServer, out: str, *extra: str) -> int:
        recording = ["--record", str(tmp_path / out / "rec.sqlite")] if record else []
        return cli("generate", DOCS, "--target", TARGET, "--out", str(tmp_path / out / "art"),
                   "--count", "3", "--provider", "openai_compatible", "--base-url",
                   server.base_url, "--model", "m", *recording, *extra)

    with ScriptedServer(scripted_scenario_model()) as server:  # the uninterrupted reference
        assert generate(server, "ref") == 0
        paid_in_full = server.served
    assert paid_in_full >= 3
    capsys.readouterr()

    failing = FailsAfter(2)
    with ScriptedServer(failing) as server:
        failing.server = server
        assert generate(server, "run") == 1
        assert server.served == 2
    err = capsys.readouterr().err.splitlines()
    partial = (tmp_path / "run" / "rec.sqlite.partial" if record
               else tmp_path / "run" / "art" / ".generate.sqlite.partial")
    assert err[-2].startswith("error: the model could not be called: ")
    assert "the GPU is on fire" in err[-2]
    assert err[-1] == (f"  hint: the 2 model calls paid for so far are kept in {partial}; run "
                       "the same command with --resume to continue without paying for them "
                       "again")
    assert not list((tmp_path / "run").rglob("*.json"))  # no artifact
    store = RecordingStore(partial, readonly=True)
    assert len(store) == 2
    store.close()

    with ScriptedServer(scripted_scenario_model()) as server:
        # Without --resume, the paid calls are not thrown away: refused, nothing called.
        assert generate(server, "run") == 2
        err = capsys.readouterr().err
        assert err == (f"error: {partial} holds 2 model calls paid for by an earlier run that "
                       "failed; add --resume to continue from them, or delete the file to start "
                       "over\n")
        assert server.calls == 0
        # Resumed: only the calls not paid for are made, and the artifacts are the
        # uninterrupted run's, byte for byte.
        assert generate(server, "run", "--resume") == 0
        assert server.served == paid_in_full - 2
        assert generate(server, "run", "--resume") == 2
    assert artifacts(tmp_path / "run" / "art") == artifacts(tmp_path / "ref" / "art")
    assert not partial.exists()
    assert (tmp_path / "run" / "rec.sqlite").exists() == record
    assert "--resume: there is no run to resume: " in capsys.readouterr().err


def test_ctrl_c_after_paid_calls_keeps_them_and_says_how_to_resume(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import simulacra.scenarios

    class Interrupted:
        """The scripted model, and Ctrl-C during its second call."""

        def __init__(self) -> None:
            self.inner = scripted_scenario_model()
            self.calls = 0

        def complete(self, request: CompletionRequest, *,
                     site: CallSite | None = None) -> Completion:
            self.calls += 1
            if self.calls == 2:
                raise KeyboardInterrupt
            return self.inner.complete(request, site=site)

        async def acomplete(self, request: CompletionRequest, *,
                            site: CallSite | None = None) -> Completion:
            return self.complete(request, site=site)

    monkeypatch.setattr(simulacra.scenarios, "scripted_scenario_model", Interrupted)
    out = tmp_path / "out"
    status = cli("generate", DOCS, "--target", TARGET, "--out", str(out), "--provider",
                 "scripted")

    assert status == 130
    assert capsys.readouterr().err == (
        "interrupted; no artifact was written\n"
        f"  hint: the 1 model call paid for so far is kept in {out}/.generate.sqlite.partial; "
        "run the same command with --resume to continue without paying for it again\n")
    assert [p.name for p in out.iterdir()] == [".generate.sqlite.partial"]


@pytest.mark.parametrize(("args", "expected"), [
    (["--target", "tests/scenarios/data/ferry.py:NOPE"], "has no 'NOPE'; it has KNOBS"),
    (["--target", "tests/scenarios/data/ferry.py:Knob"], "Knob is a"),
    (["--target", "tests/scenarios/data/nowhere.py"], "file not found"),
    (["--target", TARGET, "--provider", "openai_compatible"], "needs --base-url and --model"),
    (["--target", TARGET, "--base-url", "http://127.0.0.1:1/v1"],
     "--base-url goes with --provider openai_compatible"),
    (["--target", TARGET, "--count", "0"], "--count must be >= 1"),
    (["--target", TARGET, "--tries", "0"], "--tries must be >= 1"),
    (["--target", TARGET, "--max-tokens", "0", "--provider", "scripted"],
     "--max-tokens must be >= 1"),
    (["--target", TARGET, "--max-tokens", "300"],
     "--max-tokens and --schema-format go with a model"),
    (["--target", TARGET, "--schema-format", "json_object"],
     "--max-tokens and --schema-format go with a model"),
    (["--target", TARGET, "--record", "r", "--replay", "r"], "--record and --replay go apart"),
    (["--target", TARGET, "--replay", "missing.sqlite"], "no such recordings file"),
    (["--target", TARGET, "--resume", "--replay", "r"], "--resume and --replay go apart"),
    (["--target", TARGET, "--resume"], "--record, --resume and --tries go with a model"),
    (["--target", TARGET, "--resume", "--provider", "scripted"],
     "--resume: there is no run to resume: "),
])
def test_bad_options_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             args: list[str], expected: str) -> None:
    status = cli("generate", DOCS, "--out", str(tmp_path / "out"), *args)

    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("error: "), err
    assert err.count("\n") == 1, err
    assert expected in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("attr", ["run", "Model", "KNOBS_FACTORY"])
def test_a_target_that_is_not_knobs_is_refused_without_calling_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], attr: str) -> None:
    """`--target model.py:run` names the entry point: it is refused, and never called."""
    called = tmp_path / "called.txt"
    model = tmp_path / "model.py"
    model.write_text(
        "from pathlib import Path\n"
        "from simulacra.scenarios import Knob, Knobs\n"
        "KNOBS = Knobs(Knob('lanes', 'int', 2, low=1, high=6))\n"
        f"MARK = Path({str(called)!r})\n"
        "def run(*args, **kw):\n"
        "    MARK.write_text('run was called')\n"
        "    return KNOBS\n"
        "class Model:\n"
        "    def __init__(self, *args, **kw):\n"
        "        MARK.write_text('Model was called')\n"
        "class _Factory:\n"
        "    def __call__(self, *args, **kw):\n"
        "        MARK.write_text('the factory was called')\n"
        "        return KNOBS\n"
        "KNOBS_FACTORY = _Factory()\n",
        encoding="utf-8")

    status = cli("generate", DOCS, "--target", f"{model}:{attr}", "--out",
                 str(tmp_path / "out"))

    err = capsys.readouterr().err
    assert status == 2
    assert not called.exists(), called.read_text(encoding="utf-8")
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: --target '{model}:{attr}': {attr} is a "), err
    assert "not a simulacra.scenarios.Knobs (it is not called); it has KNOBS" in err
    assert not (tmp_path / "out").exists()


def test_an_unreadable_document_is_exit_2_before_any_call(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "docs" / "scan.txt"
    bad.parent.mkdir()
    bad.write_bytes(b"\x89PNG\r\n")
    with ScriptedServer() as server:
        status = cli("generate", str(bad.parent), "--target", TARGET, "--out",
                     str(tmp_path / "out"), "--provider", "openai_compatible", "--base-url",
                     server.base_url, "--model", "m")
        assert server.calls == 0

    assert status == 2
    assert "scan.txt': cannot read the document: byte 0 is not UTF-8" in capsys.readouterr().err


# -- check ---------------------------------------------------------------------------------


def copy_fixture(tmp_path: Path) -> tuple[Path, Path]:
    shutil.copytree(DATA / "artifacts", tmp_path / "artifacts")
    shutil.copytree(DATA / "docs", tmp_path / "docs")
    return tmp_path / "artifacts", tmp_path / "docs"


def test_check_passes_on_the_shipped_artifacts(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("check", "tests/scenarios/data/artifacts", "--docs", DOCS,
               "--target", TARGET, "--until", "480") == 0
    assert capsys.readouterr().out == (
        "ok: 3 artifacts in tests/scenarios/data/artifacts (schema, hash, file name, knobs, "
        "grounding, citations against 3 documents)\n")


def test_check_without_documents_says_what_it_did_not_check(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("check", "tests/scenarios/data/artifacts") == 0
    assert "give --docs DOCS" in capsys.readouterr().err


def test_an_edited_artifact_fails_its_hash(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    folder, docs = copy_fixture(tmp_path)
    path = sorted(folder.glob("*.json"))[0]
    path.write_text(path.read_text(encoding="utf-8").replace('"duration":120.0',
                                                             '"duration":121.0'),
                    encoding="utf-8")

    assert cli("check", str(folder), "--docs", str(docs)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: its hash ")
    assert "does not match its content" in err


def test_a_passage_changed_since_generation_fails(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    folder, docs = copy_fixture(tmp_path)
    scenario = load_scenario(sorted(folder.glob("*.json"))[0])
    file, start, end, prefix = parse_passage_id(scenario.citations[0].passage)
    text = (docs / file).read_text(encoding="utf-8")
    (docs / file).write_text(text[:start] + text[start:end].replace("a", "A", 1) + text[end:],
                             encoding="utf-8")

    assert cli("check", str(folder), "--docs", str(docs)) == 2
    err = capsys.readouterr().err
    assert f"citation 0 ({scenario.citations[0].passage}): expected {file}[{start}:{end}] " \
           f"to have SHA-256 {prefix}..., but it has " in err
    assert "the passage changed since generation" in err


def test_a_quote_not_in_its_passage_fails_even_with_a_good_hash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, docs = copy_fixture(tmp_path)
    original = load_scenario(sorted(folder.glob("*.json"))[0])
    citation = replace_quote(original, "words that are not there")
    for path in folder.glob("*.json"):
        path.unlink()
    citation.save(folder)

    assert cli("check", str(folder), "--docs", str(docs)) == 2
    assert "expected the quote 'words that are not there' in the passage" in \
        capsys.readouterr().err


def replace_quote(scenario: Scenario, quote: str) -> Scenario:
    data = scenario.content()
    data["citations"][0]["quote"] = quote
    return Scenario(**data)


def test_a_renamed_artifact_and_a_missing_document_fail(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    folder, docs = copy_fixture(tmp_path)
    first = sorted(folder.glob("*.json"))[0]
    first.rename(folder / ("x" + first.name))
    assert cli("check", str(folder)) == 2
    assert f"expected the file to be called {first.name}" in capsys.readouterr().err

    (folder / ("x" + first.name)).rename(first)
    cited = parse_passage_id(load_scenario(first).citations[0].passage)[0]
    others = [p for p in docs.iterdir() if p.name != cited]
    assert cli("check", str(folder), "--docs", *map(str, others)) == 2
    assert f"cites document {cited!r}, which is not among the documents given" in \
        capsys.readouterr().err


def test_the_shipped_fixture_was_made_with_a_rejection() -> None:
    tries = sorted(load_scenario(p).provenance["tries"]
                   for p in (DATA / "artifacts").glob("*.json"))
    assert tries == [1, 1, 2]


def test_a_passage_that_moved_is_named_where_it_is_now(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    folder, docs = copy_fixture(tmp_path)
    scenario = load_scenario(sorted(folder.glob("*.json"))[0])
    file = parse_passage_id(scenario.citations[0].passage)[0]
    (docs / file).write_text("A new first paragraph.\n\n" + (docs / file).read_text(
        encoding="utf-8"), encoding="utf-8")

    assert cli("check", str(folder), "--docs", str(docs)) == 2
    err = capsys.readouterr().err
    assert "the passage changed since generation (its text is now at " in err
    assert "the document changed before it)" in err


def test_without_httpx_the_provider_names_the_extra_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)  # as on a plain install

    status = cli("generate", DOCS, "--target", TARGET, "--out", str(tmp_path / "out"),
                 "--provider", "openai_compatible", "--base-url", "http://127.0.0.1:9/v1",
                 "--model", "m")

    assert status == 2
    assert capsys.readouterr().err == (
        "error: --provider openai_compatible needs the httpx package, which is not installed: "
        f"{install_hint('llm')}\n")
    assert not (tmp_path / "out").exists()
