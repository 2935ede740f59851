"""Judging what is served: the tiny model exported to GGUF (f16 and a 4-bit quant) is evaluated through llama.cpp on
the held-out set the HF evaluator uses — same tokens, same contexts, same judge — and the two evaluators agree on the
next actions and nearly on the loss; a quantization that loses more than the tolerance is flagged; a file that is not
a GGUF is refused with why."""
from __future__ import annotations

import math

import pytest

from app.cli.main import main as cli
from app.cli.school import print_gguf
from app.core.judge.evaluate import choose_set
from app.core.judge.gguf import Tolerance, compare, evaluate_gguf, keyed, served_vs_trained, set_tolerance, tolerance
from app.core.judge.records import JudgeError, Target
from app.core.judge.report import LOSSES, EvalReport, EvalSettings
from app.core.ship.exports import export
from app.ui.school.words import gguf_lines
from tests.conftest import write_jsonl

SETTINGS = EvalSettings(max_contexts=16, max_new_tokens=32)  # as `nightschool eval --max-contexts 16 …` asks
CAPITALS = [("France", "Paris"), ("Spain", "Madrid"), ("Italy", "Rome"), ("Germany", "Berlin"), ("Portugal", "Lisbon"),
            ("Japan", "Tokyo"), ("Egypt", "Cairo"), ("Peru", "Lima")]


def heldout_records() -> list[dict]:
    """Capital questions answered in text (the tiny model learned some) and tool-using sessions (it did not)."""
    from engine.workers.smoke import TOOL_PROMPT

    system = TOOL_PROMPT[0]
    records = [{"session_id": f"capital-{c}", "messages": [
        system, {"role": "user", "content": f"What is the capital of {c}?"},
        {"role": "assistant", "content": f"The capital of {c} is {p}."}]} for c, p in CAPITALS]
    for i, cmd in enumerate(["pytest -q", "ls -la", "git status"]):
        call = {"type": "function", "function": {"name": "Bash", "arguments": {"command": cmd}}}
        records.append({"session_id": f"tool-{i}", "messages": [
            system, {"role": "user", "content": f"Please run {cmd} for me."},
            {"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": "ok"},
            {"role": "assistant", "content": f"I ran {cmd}: it printed ok."}]})
    return records


def test_the_exported_gguf_is_judged_like_the_checkpoint(store, shippable_model, tmp_path, capsys):
    base = Target(str(shippable_model))
    exp = export(store, base, ["f16", "q4_k_m"], lora=False)
    heldout = write_jsonl(tmp_path / "heldout.jsonl", heldout_records())
    evset = choose_set(store, base, file=heldout)
    f16 = served_vs_trained(store, base, exp.path("f16"), evset, "f16", SETTINGS)
    q4 = served_vs_trained(store, base, exp.path("q4_k_m"), evset, "q4_k_m", SETTINGS)
    for got in (f16, q4):
        with capsys.disabled():  # the figures, for `pytest -s`
            print(f"{got['quant']}: outcome agreement {got['outcome_agreement']} over {got['contexts_compared']} "
                  f"contexts, same text {got['same_text']}, loss {got['metrics']['loss']['hf']:.5f} (HF) vs "
                  f"{got['metrics']['loss']['gguf']:.5f} (GGUF), relative {got['loss_rel']:+.5f}, "
                  f"time {got['elapsed_s']}")
        assert got["contexts_compared"] == got["contexts"] == 14 and got["examples"] == 11
        assert got["tokenization_matched"] == got["examples"]  # llama.cpp tokenises the rendered text like HF
        assert got["prompts_matched"] == got["contexts"]  # the GGUF's template renders every prompt like training
        assert got["outcome_agreement"] >= 0.75 and not got["flag"], got
        assert all(math.isfinite(got["metrics"][m]["gguf"]) for m in ("loss", "perplexity", "agreement", "reward"))
    assert abs(f16["loss_rel"]) < 0.001 and f16["outcome_agreement"] >= 0.9  # f16 is the checkpoint, rounded
    gguf = EvalReport.read(f16["gguf_eval"])
    assert gguf.runtime == "gguf" and gguf.quant == "f16" and gguf.gguf_sha256 == exp.file("f16")["sha256"]
    assert EvalReport.read(q4["gguf_eval"]).quant == "q4_k_m"
    hf_losses, gguf_losses = keyed(_hf_folder(store, f16), LOSSES), keyed(f16["gguf_eval"], LOSSES)
    assert hf_losses.keys() == gguf_losses.keys() and hf_losses  # the same examples, row for row
    for key, row in hf_losses.items():
        assert gguf_losses[key]["tokens"] == row["tokens"]
        assert gguf_losses[key]["nll"] == pytest.approx(row["nll"], rel=1e-3)
    _reusing_the_cache_changes_no_loss(exp.path("f16"))
    rows = keyed(f16["gguf_eval"])
    assert all({"outcome", "attempted", "valid", "student"} <= row.keys() for row in rows.values())
    again = evaluate_gguf(store, base, exp.path("f16"), evset, SETTINGS, "f16")
    assert again.cached and again.report.metrics == gguf.metrics
    capsys.readouterr()
    assert cli(["eval", "base", "--model", str(shippable_model), "--gguf", str(exp.path("q4_k_m")), "--data",
                str(heldout), "--max-contexts", "16", "--max-new-tokens", "32"]) == 0  # both cached: instant
    out = capsys.readouterr().out
    assert "checkpoint (HF)" in out and "GGUF q4_k_m" in out
    assert f"same next-action outcome: {q4['outcome_agreement']:.0%} of 14" in out
    assert "tokenised like HF: 11 of 11 examples" in out


