"""Main window: hosts the panels, takes dropped files anywhere, and leaves jobs running when it closes."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QDragEnterEvent, QDropEvent, QIcon
from PySide6.QtWidgets import QMainWindow, QTabWidget

from app.ui.training import TrainingController
from app.ui.training_panel import TrainingPanel

RESOURCES = Path(__file__).resolve().parents[2] / "resources"


class MainWindow(QMainWindow):
    def __init__(self, controller: TrainingController) -> None:
        super().__init__()
        self.setWindowTitle("Nightschool")
        icon = RESOURCES / "nightschool.svg"
        if icon.is_file():
            self.setWindowIcon(QIcon(str(icon)))
        self.resize(1180, 740)
        self.controller = controller
        self.training = TrainingPanel(controller)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.training, "Training")
        self.setCentralWidget(self.tabs)
        self.setAcceptDrops(True)
        controller.message.connect(lambda _level, text: self.statusBar().showMessage(text, 15000))
        self.statusBar().showMessage("Drop a chat .jsonl file to train the selected model on it.")

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls() and any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        files = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        for path in files:
            self.training.start(path)
        event.acceptProposedAction()

    def closeEvent(self, event) -> None:
        """Closing the window stops following the jobs; the engines keep training."""
        self.controller.detach()
        super().closeEvent(event)
