"""A cycle's report card: what it learned from (how much of it the student's own work, re-done), how long each stage
took, the held-out metrics of base / previous / candidate with deltas, the behavioural reward's parts (teacher / base /
candidate), the gate's verdict in words with each check's interval and counts, what was deployed, and examples it
gained or lost."""
from __future__ import annotations

from app.core.base.schema import EvalRow
from app.core.base.store import Store
from app.core.judge.blind.figure import of_checkpoint
from app.core.runtime.school.cycles import Cycle

EXAMPLES = 3


def _generations(store: Store, eval_id: int | None) -> dict[str, dict]:
    from app.core.judge.evaluate import generations

    if not eval_id:
        return {}
    with store.session() as s:
        row = s.get(EvalRow, eval_id)
    return {g["key"]: g for g in generations(row)} if row else {}


def _examples(cand: dict[str, dict], prev: dict[str, dict]) -> tuple[list[dict], list[dict]]:
    """Next actions the candidate now agrees on and the previous model did not (gained), and the reverse (lost)."""
    gained, lost = [], []
    for key, c in cand.items():
        p = prev.get(key)
        if p is None or (c["outcome"] == "agree") == (p["outcome"] == "agree"):
            continue
        item = {"prompt": c["prompt"][-600:], "teacher": c["teacher"][:600], "before": p["student"][:600],
                "after": c["student"][:600], "outcome_before": p["outcome"], "outcome_after": c["outcome"]}
        (gained if c["outcome"] == "agree" else lost).append(item)
    return gained[:EXAMPLES], lost[:EXAMPLES]


def reward_parts(base: list[dict], candidate: list[dict]) -> dict | None:
    """Each part of the behavioural reward (and its total) for the teacher's recorded actions, the base's and the
    candidate's answers on the same next actions (rewards.parts_table), with `fell`: the parts the candidate scores
    below the base. None for evaluations written before the reward context was stored with each next action."""
    from app.core.judge.rewards import answer_breakdowns, parts_table, teacher_breakdowns

    table = parts_table(teacher_breakdowns(candidate), base=answer_breakdowns(base),
                        candidate=answer_breakdowns(candidate))
    if table is None:
        return None
    return {**table, "fell": [p for p, m in table["parts"].items() if m["candidate"] < m["base"]]}


def _deltas(metrics: dict) -> dict:
    """metric -> {base, previous, candidate, vs_base, vs_previous}."""
    from app.core.judge.report import METRICS

    base, cand = metrics.get("base", {}), metrics.get("candidate", {})
    prev = metrics.get("deployed") or base
    out = {}
    for name in METRICS:
        b, p, c = base.get(name), prev.get(name), cand.get(name)
        out[name] = {"base": b, "previous": p, "candidate": c,
                     "vs_base": None if b is None or c is None else round(c - b, 4),
                     "vs_previous": None if p is None or c is None else round(c - p, 4)}
    return out


def _check(check: dict) -> dict:
    """One of the gate's paired comparisons as the card shows it: against which model, the change with its interval
    and counts, what the rules made of it, and its words."""
    keys = ("metric", "against", "before", "after", "delta", "relative", "low", "high", "confidence", "n", "unit",
            "gained", "lost", "p_value", "status", "ok", "text")
    return {k: check.get(k) for k in keys}


def own_work(built: dict) -> dict | None:
    """What the cycle learned from the student's own work: the examples and preference pairs its dataset took from
    accepted corrections, what the teacher did this cycle, and how many answers a later teacher session contradicted
    (None when the cycle built nothing)."""
    if "from_corrections" not in built:
        return None
    return {"examples": built.get("from_corrections", 0), "pairs": built.get("correction_pairs", 0),
            "teacher": built.get("corrections"), "contradicted": (built.get("contradicted") or {}).get("flagged", 0)}


def _own_words(own: dict | None) -> str:
    """The summary's words on the student's own work ("" when the cycle took none: the card's field still says 0)."""
    if own is None or not (own["examples"] or own["pairs"]):
        return ""
    examples, pairs = own["examples"], own["pairs"]
    return (f"{examples} example{'s' if examples != 1 else ''} and {pairs} preference pair{'s' if pairs != 1 else ''} "
            "from the student's own work")


