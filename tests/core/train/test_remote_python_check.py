"""The check of a cluster's Python, without a cluster: its entrypoint run by this machine's shell reports the modules
its Python lacks as one JSON line; that line, found in a log among other lines, becomes a refusal naming them and the
command that installs them in that Python, pinned to the versions this machine has; no line is a refusal too."""
from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from app.core.train.backends import BackendError
from app.core.train.backends.remote import CHECK_PREFIX, check_entrypoint, python_refusal, read_check

LOG = "\n".join([
    "2026-01-01 10:00:00,000\tINFO job_manager.py:530 -- Runtime env is setting up.",
    CHECK_PREFIX + json.dumps({"missing": ["torch", "surely_missing_pkg_xyz"], "python": "/opt/ray/bin/python3",
                               "version": "3.10.12"}),
    ""])


def test_the_entrypoint_reports_what_the_python_on_path_lacks():
    venv_bin = str(Path(sys.executable).parent)  # the entrypoint's `python` is the one first on PATH
    out = subprocess.run(check_entrypoint(["json", "surely_missing_pkg_xyz"]), shell=True, capture_output=True,
                         text=True, timeout=60, env={"PATH": venv_bin + ":/usr/bin:/bin"})
    report = read_check("noise\n" + out.stdout)
    assert report["missing"] == ["surely_missing_pkg_xyz"], out.stderr
    assert Path(report["python"]).parent == Path(venv_bin)


def test_missing_modules_become_a_refusal_with_the_install_command_for_that_python():
    refusal = python_refusal("the Ray cluster at http://head:8265", LOG)
    assert isinstance(refusal, BackendError)
    words = str(refusal)
    assert refusal.message == "the Python on the Ray cluster at http://head:8265 lacks torch, surely_missing_pkg_xyz"
    assert "ModuleNotFoundError" in refusal.why and "/opt/ray/bin/python3, Python 3.10.12" in refusal.why
    torch = metadata.version("torch").split("+")[0]  # this machine's version, without its local label (+cpu)
    assert refusal.fix.endswith(f"/opt/ray/bin/python3 -m pip install torch=={torch} surely-missing-pkg-xyz")
    assert "+cpu" not in words


def test_nothing_missing_is_no_refusal_and_no_report_is_one_with_the_log():
    assert python_refusal("x", CHECK_PREFIX + json.dumps({"missing": [], "python": "p", "version": "3.11"})) is None
    refusal = python_refusal("the Ray cluster at http://head:8265", "sh: 1: python: not found\n")
    assert "did not report" in refusal.message and "python: not found" in refusal.why
    assert read_check(CHECK_PREFIX + "{not json") is None
