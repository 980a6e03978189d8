"""The package's layers import each other without cycles.

The graph is read from the source (module-level imports only; imports inside functions and
``if TYPE_CHECKING:`` blocks are deferred by design and left out): an edge A -> B when a module
of layer A (``tensortune/A/...`` or ``tensortune/A.py``) imports one of layer B at load time.
"""
from __future__ import annotations

import ast
from pathlib import Path

import tensortune.registry

PKG = Path(tensortune.registry.__file__).resolve().parent


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _targets(node: ast.AST, package: str) -> set[str]:
    """Modules of tensortune that one import statement names (each imported name included)."""
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if target.startswith("tensortune"):
            return {target} | {f"{target}.{a.name}" for a in node.names}
    elif isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.startswith("tensortune")}
    return set()


def _package(path: Path) -> str:
    me = module_name(path)
    return me if path.name == "__init__.py" else me.rsplit(".", 1)[0]


def load_time_imports(path: Path) -> set[str]:
    """Modules of tensortune that ``path`` imports at module level."""
    tree = ast.parse(path.read_text())
    body = [node for node in tree.body
            if not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))]
    return {t for node in body for t in _targets(node, _package(path))}


def layer_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PKG.rglob("*.py"):
        src = layer_of(module_name(path))
        for target in load_time_imports(path):
            dst = layer_of(target)
            if dst and dst != src and ((PKG / dst).is_dir() or (PKG / f"{dst}.py").exists()):
                graph.setdefault(src, set()).add(dst)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_layers_import_without_cycles() -> None:
    graph = layer_graph()
    assert graph, "no imports found: the parser is broken"
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_leaf_modules_import_nothing_of_tensortune_but_leaves() -> None:
    assert load_time_imports(PKG / "errors.py") == set()
    assert {layer_of(m) for m in load_time_imports(PKG / "limits.py")} == {"errors"}
    assert {layer_of(m) for m in load_time_imports(PKG / "extras.py")} == {"errors"}
    assert {layer_of(m) for m in load_time_imports(PKG / "registry.py")} == {"errors", "extras"}
    assert {layer_of(m) for m in load_time_imports(PKG / "templates" / "registry.py")} <= {"registry", "space", "errors"}


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def every_import(path: Path) -> set[str]:
    """Modules of tensortune that ``path`` imports anywhere (deferred imports included)."""
    return {t for node in ast.walk(ast.parse(path.read_text())) for t in _targets(node, _package(path))}


def importers(layer: str) -> set[str]:
    """Layers with a module that imports ``layer`` (at load time or deferred)."""
    return {layer_of(module_name(p)) for p in PKG.rglob("*.py")
            if layer_of(module_name(p)) != layer and any(layer_of(t) == layer for t in every_import(p))}


def test_tiers_core_app_clients() -> None:
    # the command line is a client nobody imports; the app is imported by its clients only
    assert importers("cli") == set()
    assert importers("app") <= {"cli"}
    # utilities import only the leaves, and the task scheduler knows tasks, not models
    assert {layer_of(t) for p in (PKG / "utils").rglob("*.py") for t in every_import(p)} <= {"utils", "errors", "limits"}
    assert "scheduler" not in importers("models")
