"""Terminal view of a job: a tqdm progress bar with loss and ETA, state changes and errors as lines (its state is the
shared app.core.train.view.JobView, the one the Training tab draws); and of the engine's set-up: the wizard's words,
share and ETA (app.core.enginenv.setup.SetupProgress)."""
from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm

from app.core.base import protocol as P
from app.core.train.view import JobView, apply


class TerminalView:
    """Consumes protocol events and draws them in the terminal."""

    def __init__(self, job_id: str) -> None:
        self.job = JobView(id=job_id)
        self.bar: tqdm | None = None

    def _bar(self, total: int) -> tqdm:
        if self.bar is None or self.bar.total != total:
            if self.bar is not None:
                self.bar.close()
            self.bar = tqdm(total=total, unit="step", dynamic_ncols=True, file=sys.stdout, desc="train")
        return self.bar

    def on_event(self, env: P.Envelope) -> None:
        apply(self.job, env)
        body = env.body
        if env.type == "progress" and body.phase == "train":
            bar = self._bar(body.total)
            bar.n = body.step
            bar.refresh()
        elif env.type == "metrics" and body.loss is not None:
            if self.bar is not None:
                self.bar.set_postfix(loss=f"{body.loss:.4f}", ram=f"{(body.ram_mb or 0):.0f}MB")
        elif env.type == "state":
            self._line(f"[{body.state}] {body.detail}")
        elif env.type == "log":
            self._line(f"  {body.message}")
        elif env.type == "alert":
            self._line(f"  ALERT {body.kind}: {body.message}")
        elif env.type == "checkpoint":
            self._line(f"  checkpoint at step {body.step} ({body.reason})")

    def _line(self, text: str) -> None:
        (self.bar.write if self.bar is not None else print)(text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def report(self, job) -> int:
        """Print how the job ended; exit code 0 unless it failed."""
        if job.state == "failed":
            print(f"job {job.id} failed: {job.error}", file=sys.stderr)
            return 1
        loss = f", last loss {self.job.loss:.4f}" if self.job.loss is not None else ""
        print(f"job {job.id} {job.state}{loss}.")
        if self.job.result is not None:
            m = self.job.result.metrics
            first, last = m.get("first_loss"), m.get("last_loss")
            if first is not None and last is not None:
                print(f"loss {first:.4f} -> {last:.4f} over {m.get('steps')} steps")
            print(f"LoRA adapter: {self.job.result.adapter_path}")
        return 0


class SetupView:
    """The engine set-up in the terminal: a line per stage ("4 of 7 · compiling llama.cpp…"), then the share of the
    whole set-up done with what this stage did and the time left ("  41% · step 140 of 310 · about 3 min left") —
    redrawn in place on a terminal, else a new line each time the percentage changes (a log, the journal)."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.live = self.out.isatty()
        self.heading: tuple[str, str] | None = None
        self.shown = ""
        self.percent: int | None = None

    def __call__(self, p) -> None:
        stage, detail = p.words()
        if self.heading != (p.stage, p.label):
            self.end_line()
            self.heading, self.percent = (p.stage, p.label), None
            print(stage, file=self.out, flush=True)
        percent = p.share() // 10
        line = f"  {percent:3d}%" + (f" · {detail}" if detail else "")
        if self.live:
            print(f"\r{line:<{len(self.shown)}}", end="", file=self.out, flush=True)
            self.shown = line
        elif percent != self.percent:
            print(line, file=self.out, flush=True)
        self.percent = percent

    def end_line(self) -> None:
        if self.live and self.shown:
            print(file=self.out, flush=True)
        self.shown = ""