def _summary(cycle: Cycle, deltas: dict, verdict: str, own: dict | None = None) -> str:
    agreement = deltas.get("agreement", {})
    loss = deltas.get("loss", {})
    parts = [f"cycle {cycle.id}"]
    if _own_words(own):
        parts.append(_own_words(own))
    for words, m in (("held-out loss", loss), ("agreement", agreement)):
        if m.get("candidate") is not None and m.get("previous") is not None:
            parts.append(f"{words} {m['previous']:.3f} → {m['candidate']:.3f}")
    if verdict:
        parts.append(f"gate: {verdict}")
    return ", ".join(parts)


def _gguf(check: dict | None) -> dict | None:
    """The exported file judged through llama.cpp: metric -> {hf, gguf, delta}, the evaluators' outcome agreement,
    and the flag with its reasons (or the error that kept it from being judged)."""
    if not check:
        return None
    if check.get("error"):
        return {"error": check["error"]}
    keep = ("quant", "file", "metrics", "outcome_agreement", "contexts_compared", "same_text", "loss_rel", "flag",
            "reasons", "tokenization_matched", "prompts_matched", "examples", "contexts", "elapsed_s")
    return {k: check.get(k) for k in keep}


def report_card(store: Store, cycle: Cycle) -> dict:
    built = cycle.outputs.get("building") or {}
    trained = cycle.outputs.get("training") or {}
    judged = cycle.outputs.get("judging") or {}
    deployed = cycle.outputs.get("deploying") or {}
    deltas = _deltas(judged.get("metrics") or {}) if judged else {}
    evals = judged.get("evals") or {}
    cand, base = _generations(store, evals.get("candidate")), _generations(store, evals.get("base"))
    prev = _generations(store, evals["deployed"]) if evals.get("deployed") else base
    gained, lost = _examples(cand, prev)
    parts = reward_parts(list(base.values()), list(cand.values())) if cand and base else None
    own = own_work(built)
    return {
        "dataset": built.get("dataset"), "fingerprint": built.get("fingerprint"), "examples": built.get("examples"),
        "sessions": cycle.inputs.get("new_sessions"), "own_work": own,
        "members": built.get("members"),  # a team's school: sessions and held-out sessions per member (counts only)
        "steps": trained.get("steps"),
        "checkpoint": judged.get("checkpoint") or trained.get("checkpoint"),
        "times": {stage: t.get("seconds") for stage, t in cycle.times.items()},
        "judged_by": judged.get("evaluator"), "evaluations": judged.get("evaluated"),  # seconds each; reused or not
        "metrics": deltas, "reward_parts": parts,  # part: teacher / base / candidate on the same next actions
        "verdict": judged.get("verdict"), "reasons": judged.get("reasons", []),
        "checks": [_check(c) for c in judged.get("checks") or []], "notes": judged.get("notes", []),
        "deployed": deployed.get("deployed"), "deployed_sha256": deployed.get("sha256"),
        "export": (cycle.outputs.get("exporting") or {}).get("export"),
        "gguf": _gguf((cycle.outputs.get("exporting") or {}).get("gguf")),
        "gained": gained, "lost": lost, "summary": _summary(cycle, deltas, judged.get("verdict") or "", own),
        "blind": of_checkpoint(store, judged.get("checkpoint") or trained.get("checkpoint")),
    }


def with_blind(store: Store, cycle: dict, every: list[dict] | None = None) -> dict:
    """A cycle (as data) whose report card carries its student's blind test figures as they are now: a test taken
    after the cycle ended counts on its card (judge/blind/figure.of_checkpoint; [] when the student was not tested).
    `every`: all the figures, read once for many cycles (School.blind_results)."""
    card = cycle.get("report") or {}
    if not card:
        return cycle
    ck = card.get("checkpoint")
    found = of_checkpoint(store, ck) if every is None else [r for r in every if ck is not None and
                                                            r["checkpoint_id"] == ck]
    return {**cycle, "report": {**card, "blind": found}}
