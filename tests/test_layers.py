"""The layering rules of docs/design.md, checked on the source with ``ast``.

The package is two towers on a shared base: the kernel tower (core,
resources, pausable, scenarios, parallel) and the agent tower (agents,
backends, societies, distributed) both stand on the base (errors, rng,
executors, llm, trace), and the cli and the report stand on top of both.

Each package may import its own modules and the packages of lower layers,
never a package above it nor a sibling in its own layer. The base imports
neither tower, and the kernel tower never imports the agent tower (the agent
tower may use the kernel's public surface: societies run on ``core.Sim``).
Upper layers reach a lower package through its public ``__init__``, never
through its private modules. The bottom of the stack (errors, rng, core) is
pure standard library. No module imports one that imports it back, the front
door ``simulacra/__init__.py`` included.

The check reads source files and never imports them, so it also runs (and
fails usefully) while a layer is half written. Packages that do not exist yet
are simply absent.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

#: The layers of docs/design.md ("Layers import only downward"), bottom first,
#: as (layer number, packages). A package may import the packages of earlier
#: rows (within the tower rules below); packages in one row are siblings and
#: must not import each other. Layer 0 has two rows: ``rng`` is built on the
#: leaf modules ``errors`` and ``_util``.
TIERS: tuple[tuple[int, frozenset[str]], ...] = (
    (0, frozenset({"errors", "_util", "_version"})),
    (0, frozenset({"rng"})),
    (1, frozenset({"core", "executors", "llm"})),
    (2, frozenset({"resources", "trace", "pausable", "scenarios"})),
    (3, frozenset({"agents"})),
    (4, frozenset({"parallel"})),
    (5, frozenset({"backends", "societies"})),
    (6, frozenset({"distributed"})),
    (7, frozenset({"cli", "report"})),
    (7, frozenset({"__main__"})),  # `python -m simulacra` runs the cli
)
#: Which part of the house each package is in: the shared base, one of the two
#: towers, or the top (the front door's users). The base imports only the base;
#: the kernel tower imports the base and itself; the agent tower imports the
#: base, itself and the kernel tower; the top imports anything below it.
PARTS: dict[str, frozenset[str]] = {
    "base": frozenset({"errors", "_util", "_version", "rng", "executors", "llm", "trace"}),
    "kernel tower": frozenset({"core", "resources", "pausable", "scenarios", "parallel"}),
    "agent tower": frozenset({"agents", "backends", "societies", "distributed"}),
    "top": frozenset({"cli", "report", "__main__"}),
}
PART = {package: part for part, packages in PARTS.items() for package in packages}
#: The parts each part may import.
PART_MAY_IMPORT: dict[str, frozenset[str]] = {
    "base": frozenset({"base"}),
    "kernel tower": frozenset({"base", "kernel tower"}),
    "agent tower": frozenset({"base", "kernel tower", "agent tower"}),
    "top": frozenset(PARTS),
}
RANK = {package: rank for rank, (_, packages) in enumerate(TIERS) for package in packages}
LAYER = {package: layer for layer, packages in TIERS for package in packages}

#: The front door, ``simulacra/__init__.py``: it re-exports every layer, so it
#: may import anything, and only the packages it does not re-export (the cli) may
#: import it. The report is re-exported (``build_report``, ``LiveView``), so an
#: import of the front door from it would close a circle.
FRONT_DOOR = "simulacra"
FRONT_DOOR_USERS = frozenset({"cli", "__main__"})

#: Packages whose imports must all be standard library...
STDLIB_ONLY = frozenset({"errors", "_util", "_version", "rng", "core"})
#: ...except these optional extras, imported lazily: inside a function or under
#: ``if TYPE_CHECKING:``, never when the module is imported.
LAZY_EXTRAS = frozenset({"numpy"})


@dataclass(frozen=True)
class Import:
    """One imported module (or name) as the checker sees it."""

    where: str  #: file:line, for the failure message
    importer: str  #: the importing module, e.g. "simulacra.core._kernel"
    target: str  #: the module imported, relative imports resolved
    name: str | None  #: for `from target import name` where name is not a module
    lazy: bool  #: inside a function or `if TYPE_CHECKING:`


def package_of(module: str) -> str:
    """Return the layer-table entry a simulacra module belongs to."""
    parts = module.split(".")
    return FRONT_DOOR if len(parts) == 1 else parts[1]


def modules_in(src: Path) -> dict[str, Path]:
    """Map every module name under ``src/simulacra`` to its file."""
    found = {}
    for path in sorted((src / "simulacra").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(
    nodes: Iterable[ast.AST], lazy: bool
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Yield each import statement, and whether it runs only lazily."""
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, lazy
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _import_nodes(node.body, True)
            yield from _import_nodes(node.orelse, lazy)
        else:
            in_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            yield from _import_nodes(ast.iter_child_nodes(node), lazy or in_function)


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    """Turn ``from ..x import y`` inside *importer* into an absolute module name."""
    if node.level == 0:
        assert node.module is not None
        return node.module
    parts = importer.split(".")
    if not is_package:
        parts.pop()
    if node.level > 1:
        parts = parts[: len(parts) - (node.level - 1)]
    assert parts, f"{importer}: relative import beyond the top-level package"
    base = ".".join(parts)
    return f"{base}.{node.module}" if node.module else base


