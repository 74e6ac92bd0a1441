"""Re-make the scenario-generation fixtures: recordings.sqlite and artifacts/.

    python tests/scenarios/data/make_fixtures.py

It runs ``simulacra scenarios generate`` over real HTTP against a
:class:`~simulacra.llm.ScriptedServer` on 127.0.0.1 that answers like the
scripted scenario responder, except that its first reply quotes words that
are not in the passage it cites: that reply is rejected, the model is asked
again, and the recordings hold both calls. The tests then replay the
recordings and expect these artifacts byte for byte. Run it again only when
the prompt changes on purpose (a replay then misses, naming the call site).
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from simulacra.cli import main
from simulacra.llm import CallSite, Completion, CompletionRequest, ScriptedServer
from simulacra.scenarios import scripted_scenario_model

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
#: The command, as the tests replay it (run from the repository root).
DOCS = "tests/scenarios/data/docs"
TARGET = "tests/scenarios/data/ferry.py:KNOBS"
OPTIONS = ["--count", "3", "--tries", "3", "--until", "480"]
MODEL = "ferry-designer"


class FirstQuoteWrong:
    """The scripted responder, but its first reply misquotes the passage it cites."""

    def __init__(self) -> None:
        self.inner = scripted_scenario_model()

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        completion = self.inner.complete(request, site=site)
        if site != CallSite("scenario-0", 0):
            return completion
        reply = json.loads(completion.text)
        reply["citations"][0]["quote"] = "the terminal never closes, whatever the weather"
        return replace(completion, text=json.dumps(reply))

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        return self.complete(request, site=site)


def make() -> int:
    out = HERE / "artifacts"
    shutil.rmtree(out, ignore_errors=True)
    with ScriptedServer(FirstQuoteWrong()) as server:
        status = main(["scenarios", "generate", DOCS, "--target", TARGET, "--out",
                       str(out.relative_to(ROOT)), *OPTIONS, "--provider", "openai_compatible",
                       "--base-url", server.base_url, "--model", MODEL,
                       "--record", str((HERE / "recordings.sqlite").relative_to(ROOT))])
        print(f"{server.calls} calls over HTTP", file=sys.stderr)
    return status


if __name__ == "__main__":
    import os

    os.chdir(ROOT)
    raise SystemExit(make())
