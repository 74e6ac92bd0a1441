"""Record the social example's scenarios: recordings.sqlite and artifacts/, over real HTTP.

    python examples/social/scenarios/record.py

It starts an OpenAI-compatible server on 127.0.0.1 (simulacra.llm.ScriptedServer)
whose "model" answers with the replies written below, the kind a language
model gives, and runs

    simulacra scenarios generate examples/social/scenarios/docs \
        --target examples/social/model.py:KNOBS --until 4 --count 2 \
        --provider openai_compatible --base-url URL --model example-designer \
        --record examples/social/scenarios/recordings.sqlite \
        --out examples/social/scenarios/artifacts

against it. Every reply grounds each value and time (the prompt asks it to; an
ungrounded reply is rejected): in the words of a quote that state it ("one
hour", "01:00", "three", "two hours"), or as an assumption with its reason.
Against a real model, give its --base-url and --model instead (and the key
in OPENAI_API_KEY).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from simulacra.cli import main
from simulacra.llm import CallSite, Completion, CompletionRequest, ScriptedServer
from simulacra.scenarios import normalize_space, read_documents

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
DOCS = HERE / "docs"


def passage(phrase: str) -> str:
    """The id of the passage of the documents that holds *phrase*."""
    for document in read_documents([DOCS]):
        for item in document.passages():
            if normalize_space(phrase) in normalize_space(item.text):
                return item.id
    raise LookupError(phrase)


def replies() -> dict[tuple[str, int], str]:
    alert = "the system account posts the warning to every member within one hour"
    sample = "Two hours after the alert, the moderators interview a small sample of members"
    cache = ("At 01:00 the ranking cache of the feed service failed. Until it was rebuilt, "
             "each member's feed showed only the three newest posts instead of eight, for two "
             "hours.")
    storm = {
        "name": "storm-alert",
        "description": "The weather service warns of a severe storm: the system account posts "
                       "the warning in step 1, and two hours later three members are asked "
                       "whether they saw it.",
        "interventions": [
            {"knob": "post", "at": 1,
             "value": "Severe storm warning from the weather service: stay indoors tonight "
                      "and check on your neighbours.",
             "note": "EA-2: the alert within one hour",
             "grounding": {
                 "value": {"assumption": "EA-2 gives no wording: the warning is written for "
                                         "the example, as the weather service would word it"},
                 "at": {"citation": 0, "text": "one hour"}}},
            {"knob": "interview", "at": 3,
             "value": "ada00,ben01,cleo02: Did you see the storm warning, and what will you "
                      "do tonight?",
             "note": "EA-2: the moderators' check, two hours after the alert",
             "grounding": {
                 "value": {"assumption": "a small sample (citation 1): three members of the "
                                         "50-agent config, asked the procedure's questions"},
                 "at": {"assumption": "two hours after the alert (citation 1), which is "
                                      "posted at step 1: 1 + 2 = 3"}}},
        ],
        "citations": [{"passage": passage(alert), "quote": alert},
                      {"passage": passage(sample), "quote": sample}],
    }
    outage = {
        "name": "feed-cache-outage",
        "description": "The feed's ranking cache fails in step 1: every feed shows the three "
                       "newest posts instead of eight, for two hours.",
        "interventions": [{"knob": "feed_size", "at": 1, "value": 3, "duration": 2,
                           "note": "IR-14: the ranking cache failed",
                           "grounding": {"value": {"citation": 0, "text": "three"},
                                         "at": {"citation": 0, "text": "01:00"},
                                         "duration": {"citation": 0, "text": "two hours"}}}],
        "citations": [{"passage": passage(cache), "quote": cache}],
    }
    return {("scenario-0", 0): json.dumps(storm, ensure_ascii=False, indent=2),
            ("scenario-1", 0): "```json\n" + json.dumps(outage, ensure_ascii=False) + "\n```"}


class Canned:
    """A language model that answers each call site with the reply written for it."""

    def __init__(self) -> None:
        self.replies = replies()

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        assert site is not None
        return Completion(self.replies[site.agent, site.n], model=request.model)

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        return self.complete(request, site=site)


def record() -> int:
    shutil.rmtree(HERE / "artifacts", ignore_errors=True)
    (HERE / "recordings.sqlite").unlink(missing_ok=True)
    rel = HERE.relative_to(ROOT).as_posix()
    with ScriptedServer(Canned()) as server:
        return main(["scenarios", "generate", f"{rel}/docs",
                     "--target", "examples/social/model.py:KNOBS",
                     "--until", "4", "--count", "2",
                     "--provider", "openai_compatible", "--base-url", server.base_url,
                     "--model", "example-designer",
                     "--record", f"{rel}/recordings.sqlite", "--out", f"{rel}/artifacts"])


if __name__ == "__main__":
    os.chdir(ROOT)
    raise SystemExit(record())
