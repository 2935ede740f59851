"""Process boundaries: GUI and core never load the ML stack; the engine never loads Qt. Checked in fresh interpreters."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ML = ["torch", "transformers", "peft", "trl", "llama_cpp", "accelerate", "datasets"]
QT = ["PySide6", "pyqtgraph", "qasync", "shiboken6"]


def modules_under(*packages: str) -> list[str]:
    names = []
    for package in packages:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if "migrations" in parts and parts[-1] != "migrations":
                continue  # alembic scripts run inside alembic, not on import
            if parts[-1] == "__main__":
                continue
            names.append(".".join(parts).replace("/", "."))
    return names


def loaded_after_import(modules: list[str]) -> set[str]:
    code = ("import importlib, json, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted({k.split('.')[0] for k in sys.modules})))")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_gui_and_core_modules_leave_the_ml_stack_unloaded():
    modules = modules_under("app", "widgets")
    assert "app.ui.main_window" in modules and "widgets.charts" in modules and "app.cli.main" in modules
    loaded = loaded_after_import(modules)
    assert "PySide6" in loaded  # the import really happened
    assert not loaded & set(ML), loaded & set(ML)


def test_core_imports_neither_qt_nor_the_ml_stack():
    loaded = loaded_after_import(modules_under("app/core"))
    assert not loaded & (set(ML) | set(QT))


def test_engine_never_imports_qt():
    modules = modules_under("engine")
    assert "engine.train.recipes.sft" in modules and "engine.train.callbacks" in modules
    loaded = loaded_after_import(modules)
    assert "transformers" in loaded and not loaded & set(QT), loaded & set(QT)
