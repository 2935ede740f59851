"""The bus's event types are declared once (bus.Kind): the tree publishes only declared kinds, and a person is told
about every NOTIFY kind in words of its own."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from app.core.runtime.machinery.bus import CYCLE_ENDS, NOTIFY, Bus, Kind
from app.core.runtime.school.cycles import ENDED
from app.ui.school.words import notice_text

REPO = Path(__file__).resolve().parents[3]


def test_publish_stamps_declared_kinds_and_refuses_others():
    bus = Bus()
    seen = []
    bus.subscribe(seen.append)
    event = bus.publish(Kind.CYCLE_DONE, cycle=3)
    assert event["type"] == "cycle.done" and type(event["type"]) is str  # plain text on the wire (JSON, the channel)
    assert bus.publish("cycle.stage", cycle=3, stage="training")["seq"] == event["seq"] + 1  # the wire form is a kind
    with pytest.raises(ValueError):
        bus.publish("cycle.finished", cycle=3)  # a typo is caught where it is made, not by a view that never updates
    assert [e["type"] for e in seen] == ["cycle.done", "cycle.stage"]


def test_the_tree_publishes_kinds_not_strings():
    """Every `.publish(...)` in app/ and engine/ names a Kind (or a value from bus's own tables), never a literal."""
    literal = []
    for root in ("app", "engine"):
        for path in (REPO / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "publish"
                        and node.args and isinstance(node.args[0], ast.Constant)):
                    literal.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert literal == []


def test_every_cycle_end_has_a_kind_and_every_notice_its_words():
    assert set(CYCLE_ENDS) == set(ENDED)
    for kind in NOTIFY:
        title, _text, level = notice_text({"type": kind, "cycle": 7, "stage": "training", "reason": "why"})
        assert title != kind and level in ("info", "error"), kind
