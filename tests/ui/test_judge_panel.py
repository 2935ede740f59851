"""GUI (offscreen): the Judge tab — tick the base and two checkpoints, Compare: the metric table shows each value with
its delta against the base, coloured by direction; the loss curves overlay; the side-by-side view shows the teacher's
action and each model's generation for one held-out prompt; the ranking puts the best composite score first. Promote
passes the gate for the better checkpoint (the deployed pointer names it), is refused for a worse one (the gate's
reasons shown), and Roll back returns to the base.

Evaluations recorded directly: the engine runs are covered in tests/core/judge. The checkpoints are registered rows over
real folders (no training), each model's EvalRow + report folder is what `evaluate` would have recorded for the
held-out file with the settings the tab judges with (a cycle's: runtime/school/policy.judge_settings), so `compare` and
`promote` find them in the cache."""
from __future__ import annotations

import json
import math
from pathlib import Path

from PySide6.QtCore import Qt

from app.core.base import protocol as P
from app.core.base.fingerprint import sha256_file
from app.core.base.schema import CheckpointRow, EvalRow, Job, Run
from app.core.judge import deployment as registry
from app.core.judge.evalset import EvalConfig
from app.core.judge.report import EvalReport, Sample
from app.core.runtime.school import policy
from app.core.runtime.school.policy import judge_settings
from tests.conftest import write_jsonl
from tests.tiny_model import chat_records

WAIT_MS = 15_000
TEACHER = "<tool_call>{\"name\": \"Read\", \"arguments\": {\"file_path\": \"main.py\"}}</tool_call>"
PROMPTS = {"k1": "[user] The tests fail in main.py: fix them.", "k2": "[user] What does add() return?"}
BASE = dict(loss=2.0, agreement=0.4, tool_agreement=0.5, validity=0.6, reward=0.3)
GOOD = dict(loss=1.2, agreement=0.6, tool_agreement=0.7, validity=0.8, reward=0.5)  # better everywhere
WORSE = dict(loss=1.9, agreement=0.3, tool_agreement=0.5, validity=0.6, reward=0.25)  # agreement falls


def metrics(values: dict) -> dict:
    return {**values, "perplexity": math.exp(values["loss"])}


