"""GUI (offscreen): the Datasets tab builds a dataset through the real worker (progress, report, selection), previews
an example with trained and masked tokens told apart, and shows a failed build's reason in the panel."""
from __future__ import annotations

import json
import os
from pathlib import Path

from PySide6.QtCore import Qt

from tests.conftest import SHARED

TIMEOUT_MS = 90_000
REAL_WORLD = SHARED / "fixtures" / "real-world"


def ingest_fixtures(store) -> None:
    from app.core.capture.ingest import Ingestor
    from app.core.capture.sources import CaptureConfig
    from app.core.importer import import_paths

    report = import_paths(Ingestor(store, CaptureConfig()), [REAL_WORLD])
    assert report.counts()[1] > 0  # sessions were stored


def datasets_tab(window):
    window.tabs.setCurrentWidget(window.datasets)
    return window.datasets


def fill_form(form, model: Path, **over) -> None:
    """What a user would set for the fixture sessions (short, some abandoned) and the tiny model."""
    form.model_edit.setText(str(model))
    form.max_length.setValue(512)
    form.min_steps.setValue(1)
    form.drop_abandoned.setChecked(False)
    for name, value in over.items():
        widget = getattr(form, name)
        widget.setText(value) if isinstance(value, str) else widget.setValue(value)


def build(qtbot, panel, timeout: int = TIMEOUT_MS) -> None:
    """Click Build and wait for the build to end (success or failure)."""
    with qtbot.waitSignal(panel.controller.finished, timeout=timeout):
        qtbot.mouseClick(panel.form.build_button, Qt.MouseButton.LeftButton)
        assert not panel.form.build_button.isEnabled() and panel.form.cancel_button.isVisible()


def built_panel(qtbot, make_window, store, tiny_model):
    ingest_fixtures(store)
    window = make_window()
    panel = datasets_tab(window)
    fill_form(panel.form, tiny_model)
    build(qtbot, panel)
    qtbot.waitUntil(lambda: panel.table.rowCount() == 1, timeout=TIMEOUT_MS)
    return window, panel


def test_a_build_through_the_panel_lists_selects_and_reports_the_dataset(qtbot, make_window, store, tiny_model):
    ingest_fixtures(store)
    window = make_window()
    panel = datasets_tab(window)
    assert panel.table.rowCount() == 0 and "captured sessions to build from" in panel.form.sessions_label.text()
    fill_form(panel.form, tiny_model, name_edit="first")
    seen: list[int] = []
    panel.form.progress_bar.valueChanged.connect(seen.append)
    build(qtbot, panel)
    qtbot.waitUntil(lambda: panel.table.rowCount() == 1, timeout=TIMEOUT_MS)

    assert max(seen) > 0  # the bar followed the worker's progress
    assert panel.form.build_button.isEnabled() and not panel.form.progress_bar.isVisible()
    row = [panel.table.item(0, c).text() for c in range(panel.table.columnCount())]
    assert row[0] == "first" and row[1] == "sft" and row[2] == tiny_model.name
    assert panel.selected == "first" and panel.table.selectionModel().selectedRows()[0].row() == 0
    assert "Built first:" in panel.banner.text() and window.statusBar().currentMessage().startswith("Built first")
    report = panel.report.toPlainText()
    filters = json.loads((Path(panel.rows["first"].path) / "report.json").read_text())["filters"]
    for name, removed in filters.items():  # every filter is listed with what it removed
        assert f"\n{name}\n{removed:,}\n" in report
    assert "Splits" in report and "Excluded examples" in report and tiny_model.name in panel.title.text()
    qtbot.waitUntil(lambda: "Intact" in panel.integrity.text(), timeout=TIMEOUT_MS)

    panel.form.mode.setCurrentText("full")  # the same sessions again: the registry finds it identical
    panel.form.name_edit.setText("second")
    build(qtbot, panel)
    assert "Identical to first: nothing new was stored." in panel.banner.text()
    assert panel.table.rowCount() == 1 and panel.selected == "first"
    if os.environ.get("NIGHTSCHOOL_SCREENSHOT"):
        screenshot(qtbot, window, panel)


