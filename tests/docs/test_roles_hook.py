"""The MkDocs hook that shows docstrings' Sphinx roles as code (docs/_hooks/roles.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("roles_hook", ROOT / "docs/_hooks/roles.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rendered_roles_become_code_spans() -> None:
    hook = _hook()
    html = ("<p>A :class:<code>~simulacra.SeedTree</code>, :meth:<code>Sim.run</code>, "
            ":py:func:<code>~simulacra.llm.social_prompt</code> and a plain "
            "<code>:class:</code> left alone; time: 10:30.</p>")
    assert hook.on_page_content(html) == (
        "<p>A <code>SeedTree</code>, <code>Sim.run</code>, <code>social_prompt</code> and a "
        "plain <code>:class:</code> left alone; time: 10:30.</p>")


def test_the_hook_is_registered_and_its_folder_is_not_a_page() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "  - docs/_hooks/roles.py" in config
    assert "_hooks/" in config.split("exclude_docs:", 1)[1].split("\n", 2)[1]


def test_literal_block_markers_go_as_sphinx_drops_them() -> None:
    hook = _hook()
    html = ("<p>Example::</p>\n<pre><code>x = 1\n</code></pre>\n<p>::</p>\n"
            "<pre><code>y = 2\n</code></pre>\n<p>Equal, and a:: inside stays.</p>")
    assert hook.on_page_content(html) == (
        "<p>Example:</p>\n<pre><code>x = 1\n</code></pre>\n"
        "<pre><code>y = 2\n</code></pre>\n<p>Equal, and a:: inside stays.</p>")
