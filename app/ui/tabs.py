"""The one table of the main window's tabs, in their order: title, the window's names for them, panel and controller."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tab:
    """One tab; its folder is app/ui/<key>/. The window holds its panel as `<key>` and its controller as
    `<key>_controller`. Each `"module:Class"` is imported when the window builds its panels (`base/refs.load`): `panel` is made
    over the controller; `controller`, over the store, where the window was given none (None: the tab is shown only
    when given one)."""

    title: str
    key: str
    panel: str
    controller: str | None = None
    status: bool = True  # its controller's messages show in the status bar too
    starts: bool = False  # the window starts its controller once every panel is built (the others: app/ui/main)
    stop: str = "stop"  # what its controller does when the window closes


TABS: tuple[Tab, ...] = (  # when the window closes, each controller stops as its line says
    Tab("School", "school", "app.ui.school.panel:SchoolPanel", status=False),  # its words: the banner and the tray
    Tab("Training", "training", "app.ui.training.panel:TrainingPanel", stop="detach"),  # the engines keep training
    Tab("Queue", "queue", "app.ui.queue.panel:QueuePanel"),  # no more reads (without a runtime: no scheduling)
    Tab("Capture", "capture", "app.ui.capture.panel:CapturePanel"),
    Tab("Datasets", "datasets", "app.ui.datasets.panel:DatasetsPanel"),  # a build is cancelled, nothing registered
    Tab("Judge", "judge", "app.ui.judge.panel:JudgePanel", "app.ui.judge.controller:JudgeController"),
    Tab("Ship", "ship", "app.ui.ship.panel:ShipPanel", "app.ui.ship.controller:ShipController"),  # it keeps serving
    Tab("Experience", "experience", "app.ui.experience.panel:ExperiencePanel",
        "app.ui.experience.controller:ExperienceController", starts=True),
    Tab("Team", "team", "app.ui.team.panel:TeamPanel", "app.ui.team.controller:TeamController", starts=True),
)