def screenshot(qtbot, window, panel) -> None:
    from PySide6.QtWidgets import QApplication

    from app.ui.theme import apply_dark

    apply_dark(QApplication.instance())
    window.resize(1180, 740)
    qtbot.wait(200)
    base = os.environ["NIGHTSCHOOL_SCREENSHOT"]
    window.grab().save(base)
    panel.detail_tabs.setCurrentIndex(1)
    qtbot.wait(100)
    window.grab().save(base.replace(".png", "-preview.png"))


def test_the_preview_shows_trained_and_masked_tokens(qtbot, make_window, store, tiny_model):
    from widgets.token_preview import MASKED_FG, TRAINED_BG

    _window, panel = built_panel(qtbot, make_window, store, tiny_model)
    panel.detail_tabs.setCurrentIndex(1)
    folder = Path(panel.rows[panel.selected].path)
    lines = [json.loads(x) for x in (folder / "preview.jsonl").read_text().splitlines()]
    sizes = {s: sum(1 for x in lines if x["split"] == s) for s in ("train", "val", "test")}
    assert panel.split_box.currentData() == "train" and panel.of_label.text() == f"of {sizes['train']}"

    def expect(line: dict) -> None:
        html = panel.tokens.html()
        assert panel.tokens.plain_text() == "".join(text for text, _ in line["segments"])
        assert TRAINED_BG in html and MASKED_FG in html  # both kinds of token are there, told apart
        assert line["id"] in panel.example_meta.text()
        record = next(json.loads(x) for x in (folder / f"{line['split']}.jsonl").read_text().splitlines()
                      if json.loads(x)["id"] == line["id"])
        assert f"{record['tokens']:,} tokens, {record['trained']:,} trained" in panel.tokens.counts.text()

    expect(lines[0])
    panel.index.setValue(2)
    expect(lines[1])
    assert sizes["test"] > 0
    panel.split_box.setCurrentIndex(2)  # the test split: its lines come after train's and val's
    expect(lines[sizes["train"] + sizes["val"]])


def test_a_failed_build_shows_why_in_the_panel_and_can_be_retried(qtbot, make_window, tiny_model):
    window = make_window()  # nothing captured: there is nothing to build from
    panel = datasets_tab(window)
    fill_form(panel.form, tiny_model)
    build(qtbot, panel)
    assert panel.banner.isVisible() and "no examples to build" in panel.banner.text().lower()
    assert "Build failed" in panel.banner.text() and "loosen the filters" in panel.banner.text()
    assert panel.form.build_button.isEnabled() and panel.form.model_edit.isEnabled()
    assert not panel.form.cancel_button.isVisible() and panel.table.rowCount() == 0


def test_a_failure_that_no_longer_holds_goes_when_sessions_arrive(qtbot, make_window, store, tiny_model):
    """'Build failed: … 0 sessions stored' is about the sessions there were: once sessions are stored (by the
    capture, an import, the daemon) the banner goes by itself, and the count shows them."""
    from tests.ui.test_capture_panel import SOON_MS

    panel = datasets_tab(make_window())
    fill_form(panel.form, tiny_model)
    build(qtbot, panel)
    assert panel.banner.isVisible() and "0 sessions stored" in panel.banner.text()
    ingest_fixtures(store)
    qtbot.waitUntil(lambda: not panel.banner.isVisible(), timeout=SOON_MS)
    assert not panel.form.sessions_label.text().startswith("0 ")


def test_a_missing_base_model_fails_with_the_reason(qtbot, make_window, tmp_path):
    window = make_window()
    panel = datasets_tab(window)
    fill_form(panel.form, tmp_path / "no-such-model")
    build(qtbot, panel)
    assert "Build failed" in panel.banner.text() and "base model" in panel.banner.text()
    assert panel.form.build_button.isEnabled()


def test_cancel_stops_the_worker_and_stores_nothing(qtbot, make_window, store, tiny_model, ns_home):
    ingest_fixtures(store)
    window = make_window()
    panel = datasets_tab(window)
    fill_form(panel.form, tiny_model)
    with qtbot.waitSignal(panel.controller.finished, timeout=TIMEOUT_MS) as done:
        qtbot.mouseClick(panel.form.build_button, Qt.MouseButton.LeftButton)
        qtbot.mouseClick(panel.form.cancel_button, Qt.MouseButton.LeftButton)
    assert not done.args[0].ok and panel.banner.text() == "Build cancelled: nothing was stored."
    assert panel.form.build_button.isEnabled() and panel.table.rowCount() == 0
    assert list((ns_home / "datasets" / ".work").iterdir()) == []  # the worker's folder is gone


