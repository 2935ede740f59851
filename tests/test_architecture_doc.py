"""ARCHITECTURE.md's "Where to find it" stays true: every module and name its table points at exists."""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("", "app/core/", "app/")  # a reference is written from the repo root, or short under app/core or app


def _module(ref: str) -> tuple[Path, list[str]] | None:
    """The file a `pkg/module.Name.attr` reference names, and the names after it (None: no such file)."""
    ref = ref.split(" ")[0].rstrip("`")
    head, _, rest = ref.partition(".")
    if head.endswith(".py"):
        head, rest = head[:-3], ""
    if rest == "py":
        rest = ""
    for root in ROOTS:
        base = REPO / f"{root}{head}"
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path, [n for n in rest.split(".") if n]
        if "{" in head:
            return None
    return None


def _defines(path: Path, names: list[str]) -> bool:
    scope = ast.parse(path.read_text(encoding="utf-8"))
    for name in names:
        found = None
        for node in ast.walk(scope):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                found = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    found = node
            if found is not None:
                break
        if found is None:
            return False
        scope = found
    return True


def test_where_to_find_it_points_at_real_code():
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = text.split("## Where to find it", 1)[1].split("\n## ", 1)[0]
    refs = [r for r in re.findall(r"`([^`]+)`", table) if "/" in r and not r.startswith(("nightschool ", "cycle:"))]
    assert len(refs) > 30
    missing = []
    for ref in refs:
        if "{" in ref:  # capture/{claude,codex,gemini}
            stem, options = ref.split("{", 1)
            refs_of = [stem + o for o in options.rstrip("}").split(",")]
        else:
            refs_of = [ref]
        for one in refs_of:
            found = _module(one)
            if found is None or not _defines(*found):
                missing.append(one)
    assert missing == []
