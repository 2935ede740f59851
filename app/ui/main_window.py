"""Main window: hosts the panels, routes dropped files and folders, and leaves jobs running when it closes."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QDragEnterEvent, QDropEvent, QIcon
from PySide6.QtWidgets import QMainWindow, QTabWidget

from app.ui.capture import CaptureController, is_chat_file, redirect_note
from app.ui.capture_panel import CapturePanel
from app.ui.datasets import DatasetsController
from app.ui.datasets_panel import DatasetsPanel
from app.ui.training import TrainingController
from app.ui.training_panel import TrainingPanel

RESOURCES = Path(__file__).resolve().parents[2] / "resources"


class MainWindow(QMainWindow):
    def __init__(self, controller: TrainingController, capture: CaptureController | None = None,
                 datasets: DatasetsController | None = None) -> None:
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
        self.capture = CapturePanel(capture) if capture is not None else None
        if capture is not None:
            self.tabs.addTab(self.capture, "Capture")
            capture.message.connect(self.show_status)
        self.datasets_controller = datasets
        self.datasets = DatasetsPanel(datasets) if datasets is not None else None
        if datasets is not None:
            self.tabs.addTab(self.datasets, "Datasets")
            datasets.message.connect(self.show_status)
        self.setCentralWidget(self.tabs)
        self.setAcceptDrops(True)
        controller.message.connect(self.show_status)
        self.statusBar().showMessage("Drop a chat .jsonl file to train the selected model on it; "
                                     "drop transcripts, folders or datasets to capture them.")

    def show_status(self, _level: str, text: str) -> None:
        self.statusBar().showMessage(text, 15000)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls() and any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        """On the Training tab one chat file starts a job; everything else is imported by Capture."""
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        event.acceptProposedAction()
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
        """Closing the window stops following the jobs (the engines keep training) and stops capturing."""
        self.controller.detach()
        if self.capture_controller is not None:
            self.capture_controller.stop()
        if self.datasets_controller is not None:
            self.datasets_controller.stop()  # a running build is cancelled: nothing half-built is registered
        super().closeEvent(event)
