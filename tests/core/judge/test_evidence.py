"""The per-example evidence files (the format every evaluator writes): loss rows keyed by the example's messages (a
repeated example keeps its own row), read back beside a report and paired by key for the gate."""
from __future__ import annotations

from app.core.judge.evidence import Evidence, discordant, paired
from app.core.judge.report import GENERATIONS, LOSSES, EvalReport, example_key, loss_rows, write_rows

ONE = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
TWO = [{"role": "user", "content": "bye"}, {"role": "assistant", "content": "see you"}]


def test_loss_rows_are_keyed_by_content_and_skip_examples_without_assistant_tokens():
    rows = loss_rows([ONE, TWO, ONE, [{"role": "user", "content": "x"}]], [(3.0, 2), (5.0, 4), (3.5, 2), (0.0, 0)])
    assert [r["key"] for r in rows] == [example_key(ONE), example_key(TWO), example_key(ONE) + "~2"]
    assert example_key([dict(reversed(m.items())) for m in ONE]) == example_key(ONE)  # key order does not matter
    assert sum(r["nll"] for r in rows) == 11.5 and sum(r["tokens"] for r in rows) == 8


def write_eval(folder, losses, actions, label):
    report = EvalReport(label=label, base_model="m", eval_set="d/test", eval_set_sha256="s" * 64)
    report.write(folder)
    write_rows(folder / LOSSES, losses)
    write_rows(folder / GENERATIONS, actions)
    return Evidence.read(folder)


def test_evidence_is_read_beside_the_report_and_paired_by_key(tmp_path):
    cand = write_eval(tmp_path / "c", [{"key": "b", "nll": 2.0, "tokens": 2}, {"key": "a", "nll": 1.0, "tokens": 1},
                                       {"key": "only-here", "nll": 9.0, "tokens": 1}],
                      [{"key": "x", "outcome": "agree", "attempted": 1, "valid": 1, "reward": 0.5},
                       {"key": "y", "outcome": "no_call", "attempted": 0, "valid": 0, "reward": 0.1}], "cand")
    base = write_eval(tmp_path / "b", [{"key": "a", "nll": 4.0, "tokens": 1}, {"key": "b", "nll": 6.0, "tokens": 2}],
                      [{"key": "y", "outcome": "agree", "attempted": 2, "valid": 1, "reward": 0.3},
                       {"key": "x", "outcome": "agree", "attempted": 1, "valid": 0}], "base")
    assert cand.report.label == "cand" and set(cand.losses) == {"a", "b", "only-here"}
    assert paired("loss", cand, base) == ([(1.0, 1.0), (2.0, 2.0)], [(4.0, 1.0), (6.0, 2.0)], None)  # by key, sorted
    agree_c, agree_b, sessions = paired("agreement", cand, base)
    assert (agree_c, agree_b) == ([(1.0, 1.0), (0.0, 1.0)], [(1.0, 1.0), (1.0, 1.0)])
    assert sessions is None  # rows of older evidence name no session: the gate resamples them one by one
    assert discordant(agree_c, agree_b) == (1, 0)  # y: only the base agreed
    assert paired("validity", cand, base)[:2] == ([(1.0, 1.0), (0.0, 0.0)], [(0.0, 1.0), (1.0, 2.0)])
    assert paired("reward", cand, base)[:2] == ([(0.1, 1.0)], [(0.3, 1.0)])  # x has no reward on the base's side
    assert Evidence.read(tmp_path / "c" / "report.json").losses == cand.losses


def test_paired_units_carry_their_session_even_when_one_side_is_older(tmp_path):
    """A fresh candidate's loss rows name their sessions, a cached base evaluation's (written before) do not: the
    units still pair with their sessions; one unit without a session anywhere drops back to per-unit resampling."""
    rows = loss_rows([ONE, TWO], [(3.0, 2), (5.0, 4)], ["s1", "s2"])
    assert [r["session_id"] for r in rows] == ["s1", "s2"]
    cand = write_eval(tmp_path / "c", rows, [{"key": "x", "session_id": "s1", "outcome": "agree", "attempted": 1,
                                              "valid": 1}], "cand")
    old = [{k: v for k, v in r.items() if k != "session_id"} for r in rows]
    base = write_eval(tmp_path / "b", old, [{"key": "x", "session_id": "s1", "outcome": "no_call", "attempted": 0,
                                             "valid": 0}], "base")
    by_key = {example_key(ONE): "s1", example_key(TWO): "s2"}
    assert paired("loss", cand, base).sessions == [by_key[k] for k in sorted(by_key)]
    assert paired("loss", base, base).sessions is None
    assert paired("agreement", cand, base).sessions == ["s1"]
