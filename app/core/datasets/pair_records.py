"""The preference_v1 record (`pair_record`): one shape, in conversational Hermes text, for the pairs the student's
answers make, for correction pairs, for the user's dropped preference files (`conversational`, `dropped_pairs`) and
for the blind test's trials where the judge found the student's answer worse (`blind_pairs`; their held-out contexts,
which the judge sets aside: `blind_contexts`).

Record (preference_v1, conversational), the same fields in every record: {"id", "source": "student" | "dropped" |
"correction" | "blind test", "session_id", "example_id" (the source SFT example), "turn" (the teacher message's index
in it; null for dropped and correction pairs), "truncated" (the student's answer hit max_new_tokens), "file_sha256"
(dropped: the file it came from), "correction_id", "experience_id", "teacher_model" (correction pairs: the
provenance; else null, "", ""), "blind_trial_id", "judge" (blind test pairs: the trial and who judged it, "person" or
"teacher"; else null, ""),
"prompt": [{role, content}…], "chosen": [{role: assistant, content}], "rejected": [{role: assistant, content}]};
every message is plain text with tool calls in the Hermes convention (`<tool_call>{"name", "arguments"}</tool_call>`),
so any trainer and any template can use it.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from sqlalchemy import select

from app.core.base.fingerprint import sha256_file
from app.core.base.schema import BlindTestRow, BlindTrialRow, DatasetFile
from app.core.base.schema.blind import student_was
from app.core.base.store import Store
from app.core.datafiles.formats import SPECS, record_problem
from app.core.datasets import manifest
from app.core.scrub.scrubber import Scrubber
from app.core.toolcalls.agreement import exact_agreement
from app.core.toolcalls.convention import as_text, parse_student

SPEC_ID = "preference_v1"
BLIND = "blind test"  # the source of a pair a blind test's judge made
# whose blind trials make pairs unless chosen otherwise: a person's (the refining stage, `dataset pairs`); a machine
# judge's only when asked (`--teacher-blind`). Their contexts come from held-out sessions: the judge sets each one
# aside once it was judged worse (`blind_contexts`), so training on it flatters no later gate or blind test
BLIND_JUDGES: tuple[str, ...] = ("person",)


def pair_id(prompt: list[dict], chosen: list[dict], rejected: list[dict]) -> str:
    return manifest.example_id([*prompt, {"role": "chosen"}, *chosen, {"role": "rejected"}, *rejected])


def _record(p: list[dict], c: list[dict], r: list[dict], **fields: Any) -> dict:
    """Every record has the same fields (one table for any trainer's loader), the messages last."""
    base = {"id": pair_id(p, c, r), "source": "student", "session_id": "", "example_id": "", "turn": None,
            "truncated": False, "file_sha256": "", "correction_id": None, "experience_id": "", "teacher_model": "",
            "blind_trial_id": None, "judge": ""}
    return {**base, **fields, "prompt": p, "chosen": c, "rejected": r}


def pair_record(prompt: list[dict], chosen: dict, rejected: dict, *, session_id: str = "", example_id: str = "",
                turn: int | None = None, truncated: bool = False, **provenance: Any) -> dict:
    """A preference_v1 record in conversational form: prompt messages, [chosen], [rejected], all as Hermes text.
    `truncated`: the student's answer was cut at max_new_tokens; `provenance`: source and a correction's fields."""
    return _record([as_text(m) for m in prompt], [as_text(chosen)], [as_text(rejected)], session_id=session_id,
                   example_id=example_id, turn=turn, truncated=truncated, **provenance)


def _side(value: Any, role: str) -> list[dict]:
    return [{"role": role, "content": value}] if isinstance(value, str) else value


def conversational(rec: dict, file_sha256: str) -> dict:
    """A dropped preference_v1 record (strings or message lists) in the same conversational text form."""
    prompt, chosen, rejected = _side(rec["prompt"], "user"), _side(rec["chosen"], "assistant"), \
        _side(rec["rejected"], "assistant")
    p, c, r = [as_text(m) for m in prompt], [as_text(m) for m in chosen], [as_text(m) for m in rejected]
    return _record(p, c, r, source="dropped", file_sha256=file_sha256)


def _read_records(path: Path) -> Iterator[Any]:
    text = path.read_text(encoding="utf-8", errors="replace").lstrip("\ufeff")
    if text.lstrip().startswith("["):
        try:
            yield from json.loads(text)
        except json.JSONDecodeError:
            return
        return
    for line in text.splitlines():
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def dropped_pairs(store: Store) -> tuple[list[dict], list[str], list[str]]:
    """(records, files used, files skipped with why) from the accepted preference_v1 files the user dropped; a file
    that changed or went away since it was checked is skipped, and so is every record failing the spec."""
    with store.session() as s:
        rows = list(s.scalars(select(DatasetFile).where(DatasetFile.spec == SPEC_ID, DatasetFile.accepted == 1)
                              .order_by(DatasetFile.id)))
    spec = SPECS[SPEC_ID]
    records: dict[str, dict] = {}
    used: list[str] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for row in rows:
        if row.sha256 in seen:
            continue
        seen.add(row.sha256)
        path = Path(row.path).expanduser()
        if not path.is_file():
            skipped.append(f"{row.path}: the file is gone")
            continue
        if sha256_file(path) != row.sha256:
            skipped.append(f"{row.path}: the file changed after it was added (add it again)")
            continue
        for rec in _read_records(path):
            if record_problem(spec, rec) is None:
                out = conversational(rec, row.sha256)
                records.setdefault(out["id"], out)
        used.append(row.path)
    return list(records.values()), used, skipped


@dataclass
class BlindFound:
    """What the blind test teaches: a pair per trial whose judge found the student's answer worse (the latest word
    on each context and answer), and the rest counted as evidence, never pairs: judged better, the same, or worse
    where the student's answer was the agent's action again (`agreed`)."""

    records: list[dict] = field(default_factory=list)
    evidence: Counter = field(default_factory=Counter)  # worse, better, same, agreed
    sessions: set[str] = field(default_factory=set)


def blind_pairs(store: Store, base_model: str, judges: tuple[str, ...] | list[str] = BLIND_JUDGES) -> BlindFound:
    """The blind trials of `base_model`'s models answered by `judges` with a better answer said, as preference pairs
    where the student's was worse: prompt = the context the student saw, chosen = the agent's recorded action,
    rejected = the student's answer (scrubbed, read as the miner reads it); source "blind test", the trial and the
    judge as provenance. A context judged again (another test, the same answer) counts once: its latest word."""
    t, r = BlindTestRow, BlindTrialRow
    found = BlindFound()
    if not judges:
        return found
    q = (select(r, t.judge).join(t, t.id == r.test_id)
         .where(t.base_model == base_model, t.judge.in_(list(judges)), r.pick.is_not(None), r.better.is_not(None))
         .order_by(r.answered_at, r.id))
    latest: dict[tuple, tuple[BlindTrialRow, str]] = {}
    with store.session() as s:
        for trial, judge in s.execute(q):
            s.expunge(trial)
            latest[(trial.context_key, trial.student, judge)] = (trial, judge)
    scrubber = Scrubber()
    for trial, judge in latest.values():
        was = student_was(trial.agent_side, trial.better)
        chosen, rejected = parse_student(trial.teacher), parse_student(scrubber.text(trial.student))
        if was == "worse" and exact_agreement(chosen, rejected):
            was = "agreed"
        found.evidence[was] += 1
        if was != "worse":
            continue
        found.records.append(pair_record(json.loads(trial.context_json), chosen, rejected, session_id=trial.session_id,
                                         turn=trial.turn, source=BLIND, blind_trial_id=trial.id, judge=judge))
        found.sessions.add(trial.session_id)
    return found


def blind_contexts(store: Store, base_model: str) -> frozenset[str]:
    """The held-out contexts (Context.key) the judge sets aside for `base_model`: every one a blind trial of its
    models was answered on with the student's answer worse, by any judge, at any time — a blind-test pair can be made
    of it (by default or when asked), so a model may have trained on it. The rule is one query and only grows:
    another trial's word on the same context (better, the same) does not bring it back, nor does a dataset left
    unbuilt or deleted; the held-out draws take other contexts instead (judge/evalset.set_aside)."""
    t, r = BlindTestRow, BlindTrialRow
    q = (select(r.context_key).join(t, t.id == r.test_id)
         .where(t.base_model == base_model, r.pick.is_not(None), r.better == r.agent_side).distinct())
    with store.session() as s:
        return frozenset(s.scalars(q))
