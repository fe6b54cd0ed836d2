"""The import graph of src/bkeeper, read from the source: no circle, and nothing runs back up.

import-linter checks the layer contracts but not circles, and an import written inside a
function to dodge a circle at load time still ties the two modules together: here every
import counts wherever it is written, except those under ``if TYPE_CHECKING:`` (they never
run). The graph is at module granularity: relative imports are resolved, and
``from package import name`` where ``name`` is a submodule counts as importing that submodule.
The layers are read from the import-linter "layers" contract in pyproject.toml.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = "bkeeper"

Graph = Mapping[str, Iterable[str]]


def module_names(src: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``src`` by dotted name (a package by its own name)."""
    modules = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except the body of ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


def imports_of(source: str, module: str, is_package: bool, known: Iterable[str]) -> set[str]:
    """The modules among ``known`` that ``source`` (the text of ``module``) imports."""
    known = set(known)
    found = set()
    for node in _import_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
            continue
        base = _absolute(node, module, is_package)
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            found.add(submodule if submodule in known else base)
    return (found & known) - {module}


def import_graph(src: Path = SRC, package: str = PACKAGE) -> dict[str, set[str]]:
    modules = module_names(src, package)
    return {
        name: imports_of(path.read_text(), name, path.name == "__init__.py", modules)
        for name, path in modules.items()
    }


def _strongly_connected(graph: Graph) -> list[set[str]]:
    """Tarjan's components, iteratively (the graph is a few hundred modules deep at most)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    components.append(component)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def _shortest_cycle_through(graph: Graph, start: str, within: set[str]) -> tuple[str, ...]:
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph.get(node, ())):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return tuple(reversed(path))
            if child in within and child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is on no cycle")


def _rotated(cycle: tuple[str, ...]) -> tuple[str, ...]:
    first = cycle.index(min(cycle))
    return cycle[first:] + cycle[:first]


def cycles(graph: Graph) -> list[tuple[str, ...]]:
    """The shortest cycle through each module that is on one, each once, shortest first."""
    found = set()
    for component in _strongly_connected(graph):
        if len(component) == 1:
            (only,) = component
            if only in graph.get(only, ()):
                found.add((only,))
            continue
        found |= {_rotated(_shortest_cycle_through(graph, m, component)) for m in component}
    return sorted(found, key=lambda cycle: (len(cycle), cycle))


def _show(cycle: tuple[str, ...]) -> str:
    return " -> ".join([*cycle, cycle[0]])


@dataclass(frozen=True)
class Layers:
    """One layers contract: its floors, top first, and whether each is independent."""

    floors: list[list[str]]
    independent: list[bool]


def layers_contracts(pyproject: Path = ROOT / "pyproject.toml") -> list[Layers]:
    """Each import-linter "layers" contract: its layers, top first, each a list of modules
    (inside each of its ``containers``, when it has some), and whether each layer's modules
    are independent siblings (``|``) or may import each other (``:``)."""
    config = tomllib.loads(pyproject.read_text())
    found = []
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract["type"] != "layers":
            continue
        for container in contract.get("containers", [""]):
            prefix = f"{container}." if container else ""
            layers = [
                [prefix + name.strip().strip("()").strip() for name in re.split("[|:]", layer)]
                for layer in contract["layers"]
            ]
            found.append(Layers(layers, ["|" in layer for layer in contract["layers"]]))
    return found


def _place(module: str, layers: list[list[str]]) -> tuple[int, str] | None:
    """The floor (0 is the top) and the layer module that ``module`` belongs to."""
    for floor, members in enumerate(layers):
        for member in members:
            if module == member or module.startswith(member + "."):
                return floor, member
    return None


def upward_imports(graph: Graph, layers: list[list[str]], independent: list[bool]) -> list[str]:
    """``a -> b`` for each import into a higher floor, or across independent siblings."""
    wrong = []
    for module in sorted(graph):
        here = _place(module, layers)
        if here is None:
            continue
        for target in sorted(graph[module]):
            there = _place(target, layers)
            if there is None:
                continue
            if there[0] < here[0]:
                wrong.append(f"{module} -> {target} (up from {here[1]} to {there[1]})")
            elif there[0] == here[0] and there[1] != here[1] and independent[here[0]]:
                wrong.append(f"{module} -> {target} (across {here[1]} | {there[1]})")
    return wrong


def test_no_import_circle() -> None:
    found = cycles(import_graph())
    assert [_show(cycle) for cycle in found] == []


def test_no_import_runs_up_a_layer() -> None:
    graph = import_graph()
    contracts = layers_contracts()
    assert contracts  # the top-level contract at least
    wrong = [w for c in contracts for w in upward_imports(graph, c.floors, c.independent)]
    assert wrong == []


# The finder itself, on small graphs.


def test_cycle_finder_on_a_tiny_graph() -> None:
    graph = {
        "a": {"b"},
        "b": {"c", "a"},
        "c": {"a"},
        "d": {"d", "e"},
        "e": set(),
        "f": {"g"},
        "g": {"h"},
        "h": {"f"},
    }
    assert cycles(graph) == [("d",), ("a", "b"), ("a", "b", "c"), ("f", "g", "h")]


def test_cycle_finder_finds_nothing_in_a_tree() -> None:
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_imports_inside_functions_count_and_type_checking_ones_do_not() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import p.x\n"
        "from . import y\n"
        "from .z import thing\n"
        "from .. import w\n"
        "if TYPE_CHECKING:\n"
        "    from p.q import late\n"
        "else:\n"
        "    import p.r\n"
        "def f():\n"
        "    from p.s import helper\n"
    )
    known = {"p", "p.x", "p.y", "p.w", "p.q", "p.r", "p.s", "p.sub", "p.sub.m", "p.sub.z"}
    in_module = {"p.x", "p.sub", "p.sub.z", "p.w", "p.r", "p.s"}
    assert imports_of(source, "p.sub.m", False, known) == in_module
    # In a package's __init__, ``.`` is the package itself, and importing itself is no edge.
    assert imports_of(source, "p.sub", True, known) == in_module - {"p.sub"}


def test_upward_and_sideways_imports_are_named() -> None:
    layers = [["top"], ["left", "right"], ["base"]]
    graph = {"base.a": {"top.b"}, "left.c": {"right.d", "base.a"}, "top.b": {"left.c"}}
    assert upward_imports(graph, layers, [False, True, False]) == [
        "base.a -> top.b (up from base to top)",
        "left.c -> right.d (across left | right)",
    ]
    assert upward_imports(graph, layers, [False, False, False]) == [
        "base.a -> top.b (up from base to top)"
    ]


def test_layers_are_read_from_every_layers_contract(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        "[[tool.importlinter.contracts]]\n"
        'name = "top"\ntype = "layers"\nlayers = ["p.top", "(p.left) | p.right", "p.base"]\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "inner"\ntype = "layers"\ncontainers = ["p.left"]\nlayers = ["a", "b : c"]\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "other"\ntype = "forbidden"\nsource_modules = ["p"]\nforbidden_modules = ["q"]\n'
    )
    assert layers_contracts(pyproject) == [
        Layers([["p.top"], ["p.left", "p.right"], ["p.base"]], [False, True, False]),
        Layers([["p.left.a"], ["p.left.b", "p.left.c"]], [False, False]),
    ]
