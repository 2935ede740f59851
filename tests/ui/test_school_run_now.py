"""GUI (offscreen): Run now in the School tab — what is new for the school (a dataset built by hand neither lowers the
count nor makes the next cycle fail), nothing to learn is refused up front and starts no cooldown, and the banner that
announced a cycle gives way to how it ended."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from app.core.runtime.school import cycles
from app.core.runtime.school.facade import School
from tests.ui import test_school_panel as school_tab
from tests.ui.test_school_panel import WAIT_MS, read

panel = school_tab.panel  # the School tab's fixture, shared with its other tests


def ingested(store, folder: Path, count: int) -> None:
    from tests.core.datasets.helpers import ingest, write_session

    for i in range(count):
        write_session(folder, i)
    ingest(store, folder)


def test_a_manual_build_neither_lowers_the_count_nor_fails_run_now(qtbot, make_window, store, tiny_model, tmp_path):
    """Sessions a person's own dataset used (never trained) stay new for the school: the count keeps them and the
    cycle's build takes them again (before: "3 of 50" and a cycle that failed at building). No training here: the
    queue is paused, so the cycle stops at its training stage with its job queued."""
    from app.core.datasets.catalog import Registry
    from app.core.queue.scheduler import Queue
    from tests.ui.test_datasets_panel import build, datasets_tab, fill_form

    ingested(store, tmp_path / "agent" / "-home-me-proj", 8)
    school = School(store)
    for key, value in {"base_model": str(tiny_model), "max_length": 512, "near_duplicate": 0.0, "min_sessions": 50,
                       "test_share": 0.2}.items():
        school.set_policy(key, value)
    Queue(store).pause()
    window = make_window()
    datasets = datasets_tab(window)
    fill_form(datasets.form, tiny_model, name_edit="by-hand")  # built by a person, never trained on
    build(qtbot, datasets)
    qtbot.waitUntil(lambda: datasets.table.rowCount() == 1, timeout=WAIT_MS)
    registry = Registry(store)
    by_hand = registry.get("by-hand")
    held = registry.heldout(str(tiny_model))
    trainable = {u.session_id for u in registry.sessions_of(by_hand.id) if u.split in ("train", "val")}
    assert trainable  # the person's dataset used sessions for training …

    panel = window.school
    window.tabs.setCurrentWidget(panel)
    read(qtbot, panel)
    assert panel.sessions.format() == f"sessions {8 - len(held)}/50"  # … and they are still new for the school
    assert panel.next_lines.text().startswith(f"{8 - len(held)} new sessions — captured sessions no cycle of model "
                                              "has trained on yet")
    qtbot.waitUntil(panel.run_button.isEnabled, timeout=WAIT_MS)
    qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)

    def past_building():
        found = cycles.history(store, 1)
        return found and (found[0].state in cycles.ENDED or found[0].stage != "building") and found[0]

    qtbot.waitUntil(lambda: bool(past_building()), timeout=90_000)
    cycle = past_building()
    assert cycle.state == "running" and cycle.stage == "training", (cycle.state, cycle.reason)
    built = registry.get(cycle.outputs["building"]["dataset"])  # the same examples: the person's dataset is taken
    reused = {u.session_id for u in registry.sessions_of(built.id) if u.split in ("train", "val")}
    assert trainable <= reused  # the person's train sessions are the cycle's to train on
    qtbot.waitUntil(lambda: _job(store, cycle.id) is not None, timeout=WAIT_MS)
    job = _job(store, cycle.id)
    assert job.state == "queued" and Path(job.dataset_path).parent == Path(built.path).resolve()
    assert panel.banner.text() == f"Cycle {cycle.id} starts now."


def _job(store, cycle_id: int):
    from app.core.base.schema import Job

    with store.session() as s:
        return s.query(Job).filter(Job.source == f"cycle:{cycle_id}:training").first()


def test_run_now_with_nothing_to_learn_is_refused_and_starts_no_cooldown(qtbot, make_window, store):
    """An empty school: Run now says why up front and records no cycle (before: a failed cycle and 60 minutes of
    cool-down before the next automatic one)."""
    window = make_window()
    panel = window.school
    read(qtbot, panel)
    qtbot.waitUntil(panel.run_button.isEnabled, timeout=WAIT_MS)
    qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel.controller.busy and bool(panel.banner.text()), timeout=WAIT_MS)
    assert panel.banner.text().startswith("Not started — nothing new to learn.")
    assert "No captured session is new" in panel.banner.text()
    assert cycles.history(store) == []
    window.runtime.wake()
    read(qtbot, panel)
    assert cycles.history(store) == []
    assert not any("cooling down" in r for r in School(store).status()["next"]["waiting"])
    assert panel.run_button.isEnabled()


def test_the_banner_that_announced_a_cycle_gives_way_to_its_failure(qtbot, panel, store, tmp_path):
    """"Cycle 1 starts now." never stays above that cycle's failure: the failure replaces it. The cycle fails by the
    test's hand (a stand-in for the runtime, which this panel has none of)."""
    from widgets.banner import STYLE

    ingested(store, tmp_path / "agent", 1)
    read(qtbot, panel)
    qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.banner.text() == "Cycle 1 starts now. No runtime runs on this data dir: start "
                                                   "`nightschool daemon` (or open the window) and the cycle goes on.",
                    timeout=WAIT_MS)
    cycle = cycles.get(store, 1)
    cycles.finish(store, cycles.begin_stage(store, cycle, "building")[0], "failed",
                  "the dataset build failed: no examples to build")
    read(qtbot, panel)
    assert panel.banner.text() == "Cycle 1 failed at building: the dataset build failed: no examples to build"
    assert panel.banner.styleSheet() == STYLE["error"]
    read(qtbot, panel)  # said once
    assert "starts now" not in panel.banner.text()
