"""What the Judge and Datasets tabs say is meant for a person: equal composite scores tie (no "base ranks first"),
an outcome reads in words (not `no_call`), and a dataset's report names its counts in words (not `from_corrections`)
and explains its trained-token columns."""
from __future__ import annotations

from app.core.datasets.manifest import Manifest, SplitSize
from app.ui.datasets.controller import Details
from app.ui.datasets.panel import report_html
from app.ui.judge.controller import Column, Comparison, JudgeController
from app.ui.judge.panel import JudgePanel


def column(ref: str, label: str, short: str, checkpoint: int | None, outcome: str) -> Column:
    case = {"prompt": "user: list the files", "teacher": "<tool_call>ls</tool_call>", "student": "Sure.",
            "outcome": outcome}
    return Column(ref, label, short, checkpoint, {"loss": 1.0, "agreement": 0.5}, 0.4, {"k1": case})


def test_equal_scores_tie_and_outcomes_read_in_words(qtbot, store):
    controller = JudgeController(store)
    panel = JudgePanel(controller)
    qtbot.addWidget(panel)
    said = []
    controller.message.connect(lambda level, text: said.append(text))
    base = column("base:default", "base (default)", "base", None, "no_call")
    tuned = column("#1", "#1 job-a step 10", "#1 step 10", 1, "agree")
    controller._on_compared(Comparison("default", "held-out", [base, tuned], [base, tuned], 0))
    assert "tie" in said[-1] and "ranks first" not in said[-1], said[-1]
    assert [panel.ranking.item(n).text().split(".")[0] for n in range(2)] == ["1", "1"]
    notes = [pane.note.text() for pane in panel.side_by_side.panes if not pane.isHidden()]
    assert "no_call" not in " ".join(notes) and any("no tool call" in n for n in notes), notes


def test_a_datasets_report_names_its_counts_in_words(tmp_path):
    manifest = Manifest(name="sft-1", base_model="default", template_sha256="0" * 64, created_at="2026-01-01",
                        fingerprint="f" * 64, splits={"train": SplitSize(examples=4, sessions=2, tokens=200_000,
                                                                         trained_tokens=50_000)})
    html = report_html(Details("sft-1", tmp_path, manifest=manifest,
                               report={"counts": {"sessions": 2, "from_corrections": 3, "correction_pairs": 1}}))
    assert "from_corrections" not in html and "correction_pairs" not in html
    assert "examples from accepted corrections 3" in html
    assert "Trained share" in html and "the loss is computed on" in html and ">Share<" not in html
    assert "200,000" in html and "50,000" in html
