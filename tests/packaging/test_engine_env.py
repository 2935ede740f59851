"""The engine environment's set-up without building the app: where its Python comes from, what each failure says
(no Python, no network, no disk, a set-up already running), how the packaged app finds (or refuses) its engine."""
from __future__ import annotations

import json
import shutil
import socket
import sys
import threading
from pathlib import Path

import pytest

from app.core.base import paths
from app.core.enginenv import pip, plan as plans, pythons, setup
from app.core.enginenv.errors import EngineSetupError


@pytest.fixture
def frozen(monkeypatch):
    """This process plays the packaged app (sys.frozen is what PyInstaller's bootloader sets)."""
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.delenv("NIGHTSCHOOL_ENGINE_PYTHON", raising=False)


def ready(version: str, python: bool = True) -> Path:
    env = paths.engine_env_dir()
    (env / "bin").mkdir(parents=True, exist_ok=True)
    if python:  # this test venv's Python (a wrapper: a symlink elsewhere would lose the venv)
        (env / "bin" / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (env / "bin" / "python").chmod(0o755)
    (env / paths.ENGINE_READY).write_text(json.dumps({"app_version": version, "torch": "2.13.0+cpu"}))
    return env


def test_the_packaged_app_without_an_engine_says_how_to_set_it_up(frozen):
    with pytest.raises(paths.SetupError) as err:
        paths.engine_python()
    assert "not set up" in err.value.message and "nightschool engine setup" in err.value.fix
    assert setup.status().state == "missing"


def test_a_ready_engine_is_used_and_an_older_one_must_be_updated_first(frozen):
    env = ready(paths.app_version())
    assert paths.engine_python() == str(env / "bin" / "python")
    assert setup.status().state == "ready"
    ready("0.0.1", python=False)
    with pytest.raises(paths.SetupError) as err:
        paths.engine_python()
    assert "0.0.1" in err.value.message and "nightschool engine setup" in err.value.fix
    assert setup.status().state == "outdated"


def test_a_ready_engine_whose_python_is_gone_is_broken(frozen):
    env = ready(paths.app_version())
    (env / "bin" / "python").unlink()
    found = setup.status()
    assert found.state == "broken" and "repair" in found.detail


def test_the_import_probe_passes_on_a_whole_environment_and_says_when_its_python_is_gone(frozen):
    env = ready(paths.app_version())  # this test venv's Python: it has torch and the engine, not a "missing" module
    found = setup.status(check=True)
    assert found.state == "ready", found.detail
    from app.core.enginenv import probe

    result = probe.run(env / "bin" / "python")
    assert result["ok"] and result["torch"].startswith("2.")
    result = probe.run(env / "bin" / "nothing-here")
    assert not result["ok"] and "does not exist" in result["reason"]


def test_the_import_probe_names_what_does_not_import(frozen, tmp_path):
    env = ready(paths.app_version())
    shadow = tmp_path / "shadow"  # a peft that cannot be imported, first on that Python's path
    shadow.mkdir()
    (shadow / "peft.py").write_text("raise ImportError('planted: peft is damaged')\n")
    (env / "bin" / "python").write_text(f'#!/bin/sh\nPYTHONPATH="{shadow}" exec "{sys.executable}" "$@"\n')
    found = setup.status(check=True)
    assert found.state == "broken" and "peft (ImportError: planted: peft is damaged)" in found.detail
    assert "torch" not in found.detail  # only what is missing is named


def test_child_processes_of_the_packaged_app_get_the_library_path_back(frozen, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/nightschool/_internal")
    monkeypatch.setenv("LD_LIBRARY_PATH_ORIG", "/usr/local/lib")
    assert paths.child_env()["LD_LIBRARY_PATH"] == "/usr/local/lib"
    monkeypatch.delenv("LD_LIBRARY_PATH_ORIG")
    assert "LD_LIBRARY_PATH" not in paths.child_env()


def test_no_compatible_python_is_said_with_what_was_tried(monkeypatch):
    monkeypatch.setenv("NIGHTSCHOOL_SETUP_PYTHON", "/nonexistent/python3")
    with pytest.raises(EngineSetupError) as err:
        pythons.find()
    assert "/nonexistent/python3" in err.value.why and "python3-venv" in err.value.fix
    monkeypatch.delenv("NIGHTSCHOOL_SETUP_PYTHON")
    assert pythons.check(sys.executable) == (f"{sys.version_info[0]}.{sys.version_info[1]}", "")


def test_no_network_is_said_as_such(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on: pip's connection is refused, as offline
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # this machine's own pip index settings stay out of it
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    log = tmp_path / "setup.log"
    args = ["download", "--no-deps", "--no-cache-dir", "--retries", "1", "--timeout", "1", "--index-url",
            f"http://127.0.0.1:{port}/simple", "-d", str(tmp_path / "dl"), "some-package-nobody-has"]
    with pytest.raises(EngineSetupError) as err:
        pip.run(Path(sys.executable), args, log, "installing torch", tmp_path, lambda _b: None, threading.Event())
    assert "no network" in err.value.message and "installing torch" in err.value.message
    assert "connect" in err.value.fix and "stays" in err.value.fix


def test_too_little_disk_is_refused_before_anything_is_written(monkeypatch, frozen):
    real = shutil.disk_usage
    full = lambda p: real(p)._replace(free=200 * 1024 ** 2)  # noqa: E731 - a stand-in: a nearly full disk
    monkeypatch.setattr(shutil, "disk_usage", full)
    with pytest.raises(EngineSetupError) as err:
        setup.run()
    assert "disk space" in err.value.message and "GB" in err.value.why and "NIGHTSCHOOL_HOME" in err.value.fix
    assert not (paths.engine_env_dir() / "bin").exists()


def test_one_set_up_at_a_time(frozen):
    paths.engine_env_dir().parent.mkdir(parents=True, exist_ok=True)
    with setup._lock(paths.engine_env_dir().parent / "engine-env.lock"), pytest.raises(EngineSetupError) as err:
        setup.run()
    assert "already being set up" in err.value.message


def test_the_plan_installs_the_engine_without_the_gui_and_torch_by_the_gpus(monkeypatch):
    found = plans.make()
    names = {plans._name(r) for r in found.requirements}
    assert {"transformers", "peft", "trl", "llama-cpp-python", "sqlalchemy"} <= names
    assert not names & {"pyside6-essentials", "pyqtgraph", "qasync", "torch"}
    assert found.torch == "2.13.0" and found.cuda is False
    monkeypatch.setenv("NIGHTSCHOOL_GPUS", "1")  # a stand-in for an NVIDIA GPU: the CUDA build is planned
    assert plans.make().cuda is True
    assert plans.expected_bytes("torch", plans.make()) > plans.expected_bytes("torch", found)


# A stand-in for the engine environment's Python during llama.cpp's compile (the real compile takes minutes): its
# `pip wheel` prints ninja's "[k/n]" lines as `pip -v` passes them on, then leaves a wheel; `pip download` leaves the
# source; `pip install` and the import probe (`-c`) succeed.
STAND_IN_PYTHON = '''#!{python}
import json, pathlib, sys, time
args = sys.argv[1:]
if args[:1] == ["-c"]:
    print(json.dumps({{"python": "3.11.0", "missing": {{}}, "torch": "2.13.0+cpu", "cuda": False}}))
elif args[:3] == ["-m", "pip", "wheel"]:
    print("Running command Building wheel for llama-cpp-python (pyproject.toml)", flush=True)
    for k in range(1, {steps} + 1):
        time.sleep({pace})  # the stand-in's compile takes a while per step
        print(f"  [{{k}}/{steps}] Building CXX object vendor/llama.cpp/src/part{{k}}.cpp.o", flush=True)
    out = pathlib.Path(args[args.index("-w") + 1])
    (out / "llama_cpp_python-{llama}-cp311-cp311-linux_x86_64.whl").write_bytes(b"stand-in")
elif args[:3] == ["-m", "pip", "download"]:
    (pathlib.Path(args[args.index("-d") + 1]) / "llama_cpp_python-{llama}.tar.gz").write_bytes(b"stand-in")
'''


def test_the_first_start_in_a_terminal_shows_the_compile_with_percentages_and_an_eta(frozen, tmp_path, monkeypatch,
                                                                                    capsys):
    """The packaged app's first start without a display, set-up interrupted before llama.cpp's compile: the
    terminal shows the wizard's words for it — the whole set-up's percentage, the compile's steps, the time left."""
    from app.cli.main import _engine_first

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))  # no wheel kept from this machine's own install
    monkeypatch.delenv("NIGHTSCHOOL_WHEELS", raising=False)
    monkeypatch.setattr(pip, "POLL_S", 0.1)
    env = paths.engine_env_dir()
    plan = plans.make(env)
    python = paths.engine_env_python(env)
    python.parent.mkdir(parents=True)
    python.write_text(STAND_IN_PYTHON.format(python=sys.executable, steps=20, pace=0.15, llama=plan.llama))
    python.chmod(0o755)
    before = setup.Setup(plan, lambda _p: None, threading.Event())  # torch and the packages are in already
    done = {s: before.key(s) for s in ("venv", "torch", "packages", "nightschool")}
    (env / setup.STATE).write_text(json.dumps({"done": done}))

    assert _engine_first() == 0
    out = capsys.readouterr().out
    assert "4 of 7 · compiling llama.cpp" in out and "engine: ready" in out
    compiling = out.split("compiling llama.cpp")[1].split("\n", 1)[1].split("4 of 7 ·")[0]
    lines = [line for line in compiling.splitlines() if "step" in line]
    percents = [int(line.split("%")[0]) for line in lines]
    assert len(lines) >= 3 and percents == sorted(percents) and 42 <= percents[0] < percents[-1] <= 57, compiling
    etas = [line.split(" · ")[2] for line in lines if line.count(" · ") == 2]  # none once the last step is done
    assert len(etas) >= len(lines) - 1 and all(e.startswith("about ") and e.endswith(" left") for e in etas), compiling
    assert len(set(etas)) >= 2, compiling  # the time left is worked out again as the steps come
    assert "step 20 of 20" in compiling or "step 19 of 20" in compiling


def test_pip_passes_a_builds_own_steps_on_while_it_compiles(tmp_path, monkeypatch):
    """What the compile's progress rests on: `pip wheel -v` writes the build's "[k/n]" lines into the log as they
    come (a stand-in build backend prints them, as scikit-build-core passes ninja's on), and pip.run reads them."""
    source = tmp_path / "source"
    (source / "backend").mkdir(parents=True)
    (source / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "standin"\n'
                                           'backend-path = ["backend"]\n[project]\nname = "standin"\nversion = "1"\n')
    (source / "backend" / "standin.py").write_text(
        "import os, sys, time, zipfile\n"
        "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n"
        "    for k in range(1, 5):\n"
        "        time.sleep(0.4)  # the stand-in's compile takes a while per step\n"
        "        print(f'[{k}/4] Building C object part{k}.c.o', flush=True)\n"
        "    name = 'standin-1-py3-none-any.whl'\n"
        "    with zipfile.ZipFile(os.path.join(wheel_directory, name), 'w') as z:\n"
        "        z.writestr('standin-1.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: standin\\nVersion: 1\\n')\n"
        "        z.writestr('standin-1.dist-info/WHEEL', 'Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n"
        "    return name\n")
    monkeypatch.setattr(pip, "POLL_S", 0.1)
    steps: list[tuple[int, int]] = []
    pip.run(Path(sys.executable), ["wheel", "-v", "--no-deps", str(source), "-w", str(tmp_path / "out")],
            tmp_path / "setup.log", "compiling", tmp_path, lambda _b: None, threading.Event(),
            on_step=lambda k, n: steps.append((k, n)))
    assert (tmp_path / "out" / "standin-1-py3-none-any.whl").is_file()
    assert len(steps) >= 2 and steps == sorted(steps) and steps[-1] == (4, 4), steps
