"""examples/pausable/newsroom.py runs, is deterministic, and uses the real LLM layer."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "pausable" / "newsroom.py"

pytestmark = pytest.mark.timeout(120)


def _load() -> ModuleType:
    name = "pausable_newsroom_example"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.determinism
def test_the_newsroom_is_deterministic_and_every_post_is_published() -> None:
    newsroom = _load().newsroom
    first = newsroom(seed=3, writers=5)
    assert first == newsroom(seed=3, writers=5)
    assert newsroom(seed=4, writers=5)["digest"] != first["digest"]
    posts = first["posts"]
    assert list(posts) == [f"writer-{i}" for i in range(5)]
    for post in posts.values():
        assert post["drafts"] == len(post["notes"]) + 1  # one draft per review
        assert post["published"] == int(post["published"]) >= 1
    assert first["reviews"] == sum(p["drafts"] for p in posts.values())


def test_the_async_fan_in_gathers_every_item_once() -> None:
    items = _load().fan_in(writers=3)
    assert items == sorted((f"async-{i}", k) for i in range(3) for k in range(3))


@pytest.mark.slow
def test_the_script_runs_and_prints_the_same_desk_twice() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    runs = [
        subprocess.run([sys.executable, str(SCRIPT), "--seed", "2", "--writers", "3"],
                       capture_output=True, text=True, check=True, env=env, timeout=100)
        for _ in range(2)
    ]
    assert runs[0].stdout == runs[1].stdout
    assert "writer-2" in runs[0].stdout
    assert "async fan-in: 9 items from 3 agents" in runs[0].stdout


def test_the_first_example_in_the_docs_runs(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("simulacra.llm")
    text = (ROOT / "docs" / "pausable.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/pausable.md", "exec"), {})  # noqa: S102
    out = capsys.readouterr().out
    assert "AgentStatus.PAUSED ('review'," in out
