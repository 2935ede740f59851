"""Layers and circles: widgets <- app/ui <- app core packages <- app/core/base; no import circle between modules,
between the core's packages or between app/ui's folders. The checker is shown to catch a planted upward import and a
planted circle."""
from __future__ import annotations

from tests import layers


def test_no_layer_imports_upward():
    edges = layers.graph()
    assert "app.core.base.store" in edges and "widgets.charts" in edges and "engine.train.jobsocket" in edges
    assert layers.upward_imports(edges) == []


def test_no_circle_between_modules():
    assert layers.cycles(layers.graph()) == []


def test_no_circle_between_core_packages():
    packages = layers.package_graph(layers.graph())
    assert {"app.core.base", "app.core.queue", "app.core.judge", "app.core.datasets"} <= packages.keys()
    assert layers.cycles(packages) == []


def test_the_checker_catches_a_planted_upward_import_and_circle():
    edges = {k: set(v) for k, v in layers.graph().items()}
    edges["app.core.base.store"].add("app.core.queue.scheduler")  # base reaching up into a core package
    edges["widgets.charts"].add("app.core.base.store")  # a widget reading the database
    edges["app.core.queue.view"].add("app.core.queue.scheduler")  # scheduler -> view -> scheduler
    assert "app.core.base.store -> app.core.queue.scheduler" in layers.upward_imports(edges)
    assert "widgets.charts -> app.core.base.store" in layers.upward_imports(edges)
    assert any({"app.core.queue.view", "app.core.queue.scheduler"} <= set(c) for c in layers.cycles(edges))
    assert any({"app.core.base", "app.core.queue"} <= set(c) for c in layers.cycles(layers.package_graph(edges)))


def test_no_circle_between_ui_folders():
    """app/ui: one folder per tab (app/ui/tabs.TABS) beside the shared modules; no two of them import each other."""
    folders = layers.package_graph(layers.graph(), "app.ui.")
    assert {"app.ui.school", "app.ui.judge", "app.ui.tray", "app.ui.kit", "app.ui.tabs"} <= folders.keys()
    assert layers.cycles(folders) == []


def test_packages_import_only_those_before_them_in_the_documented_order():
    assert layers.out_of_order(layers.graph()) == []


def test_registry_strings_and_import_module_calls_are_edges():
    edges = layers.graph()
    assert "engine.train.recipes.sft" in edges["engine.train.recipes"]  # "engine.train.recipes.sft:SFTRecipe"
    assert "bench.machine" in edges["bench.bench_sft"]  # bench/ is in the graph, and it has no circle


def test_the_order_check_catches_a_planted_upward_edge_and_an_unplaced_package():
    edges = {k: set(v) for k, v in layers.graph().items()}
    edges["app.core.capture.ingest"].add("app.core.judge.stats")  # capture (low) reaching up into judge
    edges["app.core.newthing.x"] = {"app.core.base.store"}
    edges["engine.loading"].add("engine.train.distributed")
    bad = layers.out_of_order(edges)
    assert "app.core.capture -> app.core.judge" in bad
    assert "unplaced: app.core.newthing" in bad
    assert "engine.loading -> engine.train" in bad


def test_a_child_taking_a_name_from_its_own_package_is_an_edge_and_closes_a_circle(tmp_path):
    """The backends' old circle: the package's __init__ imports a child inside a function, the child imports a name
    from the package inside a function. A child that imports only a sibling module makes no edge to the package."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("def load():\n    from pkg.child import Thing\n    return Thing\n")
    (tmp_path / "pkg" / "child.py").write_text("def fail():\n    from pkg import Refusal\n    raise Refusal()\n")
    (tmp_path / "pkg" / "sibling.py").write_text("from pkg import child\nfrom pkg.child import fail\n")
    known = {"pkg", "pkg.child", "pkg.sibling"}
    edges = {name: layers.imports_of(name, tmp_path / path, known)
             for name, path in (("pkg", "pkg/__init__.py"), ("pkg.child", "pkg/child.py"),
                                ("pkg.sibling", "pkg/sibling.py"))}
    assert edges == {"pkg": {"pkg.child"}, "pkg.child": {"pkg"}, "pkg.sibling": {"pkg.child"}}
    assert layers.cycles(edges) == [["pkg", "pkg.child"]]


def test_the_backends_registry_names_its_modules_and_they_import_no_name_from_it():
    edges = layers.graph()
    assert {"app.core.train.backends.ray", "app.core.train.backends.skypilot"} <= edges["app.core.train.backends"]
    for child in ("ray", "skypilot", "remote", "base"):
        assert "app.core.train.backends" not in edges[f"app.core.train.backends.{child}"]
