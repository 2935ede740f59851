"""What every worker process shares (dataset build, validation, pairs, evaluation, export): envelopes on stdout with
throttled progress and an ETA, and one entry that turns any failure into an `error` envelope. Light on purpose:
workers import it before their heavy work."""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

from app.core.base import protocol as P
from app.core.base.errors import Explained
from app.core.train.modelref import ModelRefError


class Emitter:
    """Envelopes to stdout; progress at most 10 times a second, with elapsed time and an ETA per phase."""

    def __init__(self, job: str) -> None:
        self.job, self.last, self.phase, self.started = job, 0.0, "", time.monotonic()

    def emit(self, body: P.Body) -> None:
        sys.stdout.write(P.dumps(P.make(body, job=self.job)) + "\n")
        sys.stdout.flush()

    def progress(self, phase: str, step: int, total: int) -> None:
        now = time.monotonic()
        if phase != self.phase:
            self.phase, self.started = phase, now
        elif step < total and now - self.last < 0.1:
            return
        self.last = now
        elapsed = now - self.started
        eta = elapsed / step * (total - step) if step else None
        self.emit(P.Progress(step=step, total=total, phase=phase, elapsed_s=elapsed, eta_s=eta))


def worker_main(argv: list[str] | None, prog: str, what: str, run_fn) -> int:
    """The shared entry of the dataset workers: read the spec, run, and turn any failure into an `error` envelope."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=f"Build {what}.")
    parser.add_argument("--spec", required=True, type=Path)
    spec = json.loads(parser.parse_args(argv).spec.read_text(encoding="utf-8"))
    out = Emitter(spec.get("job", prog))
    try:
        return run_fn(spec, out)
    except ModelRefError as exc:
        out.emit(P.Error(message="the base model cannot be used", why=str(exc)))
    except Explained as exc:  # a build, judge or ship refusal: what, why, what to do
        out.emit(P.Error(message=exc.message, why=exc.why, fix=exc.fix))
    except Exception as exc:  # the build fails visibly, with the traceback
        tb = traceback.format_exc()
        print(tb, file=sys.stderr)
        out.emit(P.Error(message=f"building {what} crashed: {type(exc).__name__}: {exc}", traceback=tb[-4000:],
                         fix="see the traceback; nothing was registered"))
    return 1
