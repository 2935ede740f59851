"""GUI (offscreen): the Capture tab's tool histogram stays readable on a real corpus — at most MAX_BARS bars, the
rest summed in one; count axes tick on round numbers the labels have room for; the Judge tab's empty compare table
says what will appear in it."""
from __future__ import annotations

from widgets.bars import MAX_BARS, LabelledBars


def test_many_tools_are_summed_past_the_largest_and_ticks_leave_room(qtbot):
    chart = LabelledBars("Tool calls")
    qtbot.addWidget(chart)
    chart.resize(330, 240)
    chart.show()
    tools = [(f"tool{i}", 1000 - 40 * i) for i in range(20)]
    chart.set_data(tools)
    assert len(chart.labels) == MAX_BARS and chart.labels[-1] == f"{20 - MAX_BARS + 1} others"
    assert chart.values()[chart.labels[-1]] == sum(v for _, v in tools[MAX_BARS - 1:])
    axis = chart.getAxis("bottom")
    qtbot.waitUntil(lambda: axis.width() > 0, timeout=3000)
    majors = axis.tickValues(0, 1000, axis.width())[0][1]
    assert all(v == round(v) for v in majors) and len(majors) <= 6  # not 0, 243, 486, 729, 972 crammed together


def test_a_few_tools_keep_every_bar_and_tick_on_whole_numbers(qtbot):
    chart = LabelledBars("Tool calls")
    qtbot.addWidget(chart)
    chart.set_data([("Read", 3), ("Bash", 1)])
    assert chart.labels == ["Read", "Bash"] and chart.values() == {"Read": 3, "Bash": 1}
    axis = chart.getAxis("bottom")
    assert [v for _, values in axis.tickValues(0, 3, 300) for v in values] == [0, 1, 2, 3]  # whole counts only


def test_an_empty_compare_table_says_what_will_appear(qtbot):
    from widgets.compare_table import CompareTable

    def pixels(table) -> set:
        image = table.viewport().grab().toImage()
        return {image.pixel(x, y) for x in range(0, image.width(), 2) for y in range(0, image.height(), 2)}

    quiet, saying = CompareTable(), CompareTable(empty="Tick two or more models and press Compare.")
    for table in (quiet, saying):
        qtbot.addWidget(table)
        table.resize(400, 200)
        table.show()
    assert len(pixels(saying)) > len(pixels(quiet))  # the words are drawn (the quiet one is one flat colour)
