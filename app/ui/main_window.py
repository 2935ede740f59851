"""Main window: hosts the panels, routes dropped files and folders, and leaves jobs running when it closes."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QDragEnterEvent, QDropEvent, QIcon
from PySide6.QtWidgets import QMainWindow, QTabWidget

from app.ui.capture import CaptureController, is_chat_file, redirect_note
from app.ui.capture_panel import CapturePanel
from app.ui.datasets import DatasetsController
from app.ui.datasets_panel import DatasetsPanel
from app.ui.judge import JudgeController
from app.ui.judge_panel import JudgePanel
from app.ui.queue import QueueController
from app.ui.queue_panel import QueuePanel
from app.ui.ship import ShipController
from app.ui.ship_panel import ShipPanel
from app.ui.training import TrainingController
from app.ui.training_panel import TrainingPanel

RESOURCES = Path(__file__).resolve().parents[2] / "resources"


class MainWindow(QMainWindow):
    def __init__(self, controller: TrainingController, capture: CaptureController | None = None,
                 datasets: DatasetsController | None = None, queue: QueueController | None = None,
                 judge: JudgeController | None = None, ship: ShipController | None = None) -> None:
        super().__init__()
        self.setWindowTitle("Nightschool")
        icon = RESOURCES / "nightschool.svg"
        if icon.is_file():
            self.setWindowIcon(QIcon(str(icon)))
        self.resize(1180, 740)
        self.controller, self.capture_controller = controller, capture
        self.training = TrainingPanel(controller)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.training, "Training")
        self.queue_controller = queue
        self.queue = QueuePanel(queue) if queue is not None else None
        if queue is not None:
            self.tabs.addTab(self.queue, "Queue")
            queue.message.connect(self.show_status)
            queue.added.connect(controller.track)  # the Training tab lists queued jobs and follows them once started
            queue.started.connect(controller.track)
            queue.entries_changed.connect(controller.sync)
        self.capture = CapturePanel(capture) if capture is not None else None
        if capture is not None:
            self.tabs.addTab(self.capture, "Capture")
            capture.message.connect(self.show_status)
        self.datasets_controller = datasets
        self.datasets = DatasetsPanel(datasets) if datasets is not None else None
        if datasets is not None:
            self.tabs.addTab(self.datasets, "Datasets")
            datasets.message.connect(self.show_status)
        # the Judge tab reads the training controller's store unless given its own controller
        self.judge_controller = judge or JudgeController(controller.manager.store)
        self.judge = JudgePanel(self.judge_controller)
        self.tabs.addTab(self.judge, "Judge")
        self.judge_controller.message.connect(self.show_status)
        self.ship_controller = ship or ShipController(controller.manager.store)
        self.ship = ShipPanel(self.ship_controller)
        self.tabs.addTab(self.ship, "Ship")
        self.ship_controller.message.connect(self.show_status)
        self.setCentralWidget(self.tabs)
        self.setAcceptDrops(True)
        controller.message.connect(self.show_status)
        self.statusBar().showMessage("Drop a chat .jsonl file to queue a training job on the selected model; "
                                     "drop transcripts, folders or datasets to capture them.")

    def show_status(self, _level: str, text: str) -> None:
        self.statusBar().showMessage(text, 15000)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls() and any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        """On the Queue tab files are queued; on the Training tab one chat file is queued; everything else is
        imported by Capture."""
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        event.acceptProposedAction()
        if self.queue is not None and self.tabs.currentWidget() is self.queue:
            self.queue.add_files(paths)
            return
        on_training = self.tabs.currentWidget() is self.training
        if self.capture_controller is None or (on_training and len(paths) == 1 and is_chat_file(paths[0])):
            for path in paths:
                self.training.start(path)
            return
        if on_training and len(paths) == 1 and Path(paths[0]).is_file():
            self.training.show_message("error", redirect_note(paths[0]))
        if paths:
            self.capture_controller.import_paths(paths)

    def closeEvent(self, event) -> None:
        """Closing the window stops following the jobs (the engines keep training), stops the queue's scheduler
        and stops capturing."""
        self.controller.detach()
        if self.queue_controller is not None:
            self.queue_controller.stop()  # no more scheduling; queued jobs wait for the next start
        if self.capture_controller is not None:
            self.capture_controller.stop()
        if self.datasets_controller is not None:
            self.datasets_controller.stop()  # a running build is cancelled: nothing half-built is registered
        self.judge_controller.stop()  # a running evaluation ends on its own; its result is dropped
        self.ship_controller.stop()  # a running export is cancelled; the model server keeps serving
        super().closeEvent(event)
