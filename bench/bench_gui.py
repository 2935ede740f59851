"""GUI figures: cold start to first window (vs a bare PySide6 window) and GUI RSS while a job streams."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child_window(kind: str) -> None:
    """Open a window (Nightschool's or a bare one) and print when it has been shown and painted."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QLabel, QMainWindow

    app = QApplication(sys.argv)
    if kind == "bare":
        window = QMainWindow()
        window.setCentralWidget(QLabel("hello"))
    else:
        import asyncio

        import qasync

        from app.ui.main import build_window

        asyncio.set_event_loop(qasync.QEventLoop(app))
        window = build_window()
    window.show()
    QTimer.singleShot(0, lambda: (print("shown", flush=True), app.quit()))
    app.exec()


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


def time_child(kind: str, env: dict) -> float:
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "bench.bench_gui", "--child", kind], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        if line.startswith("shown"):
            elapsed = time.perf_counter() - started
            proc.wait()
            return elapsed
    raise RuntimeError(f"{kind} window never showed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--child", choices=["app", "bare", "stream"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--model", default="")
    parser.add_argument("--data", default="")
    args = parser.parse_args()
    if args.child == "stream":
        return child_stream(args.model, args.data, args.steps)
    if args.child:
        return child_window(args.child)

    home = Path(tempfile.mkdtemp(prefix="ns-bench-gui-"))
    env = {**os.environ, "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen"),
           "NIGHTSCHOOL_HOME": str(home)}
    app_s = [time_child("app", env) for _ in range(args.repeats)]
    bare_s = [time_child("bare", env) for _ in range(args.repeats)]
    print(f"cold start to first window, median of {args.repeats}:")
    print(f"  nightschool  {statistics.median(app_s):.2f} s   (runs: {', '.join(f'{s:.2f}' for s in app_s)})")
    print(f"  bare PySide6 {statistics.median(bare_s):.2f} s")
    print(f"  ratio        {statistics.median(app_s) / statistics.median(bare_s):.2f}x a bare window")

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
