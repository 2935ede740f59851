"""GUI (offscreen): the Queue tab — dropped files are queued (recipe detected, priority chosen, refusals explained), a
waiting row dragged between others reorders the queue, the priority combo moves a row, hold/cancel/retry, and a real
job started by the queue's scheduler is stopped with the Stop button (the Training tab follows it meanwhile)."""
from __future__ import annotations

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from tests.conftest import fast_hyper, write_jsonl
from tests.tiny_model import chat_records

WAIT_MS = 15_000
TIMEOUT_MS = 240_000


def drop_files(window, *paths) -> None:
    """A file drop on the window, as the OS delivers it."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    enter = QDragEnterEvent(window.rect().center(), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    window.dragEnterEvent(enter)
    assert enter.isAccepted()
    window.dropEvent(QDropEvent(QPointF(window.rect().center()), Qt.DropAction.CopyAction, mime,
                                Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier))


def drag_row(table, job_id: str, before: str | None) -> bool:
    """Drag job_id's row and drop it at the top edge of `before`'s row (None: below the last row). The drag is what
    the view starts (its model's mime data for the row); the drop events go to the view's viewport as Qt sends them.
    Only QDrag.exec's nested event loop (a real mouse drag) is left out: it cannot run offscreen. Whether the view
    took the drop (a drop where the row already is is refused)."""
    model = table.model()
    source = model.index(model.row_of(job_id), 1)
    assert model.flags(source) & Qt.ItemFlag.ItemIsDragEnabled
    mime = model.mimeData([source])
    if before is not None:
        rect = table.row_rect(before)
        pos = QPoint(rect.center().x(), rect.top() + 1)  # the upper edge: "above this row"
    else:
        rect = table.row_rect(table.job_ids()[-1])
        pos = QPoint(rect.center().x(), rect.bottom() - 1)  # the lower edge of the last row: "below it"
    args = (Qt.DropAction.MoveAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    viewport = table.viewport()
    enter = QDragEnterEvent(pos, *args)
    QApplication.sendEvent(viewport, enter)
    assert enter.isAccepted()
    move = QDragMoveEvent(pos, *args)
    QApplication.sendEvent(viewport, move)
    assert move.isAccepted()
    drop = QDropEvent(QPointF(pos), *args)
    QApplication.sendEvent(viewport, drop)
    return drop.isAccepted()


def queue_tab(qtbot, window):
    window.tabs.setCurrentWidget(window.queue)
    panel = window.queue
    qtbot.waitUntil(lambda: panel.controller.ticks >= 1, timeout=WAIT_MS)  # the scheduler runs from the start
    return panel


def pause_queue(qtbot, panel) -> None:
    assert panel.queue_button.text() == "Pause queue"
    qtbot.mouseClick(panel.queue_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.controller.paused and panel.queue_button.text() == "Resume queue", timeout=WAIT_MS)


def order(panel) -> list[str]:
    return [e.job.id for e in panel.controller.queue.entries()]


def settle(qtbot, panel) -> None:
    qtbot.waitUntil(lambda: panel.controller.pending == 0, timeout=WAIT_MS)


def test_dropped_files_are_queued_with_their_recipe_and_priority(qtbot, make_window, chat_file, tmp_path):
    window = make_window()
    panel = queue_tab(qtbot, window)
    pause_queue(qtbot, panel)
    panel.priority_box.setCurrentText("high")
    drop_files(window, chat_file)
    qtbot.waitUntil(lambda: len(panel.table.job_ids()) == 1, timeout=WAIT_MS)
    (chat_job,) = panel.table.job_ids()
    row = panel.table.row(chat_job)
    assert (row.recipe, row.priority, row.state, row.source, row.place) == ("sft", "high", "queued", "user", 1)
    assert panel.table.text(chat_job, "ETA / starts in").startswith("waits: queue paused")
    assert panel.table.priority_combo(chat_job).currentText() == "high"
    assert order(panel) == [chat_job] and "Queued job" in panel.banner.text()
    # the Training tab lists it too, waiting (it follows the engine once the queue starts it)
    qtbot.waitUntil(lambda: chat_job in window.controller.jobs, timeout=WAIT_MS)
    assert window.controller.jobs[chat_job].state == "queued" and not window.controller.jobs[chat_job].final

    # preference pairs left on the default recipe (sft) are trained with dpo
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"prompt": f"Q{i}?", "chosen": f"good {i}", "rejected": "bad"}
                                                   for i in range(8)])
    drop_files(window, pairs)
    qtbot.waitUntil(lambda: len(panel.table.job_ids()) == 2, timeout=WAIT_MS)
    pref_job = panel.table.job_ids()[1]
    assert panel.table.row(pref_job).recipe == "dpo" and panel.table.row(pref_job).priority == "high"

    # a refused file says why in the panel, and nothing is queued
    alpaca = write_jsonl(tmp_path / "alpaca.jsonl", [{"instruction": "a", "input": "", "output": "b"}])
    drop_files(window, alpaca)
    qtbot.waitUntil(lambda: "Not queued" in panel.banner.text(), timeout=WAIT_MS)
    assert "Alpaca" in panel.banner.text() and panel.banner.isVisible()
    settle(qtbot, panel)
    assert len(panel.table.job_ids()) == 2 and len(order(panel)) == 2


def test_drag_and_priority_combo_reorder_the_queue(qtbot, make_window, tmp_path, monkeypatch):
    window = make_window()
    panel = queue_tab(qtbot, window)
    pause_queue(qtbot, panel)
    files = [write_jsonl(tmp_path / f"chat{i}.jsonl", chat_records(8)) for i in range(3)]
    panel.add_files([str(f) for f in files])
    qtbot.waitUntil(lambda: len(panel.table.job_ids()) == 3, timeout=WAIT_MS)
    a, b, c = panel.table.job_ids()
    assert order(panel) == [a, b, c]
    table = panel.table

    assert drag_row(table, c, before=a)  # the last row dropped above the first
    qtbot.waitUntil(lambda: table.job_ids() == [c, a, b], timeout=WAIT_MS)
    assert order(panel) == [c, a, b]
    assert [table.row(j).place for j in (c, a, b)] == [1, 2, 3]
    assert drag_row(table, c, before=None)  # and below the last one
    qtbot.waitUntil(lambda: table.job_ids() == [a, b, c], timeout=WAIT_MS)
    assert order(panel) == [a, b, c]
    assert not drag_row(table, a, before=b)  # dropped just above the next row of its priority: it stays put
    settle(qtbot, panel)
    assert order(panel) == [a, b, c]

    table.priority_combo(c).setCurrentText("high")  # high runs first
    qtbot.waitUntil(lambda: table.job_ids() == [c, a, b] and table.row(c).priority == "high", timeout=WAIT_MS)
    assert order(panel) == [c, a, b]
    assert drag_row(table, b, before=c)  # dropped among the high rows, it takes their priority
    qtbot.waitUntil(lambda: table.job_ids() == [b, c, a], timeout=WAIT_MS)
    assert table.row(b).priority == "high" and table.priority_combo(b).currentText() == "high"

    table.select(a)  # To top: before the first waiting job, with its priority
    assert panel.top_button.isEnabled()
    qtbot.mouseClick(panel.top_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: table.job_ids() == [a, b, c], timeout=WAIT_MS)
    assert table.row(a).priority == "high" and table.selected_id() == a

    # Pause on a waiting job holds it; Resume queues it again
    qtbot.mouseClick(panel.pause_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: table.row(a).state == "held", timeout=WAIT_MS)
    assert panel.resume_button.isEnabled() and not panel.pause_button.isEnabled()
    assert table.text(a, "ETA / starts in").startswith("held")
    qtbot.mouseClick(panel.resume_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: table.row(a).state == "queued", timeout=WAIT_MS)

    # Cancel asks first; a cancelled job can be retried (it goes to the end of its priority)
    asked = []
    monkeypatch.setattr(panel, "confirm", lambda title, text: asked.append(text) or True)
    table.select(b)
    qtbot.mouseClick(panel.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: table.row(b).state == "cancelled", timeout=WAIT_MS)
    assert "checkpoints" in asked[0] and table.row(b).place is None and table.priority_combo(b) is None
    assert panel.retry_button.isEnabled()
    qtbot.mouseClick(panel.retry_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: table.row(b).state == "queued", timeout=WAIT_MS)

    # an action the queue refuses shows why in the panel, the app goes on
    panel.controller.retry(a)
    qtbot.waitUntil(lambda: "Retry failed" in panel.banner.text(), timeout=WAIT_MS)
    assert "only a failed, stopped or cancelled job can be retried" in panel.banner.text()

    # the concurrency spin box sets how many jobs run at once
    panel.concurrent.setValue(2)
    settle(qtbot, panel)
    assert panel.controller.queue.max_concurrent() == 2


def test_a_queued_job_starts_and_the_stop_button_stops_it(qtbot, make_window, chat_file, tiny_model):
    window = make_window()
    panel = queue_tab(qtbot, window)
    panel.controller.hyper = fast_hyper(max_steps=5000, save_steps=10**6)
    panel.model_box.setEditText(str(tiny_model))
    drop_files(window, chat_file)  # the queue is running: the scheduler starts the job on its next tick
    qtbot.waitUntil(lambda: len(panel.table.job_ids()) == 1, timeout=WAIT_MS)
    (job_id,) = panel.table.job_ids()
    table = panel.table
    qtbot.waitUntil(lambda: table.row(job_id).state == "running" and (table.row(job_id).step or 0) >= 3,
                    timeout=TIMEOUT_MS)
    total = table.row(job_id).total  # 600: 100 epochs of 6 steps come before max_steps
    assert total >= 100 and table.text(job_id, "ETA / starts in").endswith("left")
    # the Training tab follows the engine the queue started
    view = window.controller.jobs[job_id]
    qtbot.waitUntil(lambda: len(view.loss_pts) >= 3, timeout=WAIT_MS)

    table.select(job_id)
    assert panel.stop_button.isEnabled() and panel.pause_button.isEnabled()
    qtbot.mouseClick(panel.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: table.row(job_id) is not None and table.row(job_id).state == "stopped",
                    timeout=TIMEOUT_MS)
    manager = panel.controller.queue.manager
    assert not manager.is_alive(manager.latest_run(job_id))  # the engine has ended
    assert {c.kind for c in manager.checkpoints(job_id)} == {"checkpoint", "adapter"}
    assert 0 < table.row(job_id).step < total and table.row(job_id).place is None
    assert panel.retry_button.isEnabled() and not panel.stop_button.isEnabled()
    qtbot.waitUntil(lambda: view.final, timeout=WAIT_MS)
    assert view.state == "stopped"
