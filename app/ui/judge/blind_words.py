"""The blind test's words and HTML in the window, pure: a context and an answer as a person reads them (roles, turns,
tool calls as a tool heading over a key/value table or code blocks, never `<tool_call>` JSON), the keys, the progress,
the result, and the School tab's figure rows (judge/blind/render and figure give the data)."""
from __future__ import annotations

from html import escape

from app.core.judge.blind.figure import CHANCE, GOAL, percent, words
from app.core.judge.blind.render import ContextView, Part
from widgets.palette import DIM, FAINT, WARN

BETTER_WORDS = {"A": "A is better", "B": "B is better", "same": "both are as good"}
KEYS = ("Which answer is the agent's?  <b>1</b> A · <b>2</b> B · <b>0</b> can't tell  —  which is better (optional, "
        "before the pick)?  <b>←</b> A · <b>→</b> B · <b>↓</b> same  —  <b>Backspace</b> the previous trial · "
        "<b>Esc</b> stop for now")
ROLES = {"user": ("User", "#2b3a55", "#cfe0ff"), "assistant": ("Agent", "#2a3d2f", "#c8f0d2"),
         "tool": ("Tool result", "#3a3324", "#f3e2b8")}
OTHER_ROLE = ("", "#33343a", "#e4e6eb")
CODE_BG, KEY_COLOUR = "#15161a", DIM
INTRO = ("<h3>Can you tell them apart?</h3><p>Each trial shows a held-out context — what the agent saw before its next "
         "action, in sessions no training used — and two answers: the agent's recorded action and the student's "
         "answer to the same context, in random order. Say which one is the agent's (or that you can't tell), and, if "
         "you like, which answer is better.</p><p>Choose the model and the number of trials, then Start. You can "
         "stop at any point: Resume goes on at the first unanswered trial.</p><p style='color:%s'>The figure: the "
         "share of trials where the agent was not found (a wrong pick or can't tell) — 50 %% is chance, above 45 %% "
         "is the goal. It shows on the School tab.</p>" % DIM) + f"<p>The keys: {KEYS}.</p>"


# --- an answer, a context -----------------------------------------------------------------------------------------
def _para(text: str, style: str = "") -> str:
    return f"<p style='white-space:pre-wrap;margin:2px 0;{style}'>{escape(text)}</p>"


def _code(text: str) -> str:
    return (f"<table width='100%' cellpadding='5' cellspacing='0' bgcolor='{CODE_BG}'><tr><td>"
            f"<pre style='margin:0'>{escape(text)}</pre></td></tr></table>")


def _cut(chars: int) -> str:
    return f" <span style='color:{FAINT}'>(cut {chars:,} characters)</span>" if chars else ""


def call_html(part: Part) -> str:
    """A tool call: the tool's name as a heading, short arguments as a key/value table, code-like ones as code."""
    head = f"<p style='margin:6px 0 2px 0'><b>▸ {escape(part.tool)}</b>" + (
        "" if part.args else f" <span style='color:{FAINT}'>(no arguments)</span>") + "</p>"
    rows, blocks = [], []
    for arg in part.args:
        if arg.code:
            blocks.append(f"<p style='color:{KEY_COLOUR};margin:4px 0 1px 0'>{escape(arg.key)}{_cut(arg.cut)}</p>"
                          + _code(arg.value))
        else:
            rows.append(f"<tr><td style='color:{KEY_COLOUR}'>{escape(arg.key)}</td>"
                        f"<td style='white-space:pre-wrap'>{escape(arg.value)}{_cut(arg.cut)}</td></tr>")
    table = f"<table cellpadding='2' cellspacing='0'>{''.join(rows)}</table>" if rows else ""
    return head + table + "".join(blocks)