def _reusing_the_cache_changes_no_loss(path):
    """Examples evaluated in token order keep the KV cache of the beginning they share with the one before: the same
    NLL as evaluated alone, fewer tokens evaluated."""
    from engine.workers.evaluate_gguf import Served

    served = Served(path, n_threads=None)
    try:
        shared = served.tokens("The capital of France is Paris. The capital of Spain is Madrid. " * 3)
        a, b = shared + served.tokens(" Rome is in Italy."), shared + served.tokens(" Lima is in Peru.")
        served.load(len(a) + len(b), logits_all=True)
        mask = [1] * len(b)
        served.nll(a, [1] * len(a))
        after_a = served.nll(b, mask)
        assert served.reused == len(shared)
        served.llm.reset()
        alone = served.nll(b, mask)
        assert after_a[1] == alone[1] and after_a[0] == pytest.approx(alone[0], rel=1e-4)
    finally:
        served.close()


def _hf_folder(store, result: dict):
    from app.core.base.schema import EvalRow

    with store.session() as s:
        return s.get(EvalRow, result["hf_eval"]).report_path.rsplit("/", 1)[0]


def _report(loss: float, agreement: float) -> EvalReport:
    return EvalReport(label="x", base_model="m", eval_set="s", eval_set_sha256="0",
                      metrics={"loss": loss, "agreement": agreement}, quant="q4_k_m")


def _rows(*outcomes: str) -> dict[str, dict]:
    return {f"ctx{i}": {"outcome": o, "student": o} for i, o in enumerate(outcomes)}


def test_a_quantization_that_loses_too_much_is_flagged(store, capsys):
    hf, hf_rows = _report(2.0, 0.60), _rows("agree", "agree", "agree", "no_call")
    close = compare(hf, hf_rows, _report(2.05, 0.58), hf_rows)
    assert not close["flag"] and close["outcome_agreement"] == 1.0 and close["loss_rel"] == 0.025
    one_flip = compare(hf, hf_rows, _report(2.0, 0.50), _rows("agree", "agree", "rambling", "no_call"))
    assert not one_flip["flag"] and one_flip["lost"] == 1  # one action of a small set: noise, not a flag
    lossy = compare(hf, hf_rows, _report(2.3, 0.50), _rows("agree", "no_call", "rambling", "other_tool"))
    assert lossy["flag"] and lossy["outcome_agreement"] == 0.25 and lossy["same_text"] == 1
    assert (lossy["lost"], lossy["gained"]) == (2, 0)  # the last context changed, but it was no agreement either way
    assert any("held-out loss 2.000 → 2.300" in r for r in lossy["reasons"])
    assert any("agreement 0.60 → 0.50" in r and "2 actions lost, 0 gained" in r for r in lossy["reasons"])
    lines = gguf_lines({"gguf": lossy})  # the School tab's report card
    assert lines[0].startswith("Shipped q4_k_m (llama.cpp) vs checkpoint: held-out loss 2.300 vs 2.000")
    assert "same next action in 25% of 4" in lines[0] and lines[1].startswith("⚠ held-out loss")
    assert gguf_lines({"gguf": {"error": "no held-out set"}}) == ["Shipped file not judged: no held-out set"]
    print_gguf(lossy)  # `nightschool school show`: the card's figures side by side
    out = capsys.readouterr().out
    assert "Shipped q4_k_m" in out and "same next-action outcome: 25% of 4 — FLAGGED: held-out loss" in out
    assert any(line.split()[:4] == ["loss", "2", "2.3", "+0.3"] for line in out.splitlines())
    assert tolerance(store) == Tolerance()
    set_tolerance(store, Tolerance(loss_rel=0.2, agreement_drop=0.2))
    assert not compare(hf, hf_rows, _report(2.3, 0.50), _rows("agree", "no_call", "rambling", "other_tool"),
                       tolerance(store))["flag"]


def test_a_file_that_is_not_a_gguf_is_refused(store, tiny_model, tmp_path):
    base = Target(str(tiny_model))
    evset = choose_set(store, base, file=write_jsonl(tmp_path / "heldout.jsonl", heldout_records()))
    with pytest.raises(JudgeError, match="is not a file"):
        evaluate_gguf(store, base, tmp_path / "missing.gguf", evset, SETTINGS)
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"not a gguf at all")
    with pytest.raises(JudgeError, match="is not a GGUF file"):
        evaluate_gguf(store, base, fake, evset, SETTINGS)