def test_the_report_groups_excluded_examples_by_check(tmp_path):
    from app.ui.datasets.controller import Details
    from app.ui.datasets.panel import report_html

    excluded = [{"session_id": "s1", "window": 0, "problems": [{"check": "leakage", "detail": "answer in prompt"}]},
                {"session_id": "s2", "window": 1, "problems": [{"check": "secret", "detail": "aws key at message 2"},
                                                               {"check": "leakage", "detail": "again <b>"}]}]
    html = report_html(Details("x", tmp_path, report={"filters": {"errored": 3}, "counts": {"excluded": 2},
                                                      "excluded": excluded}))
    assert "Excluded examples (2)" in html and "<b style='color:#ff8a8a'>leakage</b> (2)" in html
    assert "session s2 window 1: again &lt;b&gt;" in html and "aws key at message 2" in html
    assert "<td align='left'>errored</td><td align='right'>3</td>" in html


def test_lines_are_read_lazily_and_long_renderings_are_cut(qtbot, tmp_path):
    from app.ui.datasets.controller import JsonlLines
    from widgets.token_preview import MAX_CHARS, TokenPreview

    path = tmp_path / "x.jsonl"
    path.write_text("".join(json.dumps({"n": i, "pad": "z" * 500}) + "\n" for i in range(5000)))
    lines = JsonlLines(path)
    assert lines.get(2)["n"] == 2 and lines.scanned < path.stat().st_size  # only the first chunk was scanned
    assert lines.get(4999)["n"] == 4999 and lines.get(5000) is None and lines.get(-1) is None
    widget = TokenPreview()
    qtbot.addWidget(widget)
    widget.set_segments([["a" * MAX_CHARS, 0], ["b" * 10, 1]], tokens=100, trained=1)
    assert widget.cut == 10 and "10 more characters not shown" in widget.plain_text()
    assert "100 tokens, 1 trained" in widget.counts.text()


def test_a_preference_dataset_reports_its_pairs(tmp_path):
    """The report of a preference dataset (a hand-made folder: the worker is tested in tests/engine/test_pairs.py)."""
    import json

    from app.core.datasets import manifest
    from app.ui.datasets.controller import read_details
    from app.ui.datasets.panel import report_html

    pair = {"id": "p1", "prompt": [{"role": "user", "content": "fix it"}],
            "chosen": [{"role": "assistant", "content": "Let me read utils.py first."}],
            "rejected": [{"role": "assistant", "content": "Done!"}]}
    (tmp_path / "train.jsonl").write_text(json.dumps(pair) + "\n")
    (tmp_path / "report.json").write_text(json.dumps({"source": {"name": "sft-1"}, "contexts": 9, "agreed": 4,
                                                      "student_pairs": 5, "dropped_pairs": 0, "excluded": 0,
                                                      "truncated": 1}))
    manifest.write(tmp_path, manifest.Manifest(name="pairs-1", kind="preference", spec_id="preference_v1", base_model="default",
                                 template_sha256="t" * 64, created_at="2026-11-22T00:00:00", fingerprint="f" * 64,
                                 splits={"train": manifest.SplitSize(examples=1)}))
    html = report_html(read_details("pairs-1", tmp_path))
    assert "Student already agreed" in html and ">4<" in html and "sft-1" in html
    assert "Let me read utils.py first." in html and "Done!" in html


def test_sessions_stored_by_another_process_show_up_within_seconds(qtbot, make_window, tmp_path):
    """Issue item 1 on this tab: the count of sessions to build from follows a CLI import while the tab is open."""
    from tests.core.capture.helpers import write
    from tests.ui.test_capture_panel import SOON_MS, claude_records, cli

    for n, ask in enumerate(("First", "Second")):
        write(tmp_path / "exported" / f"s{n}.jsonl", *claude_records("/home/me/proj", ask, "Read", "ok"))
    panel = datasets_tab(make_window())
    assert panel.form.sessions_label.text().startswith("0 captured sessions")
    assert cli("capture", "import", str(tmp_path / "exported")).returncode == 0
    qtbot.waitUntil(lambda: panel.form.sessions_label.text().startswith("2 captured sessions"), timeout=SOON_MS)