def parts_html(parts: tuple[Part, ...], empty: str = "(an empty answer)") -> str:
    """Text as written, each call as call_html, a call that does not parse as what was written, marked so."""
    out = []
    for part in parts:
        if part.kind == "call":
            out.append(call_html(part))
        elif part.kind == "broken":
            out.append(f"<p style='color:{WARN};margin:6px 0 2px 0'>▸ a tool call that does not parse:</p>"
                       + _code(part.text))
        else:
            out.append(_para(part.text))
    return "".join(out) or _para(empty, f"color:{FAINT}")


def _role(role: str) -> str:
    words, bg, fg = ROLES.get(role, OTHER_ROLE)
    return (f"<table cellpadding='3' cellspacing='0' bgcolor='{bg}'><tr><td style='color:{fg};font-weight:bold'>"
            f"{escape(words or role)}</td></tr></table>")


def context_html(view: ContextView) -> str:
    """The context's turns, each under its role, the turns before them counted, the tools it offered named."""
    lines = []
    if view.tools:
        lines.append(_para("Tools offered: " + ", ".join(view.tools), f"color:{FAINT}"))
    if view.earlier:
        lines.append(_para(f"… {view.earlier} earlier message{'s' if view.earlier != 1 else ''} not shown",
                           f"color:{FAINT}"))
    for turn in view.turns:
        cut = _cut(turn.cut)
        lines.append(f"<div style='margin-top:8px'>{_role(turn.role)}</div>" + (f"<p>{cut}</p>" if cut else "")
                     + parts_html(turn.parts, "(empty)"))
    return "".join(lines)


# --- progress and the result --------------------------------------------------------------------------------------
def trial_words(position: int, total: int, answered: int) -> str:
    return f"Trial {position + 1} of {total} · {answered} answered"


def resume_words(answered: int, total: int) -> str:
    return f"Resume ({answered} of {total} answered)"


def done_html(test_id: int, label: str, own: dict, result: dict | None) -> str:
    """A finished test: its own share (with its interval and n), then the model's figure over all its tests."""
    head = f"<h3>Blind test #{test_id} of {escape(label)} is finished</h3>"
    if own.get("share") is None:
        return head
    ci = (f", 95 % CI {own['low'] * 100:.0f}–{percent(own['high'])}" if own.get("low") is not None
          else ", no interval: one session")
    mine = (f"<p style='font-size:14pt'><b>{percent(own['share'])}</b> indistinguishable — {own['indistinguishable']} "
            f"of {own['trials']} trials{ci} ({own['sessions']} sessions).</p>")
    reached = "above" if own["share"] > GOAL else "below"
    goal = (f"<p style='color:{DIM}'>That is {reached} the goal of {percent(GOAL)}; a person who guesses gets "
            f"{percent(CHANCE)}.</p>")
    every = f"<p>All tests of this model: {escape(words(result))}</p>" if result and result["tests"] > 1 else ""
    again = (f"<p style='color:{DIM}'>The figure is on the School tab. Start draws a new test: next actions not "
             "shown to you before come first.</p>")
    return head + mine + goal + every + again


# --- the School tab ---------------------------------------------------------------------------------------------
def short_label(label: str) -> str:
    """A model's label without its job id: "#12 job-… final" -> "#12 final" (the checkpoint id alone is unique)."""
    words_ = label.split(" ")
    return f"{words_[0]} {' '.join(words_[2:])}" if len(words_) >= 3 and words_[0].startswith("#") else label


def figure_rows(results: list[dict]) -> list[tuple[str, float, float | None, float | None, int]]:
    """The chart's bars, the model tested first on the left: (label, share, low, high, trials); a teacher's figure
    is named so; a model with no answered trial is left out."""
    rows = []
    for r in reversed(results or []):
        if r.get("share") is None:
            continue
        name = short_label(r["model"]) + ("" if r["judge"] == "person" else " (teacher)")
        rows.append((name, r["share"], r.get("low"), r.get("high"), r["trials"]))
    return rows


def blind_lines(card: dict) -> list[str]:
    """A report card's blind test figures as lines (its student's, by each judge)."""
    return ["Blind test: " + words(r) for r in card.get("blind") or []]
