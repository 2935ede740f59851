"""The panels share one kit: no panel module imports another panel's module, and the kit's names and the palette's
colours are defined once (an ast scan of app/ui and widgets; no Qt started)."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.layers import imports_of, modules

REPO = Path(__file__).resolve().parents[2]
SHARED = {"app.ui.kit", "app.ui.theme", "app.ui.background"}  # what every panel may use besides its own topic
KIT_NAMES = {"DIM", "FAINT", "GOOD", "WARN", "BAD", "BACKGROUND", "DIM_STYLE", "GOOD_STYLE", "WARN_STYLE",
             "BAD_STYLE", "HEAD_STYLE", "label", "heading", "button", "arrange", "splitter", "make_table", "fill",
             "key_at", "reselect", "local_time", "local_hhmm", "table", "dim_label", "rich_label"}
HOMES = {"app.ui.kit", "widgets.palette"}
VIEWS = ("panel", "boxes", "form", "pages")  # a tab's view modules (judge/blind_panel too)


def topic(name: str) -> str:
    """app.ui.first_run.pages → first_run; app.ui.ship.boxes → ship; app.ui.kit → kit: a tab's modules share its
    folder."""
    return name.split(".")[2]


def test_no_panel_module_imports_another_topics_module():
    found = modules()
    known = set(found)
    borrowed, panels = [], []
    for name, path in found.items():
        if not name.startswith("app.ui.") or not name.endswith(VIEWS):
            continue
        panels.append(name)
        for target in imports_of(name, path, known):
            if target.startswith("app.ui.") and target not in SHARED and topic(target) != topic(name):
                borrowed.append(f"{name} imports {target}")
    assert "app.ui.school.panel" in panels and "app.ui.judge.blind_panel" in panels
    assert not borrowed, ("panels borrow from other panels: " + "; ".join(borrowed)
                          + " — move what they share to app/ui/kit.py and import it from there")


def test_the_kits_names_are_defined_once():
    defined: dict[str, list[str]] = {}
    for name, path in modules().items():
        if not name.startswith(("app.ui", "widgets")):
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            names = [e.id for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])
                     if isinstance(e, ast.Name)]
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = [node.name]
            for n in names:
                if n in KIT_NAMES:
                    defined.setdefault(n, []).append(name)
    twice = {n: where for n, where in defined.items() if len(where) > 1 or not set(where) <= HOMES}
    assert not twice, (f"kit names defined outside the kit or more than once: {twice} — define them in "
                       "app/ui/kit.py (colours in widgets/palette.py) and import them")
