"""The one table of agents (capture/agents.py): every row complete, and no other place in the code names an agent."""
from __future__ import annotations

import ast
from pathlib import Path

from app.core.capture import agents

REPO = Path(__file__).resolve().parents[3]
SCANNED = ("app", "engine", "widgets")
# The places that may name an agent, and why
ALLOWED = {
    "app/core/capture/agents.py": "the table itself",
    "app/core/capture/parsers/": "each agent's own format: its parser and recognisers",
    "app/core/capture/hooks.py": "Claude Code's Stop hook: the whole module is that agent's (its AGENT names it once)",
    "app/core/ship/connect/": "the tools `nightschool connect` sets up for the served student: a table of its own, "
                              "not transcript formats",
}


def names() -> set[str]:
    """What names an agent: its name, labels and the variable that moves its folder."""
    return {v for a in agents.AGENTS.values() for v in (a.name, a.label, a.title, a.home_env) if v}


def named_in(source: str, words: set[str]) -> list[tuple[int, str]]:
    """(line, text) of every string in the code (docstrings aside) that is one of `words`, or that lists two of them
    (the agents typed out in a message)."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and (node.value in words or sum(w in node.value for w in words if " " in w or "-" in w) > 1)]


def test_no_other_place_names_an_agent():
    words, found = names(), []
    for package in SCANNED:
        for path in sorted((REPO / package).rglob("*.py")):
            where = path.relative_to(REPO).as_posix()
            if any(where == a or (a.endswith("/") and where.startswith(a)) for a in ALLOWED):
                continue
            found += [f"{where}:{line}: {text!r}" for line, text in named_in(path.read_text(encoding="utf-8"), words)]
    assert not found, "an agent is named outside capture/agents.py; read it from the table instead:\n" + \
        "\n".join(found)


def test_the_scan_catches_a_planted_name_and_spares_docstrings():
    planted = 'def f(agent):\n    """Only "codex" here is prose."""\n    return agent == "codex" or f"{agent}" == "x"\n'
    assert named_in(planted, names()) == [(3, "codex")]
    assert named_in('COLOURS = {"gemini": "#fff", "Claude Code": 1}\n', names()) == [(1, "gemini"), (1, "Claude Code")]
    listed = 'why = f"not a Claude Code or Gemini CLI transcript: {x}"\nhelp = "Claude Code hooks"\n'
    assert named_in(listed, names()) == [(1, "not a Claude Code or Gemini CLI transcript: ")]


def test_every_row_is_complete_and_its_functions_load():
    assert list(agents.AGENTS) == [a.name for a in agents.AGENTS.values()]
    for row in agents.AGENTS.values():
        refs = [row.parser, row.detect, row.resembles, row.document, row.owner, row.companions]
        assert all(callable(agents.load(ref)) for ref in refs if ref), row.name
        assert row.roots and row.files and row.colour.startswith("#"), row.name
    assert agents.asked()[-1].broad  # the broad recognisers are asked last
    assert agents.titles() == "Claude Code, Codex CLI or Gemini CLI"