def scan(src: Path) -> list[Import]:
    """Every import made by every module under ``src/simulacra``."""
    modules = modules_in(src)
    imports = []
    for importer, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, lazy in _import_nodes(tree.body, False):
            where = f"{path.relative_to(src)}:{node.lineno}"
            if isinstance(node, ast.Import):
                imports.extend(Import(where, importer, a.name, None, lazy) for a in node.names)
                continue
            base = _resolve(importer, is_package, node)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in modules or (
                    base == FRONT_DOOR and (alias.name in LAYER or alias.name == "__main__")
                ):
                    imports.append(Import(where, importer, submodule, None, lazy))
                else:
                    imports.append(Import(where, importer, base, alias.name, lazy))
    return imports


def _ours(target: str) -> bool:
    return target == FRONT_DOOR or target.startswith(FRONT_DOOR + ".")


def layer_violations(src: Path) -> list[str]:
    """Imports that go up the layer table, sideways to a sibling, or across the house
    against the tower rules (``PART_MAY_IMPORT``)."""
    problems = [
        f"{module}: package {package_of(module)!r} is not in the layer table of test_layers.py"
        for module in modules_in(src)
        if module != FRONT_DOOR and package_of(module) not in LAYER
    ]
    problems += [
        f"package {package!r} is in the layer table but in no part of the house (PARTS)"
        for package in sorted(LAYER) if package not in PART
    ]
    for imp in scan(src):
        source = package_of(imp.importer)
        if not _ours(imp.target) or imp.importer == FRONT_DOOR or source not in LAYER:
            continue
        target = package_of(imp.target)
        if target == source:
            continue
        if target == FRONT_DOOR:
            if source not in FRONT_DOOR_USERS:
                problems.append(
                    f"{imp.where}: {imp.importer} imports the front door `simulacra`, "
                    "which drags in every layer; import the defining package instead"
                )
        elif target not in LAYER:
            problems.append(f"{imp.where}: {imp.importer} imports unknown package {imp.target}")
        elif RANK[target] > RANK[source]:
            problems.append(
                f"{imp.where}: {imp.importer} (layer {LAYER[source]}) imports "
                f"{imp.target} (layer {LAYER[target]}), a layer above it"
            )
        elif RANK[target] == RANK[source]:
            problems.append(
                f"{imp.where}: {imp.importer} imports its sibling {imp.target} "
                f"(both layer {LAYER[source]})"
            )
        elif PART[target] not in PART_MAY_IMPORT[PART[source]]:
            problems.append(
                f"{imp.where}: {imp.importer} ({PART[source]}) imports {imp.target} "
                f"({PART[target]}): the {PART[source]} never imports the {PART[target]}"
            )
    return problems


def private_violations(src: Path) -> list[str]:
    """Imports of another package's private modules or names."""
    problems = []
    for imp in scan(src):
        if not _ours(imp.target) or imp.importer == FRONT_DOOR:
            continue
        if package_of(imp.target) == package_of(imp.importer):
            continue
        # Parts after simulacra.<package>; the top-level leaf modules
        # (simulacra._util, simulacra._version) are shared by design.
        inner = imp.target.split(".")[2:]
        private = [p for p in inner if p.startswith("_")]
        if imp.name is not None and imp.name.startswith("_") and not imp.name.startswith("__"):
            private.append(imp.name)
        if private:
            shown = imp.target + (f" import {imp.name}" if imp.name else "")
            problems.append(
                f"{imp.where}: {imp.importer} reaches into {shown}; use the public "
                f"surface of simulacra.{package_of(imp.target)} (add to it if something is missing)"
            )
    return problems


