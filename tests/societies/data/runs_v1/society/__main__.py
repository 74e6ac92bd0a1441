"""``python examples/social``: the social-network demo, 50 LLM agents for 5 steps.

The same as ``simulacra run examples/social/config.yaml``: it runs the config
next to this file with the scripted model (no server, no key), writes a run
directory under ``runs/``, and prints the summary table. Extra arguments are
dotted overrides (``sim.steps=20 sim.agents=500``) or ``--out DIR``.
``simulacra replay RUN_DIR`` then re-runs it from the recordings. ``--scenario FILE``
runs it under a scenario (inject posts, resize feeds, interview agents; see
``scenarios/README.md`` and docs/scenarios.md).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from simulacra.cli import main

CONFIG = Path(__file__).resolve().parent / "config.yaml"

if __name__ == "__main__":
    sys.exit(main(["run", str(CONFIG), *sys.argv[1:]]))
