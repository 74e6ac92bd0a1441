"""Record the worked example: recordings.sqlite and artifacts/, over real HTTP.

    python examples/ride_hailing/scenarios/record.py

It starts an OpenAI-compatible server on 127.0.0.1 (simulacra.llm.ScriptedServer)
whose "model" answers with the replies written below, the kind a language
model gives, and runs

    simulacra scenarios generate examples/ride_hailing/scenarios/docs \
        --target examples/ride_hailing/model.py:KNOBS --until 600 --count 4 \
        --provider openai_compatible --base-url URL --model example-designer \
        --record examples/ride_hailing/scenarios/recordings.sqlite \
        --out examples/ride_hailing/scenarios/artifacts

against it. The first reply for the dual-station outage paraphrases its
source instead of quoting it: it is rejected, the model is told why and
asked again, and the recordings hold both calls. Every reply grounds each
value and time (the prompt asks it to; an ungrounded reply is rejected): in
the words of a quote that state it ("60 %", "150 minutes", "four hours",
"down"), or as an assumption with its reason where the documents state none.
Against a real model, give its --base-url and --model instead (and the key in
OPENAI_API_KEY).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

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
    heat = "Between 35 °C and 40 °C the charger delivers 60 % of rated power"
    feeder = "took stations 0 and 1 down at the same time"
    lasted = "The outage began 150 minutes into the afternoon peak and lasted four hours"
    third = "which cuts demand by about a third until the stations are back"
    grid = "The utility restores grid power within two hours in most outages"
    marked = "Dispatch marks the station as down"
    # Citation 0 says the stations went down, citation 1 when and for how long.
    down = {"value": {"citation": 0, "text": "down"},
            "at": {"citation": 1, "text": "150 minutes"},
            "duration": {"citation": 1, "text": "four hours"}}
    outage = [
        {"knob": "station_0", "at": 150, "value": False, "duration": 240,
         "note": "common-mode failure of the shared feeder", "grounding": down},
        {"knob": "station_1", "at": 150, "value": False, "duration": 240,
         "note": "common-mode failure of the shared feeder", "grounding": down},
    ]
    dual: dict[str, Any] = {
        "name": "dual-station-outage",
        "description": "A feeder fault takes stations 0 and 1 down together for four hours "
                       "from t=150; every vehicle that needs a charge queues at station 2.",
        "interventions": outage,
        "citations": [
            {"passage": passage(feeder), "quote": "took stations 0 and 1 down together"},
            {"passage": passage(lasted), "quote": lasted},
        ],
    }
    fixed = json.loads(json.dumps(dual))
    fixed["citations"][0]["quote"] = feeder
    reduced = {
        "name": "dual-outage-reduced-service-area",
        "description": "The dual-station outage, with OP-7's demand management: twenty "
                       "minutes in, the service area is reduced and demand falls by a third "
                       "until the stations are back.",
        "interventions": [*outage, {"knob": "demand", "at": 170, "value": 0.67,
                                    "duration": 220,
                                    "note": "OP-7: the service area is reduced"}],
        "citations": [{"passage": passage(feeder), "quote": feeder},
                      {"passage": passage(lasted), "quote": lasted},
                      {"passage": passage(third), "quote": third}],
    }
    reduced["interventions"][2]["grounding"] = {
        "value": {"assumption": "OP-7 cuts demand by about a third (citation 2): 1 - 1/3, "
                               "about 0.67 of normal demand"},
        "at": {"assumption": "the outage began at 150 (citation 1); the operations lead is "
                             "assumed to reduce the service area twenty minutes in, when the "
                             "report says the queues at station 2 had grown"},
        "duration": {"assumption": "until the stations are back (citation 2): the outage ends "
                                   "at 150 + 240 = 390, 220 after 170"},
    }
    return {
        ("scenario-0", 0): "```json\n" + json.dumps({
            "name": "heat-wave-derating",
            "description": "A heat wave pushes the depot above 35 °C in the early afternoon: "
                           "the chargers derate to 60 % of rated power for five hours.",
            "interventions": [{
                "knob": "charge_rate", "at": 120, "value": 0.6, "duration": 300,
                "note": "thermal derating between 35 and 40 °C",
                "grounding": {
                    "value": {"citation": 0, "text": "60 %"},
                    "at": {"assumption": "the specification gives no time: the depot is "
                                         "assumed to pass 35 °C two hours into the run, in the "
                                         "early afternoon"},
                    "duration": {"assumption": "the specification gives no length: five hours "
                                               "of afternoon heat are assumed"}}}],
            "citations": [{"passage": passage(heat), "quote": heat}],
        }, ensure_ascii=False, indent=2) + "\n```",
        ("scenario-1", 0): json.dumps(dual, ensure_ascii=False),
        ("scenario-1", 1): json.dumps(fixed, ensure_ascii=False),
        ("scenario-2", 0): json.dumps(reduced, ensure_ascii=False),
        ("scenario-3", 0): json.dumps({
            "name": "single-station-outage",
            "description": "Station 1 loses grid power at t=200; the utility restores it "
                           "two hours later, and vehicles charge at stations 0 and 2 meanwhile.",
            "interventions": [{
                "knob": "station_1", "at": 200, "value": False, "duration": 120,
                "note": "grid outage, restored within two hours",
                "grounding": {
                    "value": {"citation": 1, "text": "down"},
                    "at": {"assumption": "the procedure gives no time: an outage is assumed "
                                         "at t=200, in the afternoon"},
                    "duration": {"citation": 0, "text": "two hours"}}}],
            "citations": [{"passage": passage(grid), "quote": grid},
                          {"passage": passage(marked), "quote": marked}],
        }, ensure_ascii=False),
    }


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
    rel = HERE.relative_to(ROOT).as_posix()
    with ScriptedServer(Canned()) as server:
        return main(["scenarios", "generate", f"{rel}/docs",
                     "--target", "examples/ride_hailing/model.py:KNOBS",
                     "--until", "600", "--count", "4",
                     "--provider", "openai_compatible", "--base-url", server.base_url,
                     "--model", "example-designer",
                     "--record", f"{rel}/recordings.sqlite", "--out", f"{rel}/artifacts"])


if __name__ == "__main__":
    os.chdir(ROOT)
    raise SystemExit(record())
