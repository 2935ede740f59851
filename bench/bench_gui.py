"""GUI figures: cold start to the first painted window — the real app as the launcher starts it (`nightschool gui`),
vs a bare PySide6 window, each in a new process — and the GUI's RSS while a job streams.
Usage: .venv/bin/python -m bench.bench_gui [--repeats N] [--viewer] [--skip-stream] [--steps N]"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child_window(kind: str) -> None:
    """Start Nightschool's window the way `nightschool gui` does (or a bare one) and print when its first paint
    event arrives ("painted"), then — the app — when its tabs are loaded ("loaded"); then quit."""
    from PySide6.QtCore import QEvent, QObject, QTimer
    from PySide6.QtWidgets import QApplication, QLabel, QMainWindow

    app = QApplication(sys.argv)  # made here only to watch its events: run_gui uses this instance

    class FirstPaint(QObject):
        """The first paint event of a top-level window (Nightschool's by its title), then the tabs' loading."""

        def __init__(self) -> None:
            super().__init__()
            self.painted = False
            self.poll = QTimer()
            self.poll.timeout.connect(self.loaded)

        def eventFilter(self, watched, event) -> bool:
            if (not self.painted and event.type() == QEvent.Type.Paint and watched.isWidgetType()
                    and watched.isWindow() and (kind == "bare" or watched.windowTitle() == "Nightschool")):
                self.painted = True
                print("painted", flush=True)
                if kind == "bare":
                    QTimer.singleShot(0, app.quit)
                else:
                    self.poll.start(10)
            return False

        def loaded(self) -> None:
            window = next((w for w in app.topLevelWidgets() if w.windowTitle() == "Nightschool"), None)
            if getattr(window, "training", None) is not None:  # the Training tab is built: the window is whole
                self.poll.stop()
                print("loaded", flush=True)
                app.quit()

    watcher = FirstPaint()
    app.installEventFilter(watcher)
    if kind == "bare":
        window = QMainWindow()
        window.setCentralWidget(QLabel("hello"))
        window.show()
        app.exec()
        return
    from app.cli.main import main

    main(["gui"])


def child_stream(model: str, data: str, steps: int) -> None:
    """Run the GUI with one streaming job; print the GUI's RSS samples and the engine's peak RSS."""
    import asyncio

    import psutil
    import qasync
    from PySide6.QtWidgets import QApplication

    from app.core.train.spec import Hyper
    from app.ui.main import build_window, dispose

    app = QApplication(sys.argv)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    me = psutil.Process()

    window = build_window()

    async def run() -> dict:
        window.controller.hyper = Hyper(max_steps=steps, epochs=1000, batch_size=4, grad_accum=1, warmup=0.0,
                                        learning_rate=2e-2, lora_r=8, max_length=128, save_steps=10**6)
        window.show()
        window.training.model_box.setEditText(model)
        job_id = window.training.start(data)
        view = window.controller.jobs[job_id]
        while (run := window.controller.manager.latest_run(job_id)) is None:  # the queue's next tick starts it
            await asyncio.sleep(0.05)
        gui, engine = [], []
        while not view.final:
            gui.append(me.memory_info().rss / 2**20)
            try:
                engine.append(psutil.Process(run.pid).memory_info().rss / 2**20)
            except psutil.NoSuchProcess:
                pass
            await asyncio.sleep(0.25)
        return {"gui_rss_mb": gui, "engine_rss_mb": engine, "points": len(view.loss_pts),
                "torch_in_gui": "torch" in sys.modules}

    with loop:
        stats = loop.run_until_complete(run())
        print(json.dumps(stats), flush=True)
        dispose(app, window)


def time_child(kind: str, env: dict) -> dict[str, float]:
    """Seconds from spawning the process to each mark it prints (painted, loaded)."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "bench.bench_gui", "--child", kind], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    marks = {}
    for line in proc.stdout:
        if line.strip() in ("painted", "loaded"):
            marks[line.strip()] = time.perf_counter() - started
    err = proc.stderr.read()
    proc.wait()
    if "painted" not in marks:
        raise RuntimeError(f"{kind} window never painted: {err[-2000:]}")
    return marks


def fresh_home() -> Path:
    """A data dir that has been opened once (store made and migrated) with the first-run wizard skipped."""
    home = Path(tempfile.mkdtemp(prefix="ns-bench-gui-"))
    skip = "from app.core.base import first_run; from app.core.base.store import Store; first_run.mark(Store(), skipped=True)"
    subprocess.run([sys.executable, "-c", skip], cwd=REPO, env={**os.environ, "NIGHTSCHOOL_HOME": str(home)}, check=True)
    return home


def start_daemon(env: dict) -> subprocess.Popen:
    """`nightschool daemon run` on the data dir, until its runtime holds the lock (the window then attaches)."""
    proc = subprocess.Popen([sys.executable, "-m", "app.cli.main", "daemon", "run"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    probe = "from app.core.runtime import lock; raise SystemExit(0 if lock.holder() else 1)"
    deadline = time.monotonic() + 120
    while subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env).returncode != 0:
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("the daemon did not take the runtime lock")
        time.sleep(0.5)
    return proc


def cold_start(repeats: int, viewer: bool) -> None:
    home = fresh_home()
    env = {**os.environ, "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen"),
           "NIGHTSCHOOL_HOME": str(home)}
    env.pop("NIGHTSCHOOL_NO_FIRST_RUN", None)  # the wizard stays away by the data dir's first-run state
    daemon = start_daemon(env) if viewer else None
    try:
        load = os.getloadavg()[0]
        app, bare = [], []
        for _ in range(repeats):  # interleaved: drift in the machine's load hits both
            app.append(time_child("app", env))
            bare.append(time_child("bare", env)["painted"])
        load_after = os.getloadavg()[0]
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=60)
        shutil.rmtree(home, ignore_errors=True)
    painted = [m["painted"] for m in app]
    loaded = [m.get("loaded", float("nan")) for m in app]
    how = "attaching to a running daemon (viewer)" if viewer else "running the school itself"
    print(f"cold start to the first painted window, {repeats} runs each, {how}; load (1 min) {load:.2f} → "
          f"{load_after:.2f}, {os.cpu_count()} CPUs, QT_QPA_PLATFORM={env['QT_QPA_PLATFORM']}:")
    print(f"  nightschool gui, painted  min {min(painted):.2f} s  median {statistics.median(painted):.2f} s   "
          f"(runs: {', '.join(f'{s:.2f}' for s in painted)})")
    print(f"  nightschool gui, loaded   min {min(loaded):.2f} s  median {statistics.median(loaded):.2f} s   "
          f"(every tab built; the school running, or followed as a viewer)")
    print(f"  bare PySide6 window       min {min(bare):.2f} s  median {statistics.median(bare):.2f} s   "
          f"(runs: {', '.join(f'{s:.2f}' for s in bare)})")
    print(f"  ratio painted / bare      min {min(painted) / min(bare):.2f}x  median "
          f"{statistics.median(painted) / statistics.median(bare):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--child", choices=["app", "bare", "stream"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--model", default="")
    parser.add_argument("--data", default="")
    parser.add_argument("--viewer", action="store_true", help="the window attaches to a running daemon")
    parser.add_argument("--skip-stream", action="store_true", help="only the cold start")
    args = parser.parse_args()
    if args.child == "stream":
        return child_stream(args.model, args.data, args.steps)
    if args.child:
        return child_window(args.child)

    cold_start(args.repeats, args.viewer)
    if args.skip_stream:
        return
    home = Path(tempfile.mkdtemp(prefix="ns-bench-gui-"))
    env = {**os.environ, "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen"),
           "NIGHTSCHOOL_HOME": str(home)}
    from tests.tiny_model import build, chat_records

    model = build(home / "tiny")
    data = home / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in chat_records(24)))
    out = subprocess.run([sys.executable, "-m", "bench.bench_gui", "--child", "stream", "--model", str(model),
                          "--data", str(data), "--steps", str(args.steps)], cwd=REPO, env=env,
                         capture_output=True, text=True, check=True)
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    gui, eng = stats["gui_rss_mb"], stats["engine_rss_mb"]
    print(f"GUI process while a {args.steps}-step job streams ({stats['points']} loss points drawn):")
    print(f"  GUI RSS    median {statistics.median(gui):.0f} MB, peak {max(gui):.0f} MB "
          f"(torch loaded in GUI: {stats['torch_in_gui']})")
    print(f"  engine RSS median {statistics.median(eng):.0f} MB, peak {max(eng):.0f} MB")


if __name__ == "__main__":
    main()
