"""The import graph of app/, engine/, widgets/ and bench/ read from the source (ast), and the layer rules it must keep."""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "engine", "widgets", "bench")
# Lower layers never import higher ones. widgets are views given data: they import only widgets (and Qt).
LAYERS = [("app.core.base", 0), ("app.core", 1), ("app.ui", 2), ("app.cli", 2), ("app.mcp", 2), ("engine", 1),
          ("widgets", 0), ("bench", 3)]
MAY_IMPORT = {  # layer owner -> prefixes it may import from this project
    "widgets": ("widgets",),
    "app.core.base": ("app.core.base",),
    "app.core": ("app.core",),
    "engine": ("engine", "app.core"),
    "app.ui": ("app.ui", "app.core", "widgets"),
    "app.mcp": ("app.mcp", "app.core"),  # an adapter over the core's facade, like the CLI
    "app.cli": ("app.cli", "app.core", "app.ui", "app.mcp"),  # the CLI opens the window, or serves MCP
    "bench": ("bench", "app", "engine", "widgets"),  # benchmarks drive everything; nothing imports them
}
# The documented order of the packages inside a layer, lowest first (ARCHITECTURE.md): a package imports only those
# before it. A new package gets its place here on purpose.
ORDER = {
    "app.core.": ["base", "scrub", "toolcalls", "desktop", "enginenv", "workers", "capture", "datafiles",
                  "experience", "importer", "datasets", "train", "queue", "judge", "ship", "team", "runtime"],
    "app.core.runtime.": ["machinery", "school", "shipping", "supervisor"],
    "engine.": ["errors", "chat_template", "loading", "render", "train", "workers", "serve", "__main__"],
}
ENTRY = re.compile(r"^([a-z_][\w.]*):[A-Za-z_]\w*$")  # "package.module:Name", as a registry names what it imports


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "migrations" in path.parts and path.parent.name != "migrations":
                continue  # alembic's scripts run inside alembic
            found[module_name(path)] = path
    return found


def _absolute(node: ast.ImportFrom, current: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = current.split(".") if is_package else current.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports (anywhere in the file: imports inside functions count too; TYPE_CHECKING
    ones too; so do `importlib.import_module("…")` calls and "module:Name" registry strings).

    Inside a package, `from pkg import sub` is an edge to the module pkg.sub only, but `from pkg import Name` (a name
    pkg's `__init__` defines, in a function or not) is an edge to pkg: the child depends on that `__init__`, which may
    import the child back (a circle this check missed while it skipped every child -> parent edge). Only the implicit
    run of an ancestor's `__init__` when one of its modules is imported is no edge."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            targets.add(node.args[0].value)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (m := ENTRY.match(node.value)) \
                and m.group(1) in known:
            targets.add(m.group(1))
        elif isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, name, path.name == "__init__.py")
            if not (name == base or name.startswith(base + ".")):
                targets.add(base)  # as ever: `from pkg import …` outside pkg counts pkg too
            targets.update(base if a.name == "*" else f"{base}.{a.name}" for a in node.names)
    out = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def owner(module: str) -> str | None:
    """The layer a module belongs to: the longest LAYERS prefix."""
    best = None
    for prefix, _ in LAYERS:
        if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best)):
            best = prefix
    return best


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    """'a -> b' for every import a layer may not make."""
    bad = []
    for module, targets in sorted(edges.items()):
        layer = owner(module)
        allowed = MAY_IMPORT.get(layer or "", ())
        for target in sorted(targets):
            if not any(target == p or target.startswith(p + ".") for p in allowed):
                bad.append(f"{module} -> {target}")
    return bad


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def package_graph(edges: dict[str, set[str]], prefix: str = "app.core.") -> dict[str, set[str]]:
    """The graph between the packages (and top-level modules) directly under `prefix`."""
    def top(module: str) -> str | None:
        if not module.startswith(prefix):
            return None
        return prefix + module[len(prefix):].split(".")[0]
    out: dict[str, set[str]] = {}
    for module, targets in edges.items():
        if (src := top(module)) is None:
            continue
        out.setdefault(src, set()).update(t for x in targets if (t := top(x)) and t != src)
    return out


def out_of_order(edges: dict[str, set[str]]) -> list[str]:
    """'a -> b' for every package edge that goes up the documented ORDER, and 'unplaced: p' for a package not in it."""
    bad = []
    for prefix, order in ORDER.items():
        packages = package_graph(edges, prefix)
        for package, targets in sorted(packages.items()):
            short = package[len(prefix):]
            if short not in order:
                bad.append(f"unplaced: {package}")
                continue
            bad.extend(f"{package} -> {t}" for t in sorted(targets)
                       if t[len(prefix):] in order and order.index(t[len(prefix):]) > order.index(short))
    return bad