def registered_job(store, manager, chat_file, model: str) -> tuple[int, int, Job]:
    """A completed job with a run, its training losses in events.jsonl, a step-10 checkpoint and a final adapter."""
    job = manager.submit(chat_file, model=model, start=False)
    run_dir = Path(job.spec_path).parent
    lines = [P.dumps(P.make(P.Metrics(step=s, loss=2.5 - 0.06 * s), job=job.id, seq=s)) for s in range(1, 21)]
    (run_dir / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    step10, final = run_dir / "checkpoints" / "checkpoint-10", run_dir / "adapter"
    step10.mkdir(parents=True)
    final.mkdir()
    with store.session() as s:
        s.get(Job, job.id).state = "completed"  # nothing for a scheduler or reconcile to pick up
        run = Run(job_id=job.id, run_dir=str(run_dir), socket_path=str(run_dir / "engine.sock"), state="completed")
        s.add(run)
        s.flush()
        rows = [CheckpointRow(run_id=run.id, step=10, kind="checkpoint", path=str(step10)),
                CheckpointRow(run_id=run.id, step=20, kind="adapter", path=str(final))]
        s.add_all(rows)
        s.flush()
        return rows[0].id, rows[1].id, job


CONTEXTS, EXAMPLES, TOKENS = 20, 24, 20  # as many as the gate needs for a verdict


def next_actions(label: str, values: dict, samples: list[Sample]) -> list[dict]:
    """generations.jsonl's rows, adding up to `values`: the first agreement × 20 agree (so a better model agrees
    wherever a worse one does), validity × 20 of the calls are valid, every reward is the mean."""
    agree, valid = round(values["agreement"] * CONTEXTS), round(values["validity"] * CONTEXTS)
    fixed = [s.model_dump() for s in samples] + [
        {"key": f"k{i}", "prompt": f"[user] Task {i}.", "teacher": "I did it.", "student": f"{label} does {i}"}
        for i in range(len(samples) + 1, CONTEXTS + 1)]
    return [{**row, "outcome": "agree" if i < agree else "no_call", "why": [], "reward": values["reward"],
             "attempted": 1, "valid": int(i < valid)} for i, row in enumerate(fixed)]


def record_eval(store, folder: Path, label: str, model: str, checkpoint_id: int | None, evfile: Path,
                values: dict) -> None:
    """An evaluation as `evaluate` records it: report.json, losses.jsonl and generations.jsonl (per-example rows that
    add up to the report's metrics), and the EvalRow the cache matches."""
    sha, settings = sha256_file(evfile), judge_settings(policy.load(store))  # as the tab judges (a cycle's)
    config = EvalConfig(eval_file=str(evfile), eval_set=evfile.name, eval_set_sha256=sha, settings=settings)
    samples = [Sample(key=k, prompt=p, teacher=TEACHER, student=f"{label} answers {k}",
                      outcome="agree" if values is GOOD else "no_call") for k, p in PROMPTS.items()]
    report = EvalReport(label=label, base_model=model, eval_set=evfile.name, eval_set_sha256=sha, examples=EXAMPLES,
                        contexts=CONTEXTS, metrics=metrics(values), samples=samples, settings=settings)
    path = report.write(folder)
    write_jsonl(folder / "losses.jsonl", [{"key": f"e{i}", "nll": values["loss"] * TOKENS, "tokens": TOKENS}
                                          for i in range(EXAMPLES)])
    write_jsonl(folder / "generations.jsonl", next_actions(label, values, samples))
    with store.session() as s:
        s.add(EvalRow(checkpoint_id=checkpoint_id, base_model=model, label=label, adapter_sha256=None,
                      eval_set=evfile.name, eval_set_sha256=sha, settings_sha256=config.settings_sha256(),
                      contexts=CONTEXTS, examples=EXAMPLES, metrics_json=json.dumps(report.metrics),
                      report_path=str(path)))


def judge_panel(qtbot, store):
    from app.ui.judge.controller import JudgeController
    from app.ui.judge.panel import JudgePanel

    panel = JudgePanel(JudgeController(store))
    qtbot.addWidget(panel)
    panel.resize(1280, 820)
    panel.show()
    qtbot.waitUntil(lambda: panel.models.count() == 3, timeout=WAIT_MS)  # the list is read on a thread
    return panel


def click(qtbot, button) -> None:
    assert button.isEnabled(), button.text()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def idle(panel) -> bool:
    return not panel.controller.busy


def test_compare_promote_refuse_and_roll_back(qtbot, store, manager, tiny_model, chat_file, tmp_path):
    model = str(tiny_model)
    step10, final, job = registered_job(store, manager, chat_file, model)
    evfile = write_jsonl(tmp_path / "heldout.jsonl", chat_records(8))
    for label, ck, values in (("base", None, BASE), (f"#{step10}", step10, WORSE), (f"#{final}", final, GOOD)):
        record_eval(store, tmp_path / "evals" / label.strip("#"), label, model, ck, evfile, values)
    panel = judge_panel(qtbot, store)
    assert panel.controller._judging() == judge_settings(policy.load(store))  # judged as a cycle judges: one cache
    good, worse = f"#{final} final", f"#{step10} step 10"  # the short labels (the job id is in the list's)

    panel.file_edit.setText(str(evfile))
    panel.set_checked([f"base:{model}", f"#{step10}", f"#{final}"])
    click(qtbot, panel.compare_button)
    qtbot.waitUntil(lambda: idle(panel), timeout=WAIT_MS)
    assert panel.table.labels() == ["base", good, worse], panel.banner.text()  # the list order: newest first

    # the table: values with deltas against the base (the reference), green where better, red where worse
    loss = panel.table.cell("loss", good)
    assert "1.200" in loss.text() and "(-0.800)" in loss.text()
    assert loss.foreground().color().name() == "#2ecc71"
    fell = panel.table.cell("agreement", worse)
    assert "(-0.100)" in fell.text() and fell.foreground().color().name() == "#ff6b6b"
    assert panel.table.cell("agreement", "base").text() == "0.400"
    assert "(reference)" in panel.table.horizontalHeaderItem(0).text()
    # the overlaid loss curves: the step-10 checkpoint's stops at its step, the final adapter's goes on
    assert len(panel.chart.points(worse)) == 10 and len(panel.chart.points(good)) == 20
    # side by side: the teacher's action and each model's generation for the chosen prompt
    panel.side_by_side.choose(1)
    shown = panel.side_by_side.shown()
    assert shown["prompt"] == PROMPTS["k2"] and shown["Teacher"] == TEACHER
    assert shown["base"] == "base answers k2" and shown[good] == f"#{final} answers k2"
    assert shown[worse] == f"#{step10} answers k2"
    assert panel.side_by_side.picker.count() == CONTEXTS  # the two fixed samples, then every other next action
    # the ranking: best composite first
    ranked = [panel.ranking.item(n).text() for n in range(panel.ranking.count())]
    assert ranked[0].startswith(f"1. #{final} {job.id} final") and ranked[1].startswith("2. base")
    assert ranked[2].startswith(f"3. #{step10} {job.id} step 10")

    # Promote the better checkpoint: the gate passes, the deployed pointer names it
    panel.ranking.setCurrentRow(0)
    click(qtbot, panel.promote_button)
    qtbot.waitUntil(lambda: panel.verdict.isVisible() and idle(panel), timeout=WAIT_MS)
    assert "PASS" in panel.verdict.toPlainText() and "promoted" in panel.verdict.toPlainText()
    assert "✓ held-out loss 2.000 → 1.200 (−40.0 %, 95 % CI −40.0 %…−40.0 % per example (the evidence names no " \
           "sessions), 24 examples) vs the base model: " \
           "improved" in panel.verdict.toPlainText()
    assert "(+4 of 20 actions: 4 gained, 0 lost, McNemar p 0.125, 95 % CI" in panel.verdict.toPlainText()
    assert registry.deployed(store, model).checkpoint_id == final
    assert f"#{final} {job.id} final" in panel.deployed.text()

    # Promote the worse one: refused, with the gate's reasons in the panel; the pointer stays
    panel.ranking.setCurrentRow(2)
    click(qtbot, panel.promote_button)
    qtbot.waitUntil(lambda: panel.verdict.isVisible() and idle(panel), timeout=WAIT_MS)
    text = panel.verdict.toPlainText()
    assert "FAIL" in text and "not promoted" in text
    # against the base: −25 % on the point estimate, 2 lost of 20 (McNemar p 0.5): said, not failed
    assert "· next-action agreement 0.400 → 0.300 (−2 of 20 actions: 0 gained, 2 lost" in text
    assert ("vs the base model: worse by 25 % on the point estimate (beyond the 15 % bound), not significantly: "
            "its interval reaches zero") in text
    assert "✗ held-out loss 1.200 → 1.900 (+58.3 %" in text  # against the deployed model's
    assert registry.deployed(store, model).checkpoint_id == final

    # Roll back: the base model is deployed again
    click(qtbot, panel.rollback_button)
    qtbot.waitUntil(lambda: registry.deployed(store, model).checkpoint_id is None and idle(panel), timeout=WAIT_MS)
    assert registry.deployed(store, model).action == "rollback"
    qtbot.waitUntil(lambda: "the base model" in panel.deployed.text(), timeout=WAIT_MS)


def test_compare_needs_two_models_and_explains_a_refusal(qtbot, store, manager, tiny_model, chat_file, tmp_path):
    step10, final, _ = registered_job(store, manager, chat_file, str(tiny_model))
    panel = judge_panel(qtbot, store)
    panel.set_checked([f"#{final}"])
    assert not panel.compare_button.isEnabled()
    panel.file_edit.setText(str(tmp_path / "missing.jsonl"))
    panel.set_checked([f"#{step10}", f"#{final}"])
    click(qtbot, panel.compare_button)
    qtbot.waitUntil(lambda: panel.banner.isVisible() and idle(panel), timeout=WAIT_MS)
    assert "Not compared" in panel.banner.text() and "is not a file" in panel.banner.text()


def test_the_main_window_has_a_judge_tab(qtbot, make_window):
    window = make_window()
    assert window.tabs.tabText(window.tabs.indexOf(window.judge)) == "Judge"
    window.tabs.setCurrentWidget(window.judge)
    qtbot.waitUntil(lambda: window.judge.models.count() == 1, timeout=WAIT_MS)  # the base model alone
    assert window.judge.models.item(0).text() == "base (default)"