def stdlib_violations(src: Path) -> list[str]:
    """Imports outside the standard library made by the pure-stdlib packages."""
    problems = []
    for imp in scan(src):
        if package_of(imp.importer) not in STDLIB_ONLY or _ours(imp.target):
            continue
        top = imp.target.split(".")[0]
        if top in sys.stdlib_module_names or (imp.lazy and top in LAZY_EXTRAS):
            continue
        hint = " (import optional extras lazily)" if top in LAZY_EXTRAS else ""
        problems.append(
            f"{imp.where}: {imp.importer} imports {imp.target}, "
            f"which is not in the standard library{hint}"
        )
    return problems


def test_the_checker_sees_the_real_source() -> None:
    """Guard against a vacuous pass: the scan finds the modules and imports that exist."""
    modules = modules_in(SRC)
    assert {"simulacra.errors", "simulacra._util", "simulacra.cli"} <= set(modules)
    assert any(imp.importer.startswith("simulacra.cli") for imp in scan(SRC))


def test_no_module_imports_a_layer_above_its_own_or_a_sibling() -> None:
    """Every import points down the layer table of DESIGN.md section 2."""
    assert layer_violations(SRC) == []


def test_upper_layers_use_only_public_surfaces() -> None:
    """`resources` uses `simulacra.core`, never `simulacra.core._kernel`."""
    assert private_violations(SRC) == []


def test_kernel_and_below_import_only_the_standard_library() -> None:
    """errors, _util, _version, rng and core run on a bare Python."""
    assert stdlib_violations(SRC) == []


