"""The dark theme: an unticked check box or radio button — a plain one, an item's box in a list (the Judge tab's
models) and a menu's checkable action (the tray's "Pause learning") — stands out from what is around it. Real widgets
rendered offscreen with grab(); the theme is applied to the application for the test and taken off after."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QAction, QColor, QImage, QPalette
from PySide6.QtWidgets import QCheckBox, QListWidget, QListWidgetItem, QMenu, QRadioButton, QStyle, QStyleOptionButton

from app.ui.theme import COLOURS, apply_dark

VISIBLE = 60  # lightness steps (of 255) between the box's outline and the background: clearly seen


@pytest.fixture
def dark(qapp):
    style, palette = qapp.style().name(), qapp.palette()
    apply_dark(qapp)
    yield
    qapp.setStyle(style)
    qapp.setPalette(palette)


def contrast(image: QImage, rect: QRect, background: str) -> int:
    """The largest lightness difference between a pixel in rect and the background colour."""
    ground = QColor(background).lightness()
    rect = rect.intersected(image.rect())
    return max(abs(image.pixelColor(x, y).lightness() - ground)
               for x in range(rect.left(), rect.right() + 1) for y in range(rect.top(), rect.bottom() + 1))


def indicator(widget, element: QStyle.SubElement) -> QRect:
    option = QStyleOptionButton()
    option.initFrom(widget)
    option.rect = widget.rect()
    return widget.style().subElementRect(element, option, widget)


@pytest.mark.parametrize("make, element", [
    (lambda: QCheckBox("Drop abandoned"), QStyle.SubElement.SE_CheckBoxIndicator),
    (lambda: QRadioButton("any time"), QStyle.SubElement.SE_RadioButtonIndicator)], ids=["check box", "radio button"])
def test_an_unticked_check_box_or_radio_button_shows_its_outline(qtbot, dark, make, element):
    widget = make()
    qtbot.addWidget(widget)
    widget.resize(widget.sizeHint())
    assert not widget.isChecked()
    seen = contrast(widget.grab().toImage(), indicator(widget, element), COLOURS[QPalette.ColorRole.Window])
    assert seen >= VISIBLE, f"the unticked indicator differs by only {seen}"


def test_an_unticked_item_in_a_list_shows_its_box(qtbot, dark):
    models = QListWidget()
    qtbot.addWidget(models)
    models.resize(240, 120)
    item = QListWidgetItem("base (default)")
    item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
    item.setCheckState(Qt.CheckState.Unchecked)
    models.addItem(item)
    models.show()
    qtbot.waitExposed(models)
    row = models.visualItemRect(item)
    box = QRect(row.left(), row.top(), row.height() + 4, row.height())  # the box is left of the text
    seen = contrast(models.viewport().grab().toImage(), box, COLOURS[QPalette.ColorRole.Base])
    assert seen >= VISIBLE, f"the list's unticked box differs by only {seen}"


def test_a_menus_unticked_checkable_action_shows_its_box(qtbot, dark):
    menu = QMenu()
    qtbot.addWidget(menu)
    action = QAction("Pause learning", menu)
    action.setCheckable(True)
    menu.addAction(action)
    menu.resize(menu.sizeHint())
    line = menu.actionGeometry(action)
    box = QRect(line.left(), line.top(), line.height(), line.height())  # the box, left of the words
    seen = contrast(menu.grab().toImage(), box, COLOURS[QPalette.ColorRole.Window])
    assert seen >= VISIBLE, f"the menu's unticked action differs by only {seen}"
