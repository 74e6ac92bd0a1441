"""simulacra.trace imports only the standard library and layer 0, and claims its names."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import simulacra.trace

TRACE_DIR = Path(__file__).resolve().parents[2] / "src" / "simulacra" / "trace"
ALLOWED_SIMULACRA = {"simulacra.errors", "simulacra._util"}


def _imports(path: Path) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, 0) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", node.level))
    return found


def test_trace_imports_only_stdlib_and_layer_0() -> None:
    files = sorted(TRACE_DIR.glob("*.py"))
    assert files
    for path in files:
        for module, level in _imports(path):
            if level == 1:  # a sibling inside simulacra.trace
                continue
            assert level == 0, f"{path.name}: relative import from a parent package"
            top = module.split(".")[0]
            if top == "simulacra":
                assert module in ALLOWED_SIMULACRA, f"{path.name} imports {module}"
            else:
                assert top in sys.stdlib_module_names or top == "__future__", (
                    f"{path.name} imports the third-party module {module}"
                )


def test_public_names_never_show_a_private_module() -> None:
    """Reprs and pickles show simulacra.trace.X (or simulacra.X once re-exported there)."""
    for name in simulacra.trace.__all__:
        obj = getattr(simulacra.trace, name)
        module = getattr(obj, "__module__", None)
        if isinstance(module, str) and module.startswith("simulacra"):
            assert module in {"simulacra", "simulacra.trace"}, name