def test_importing_the_kernel_does_not_import_numpy() -> None:
    """numpy is an optional extra: `import simulacra.core` must not load it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    code = (
        "import sys, simulacra.core; print(sorted(m for m in sys.modules if m.startswith('numpy')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_checker_accepts_a_tree_that_follows_the_rules(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "simulacra/__init__.py": "from .core._kernel import Sim as Sim\nfrom . import cli\n",
            "simulacra/errors.py": "from __future__ import annotations\n",
            "simulacra/_util.py": "import typing\n",
            "simulacra/rng/__init__.py": "from simulacra.errors import ConfigError\n",
            "simulacra/core/__init__.py": "from ._kernel import Sim as Sim\n",
            "simulacra/core/_kernel.py": """\
                import heapq
                from typing import TYPE_CHECKING
                from .. import errors
                from ..rng import SeedTree
                from simulacra._util import claim_public_module
                if TYPE_CHECKING:
                    import numpy
                def np_rng():
                    import numpy.random
                """,
            "simulacra/resources/__init__.py": "from simulacra.core import Sim\n",
            "simulacra/cli/_main.py": """\
                from simulacra._version import __version__
                from . import _other
                def command():
                    import simulacra
                """,
            "simulacra/cli/_other.py": "",
            "simulacra/__main__.py": "from simulacra.cli import main\n",
        },
    )

    assert layer_violations(tmp_path) == []
    assert private_violations(tmp_path) == []
    assert stdlib_violations(tmp_path) == []


def test_checker_reports_each_kind_of_violation(tmp_path: Path) -> None:
    """The tests above can fail: every rule is caught on a synthetic tree."""
    _write(
        tmp_path,
        {
            "simulacra/__init__.py": "",
            "simulacra/errors.py": "import simulacra.core\n",  # upward, from layer 0
            "simulacra/core/__init__.py": "",
            "simulacra/core/_kernel.py": """\
                from ..resources import Resource
                from .. import trace
                import simulacra.executors
                import numpy
                import attrs
                """,
            "simulacra/resources/__init__.py": """\
                from simulacra.core._kernel import Sim
                from simulacra.core import _heap_push
                from ..trace import Recorder
                import simulacra
                """,
            "simulacra/trace/__init__.py": "from simulacra.core import Sim\n",
            "simulacra/agents/__init__.py": "",
            "simulacra/parallel/__init__.py": "from simulacra.agents import Agent\n",
            "simulacra/widgets/__init__.py": "",
        },
    )

    layers = "\n".join(layer_violations(tmp_path))
    private = "\n".join(private_violations(tmp_path))
    stdlib = "\n".join(stdlib_violations(tmp_path))

    assert "errors.py:1: simulacra.errors (layer 0) imports simulacra.core (layer 1)" in layers
    assert "_kernel.py:1: simulacra.core._kernel (layer 1) imports simulacra.resources" in layers
    assert "_kernel.py:2: simulacra.core._kernel (layer 1) imports simulacra.trace" in layers
    assert "_kernel.py:3: simulacra.core._kernel imports its sibling simulacra.executors" in layers
    assert "imports its sibling simulacra.trace (both layer 2)" in layers
    assert "simulacra.resources imports the front door" in layers
    assert "package 'widgets' is not in the layer table" in layers
    assert ("trace/__init__.py:1: simulacra.trace (base) imports simulacra.core "
            "(kernel tower): the base never imports the kernel tower") in layers
    assert ("parallel/__init__.py:1: simulacra.parallel (kernel tower) imports "
            "simulacra.agents (agent tower): the kernel tower never imports the agent "
            "tower") in layers
    assert "reaches into simulacra.core._kernel" in private
    assert "reaches into simulacra.core import _heap_push" in private
    assert "imports numpy, which is not in the standard library (import optional extras" in stdlib
    assert "imports attrs, which is not in the standard library" in stdlib
    assert len(layer_violations(tmp_path)) == 9
    assert len(private_violations(tmp_path)) == 2
    assert len(stdlib_violations(tmp_path)) == 2


# --------------------------------------------------------------------------- import circles


def _all_imports(nodes: Iterable[ast.AST]) -> Iterator[ast.Import | ast.ImportFrom | str]:
    """Every import a module expresses: at module level, in a function, under
    TYPE_CHECKING, and ``importlib.import_module("simulacra...")`` with a literal name."""
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and node.args[0].value.startswith("simulacra")):
            yield node.args[0].value
        yield from _all_imports(ast.iter_child_nodes(node))


def _lazy_table(tree: ast.Module) -> Iterator[str]:
    """The modules named by the front door's ``_LAZY`` table (name -> ``".package"``),
    which its ``__getattr__`` imports on first use."""
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        value = node.value if isinstance(node, ast.AnnAssign | ast.Assign) else None
        if isinstance(target, ast.Name) and target.id == "_LAZY" and isinstance(value, ast.Dict):
            for item in value.values:
                if isinstance(item, ast.Constant) and isinstance(item.value, str):
                    yield FRONT_DOOR + item.value if item.value.startswith(".") else item.value


def import_graph(src: Path) -> dict[str, set[str]]:
    """Module -> the simulacra modules it imports (a package means its ``__init__``)."""
    modules = modules_in(src)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for importer, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        if importer == FRONT_DOOR:
            graph[importer].update(t for t in _lazy_table(tree) if t in modules)
        for node in _all_imports(tree.body):
            if isinstance(node, str):
                targets = [node]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(importer, path.name == "__init__.py", node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            graph[importer].update(t for t in targets if t in modules and t != importer)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_no_import_circles_in_src() -> None:
    """No module imports a module that imports it back: not lazily, not for types only,
    not by name through importlib.

    A package's ``__init__`` counts as a module: a module of a package that imported its
    own front (``from simulacra.backends import X`` inside ``backends``) would close one.
    The front door ``simulacra/__init__.py`` counts too: it imports every layer (lazily,
    through its ``_LAZY`` table), so a module it reaches must not import it back; the
    cli, which the front door does not import, is the one package that uses it.
    """
    graph = import_graph(SRC)
    assert {"simulacra.report", "simulacra.societies"} <= graph[FRONT_DOOR]  # not vacuous
    assert import_circles(graph) == []


def test_the_circle_check_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == [["a", "b", "c"]]


def test_the_circle_check_sees_the_front_door(tmp_path: Path) -> None:
    """A module the front door loads lazily that imports the front door closes a circle."""
    _write(
        tmp_path,
        {
            "simulacra/__init__.py": """\
                import importlib
                _LAZY: dict[str, str] = {"build_report": ".report"}
                def __getattr__(name):
                    return getattr(importlib.import_module(_LAZY[name], __name__), name)
                """,
            "simulacra/report/__init__.py": "from ._live import LiveView\n",
            "simulacra/report/_live.py": """\
                def where():
                    import simulacra
                    return simulacra.__file__
                """,
            "simulacra/cli/__init__.py": "def main():\n    import simulacra\n",
        },
    )

    assert import_circles(import_graph(tmp_path)) == [
        ["simulacra", "simulacra.report", "simulacra.report._live"]]
