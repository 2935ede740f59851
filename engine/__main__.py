"""Engine entry point: `python -m engine --spec FILE` runs one job and exits (freeing RAM/VRAM).

The socket comes up before the heavy imports, so a client sees `loading` within a second of the launch.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

from app.core.base import protocol as P
from app.core.train.modelref import ModelRefError
from app.core.train.spec import JobSpec
from engine.train import distributed
from engine.errors import EngineError
from engine.train.jobsocket import EngineServer


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m engine", description="Run one Nightschool job.")
    parser.add_argument("--spec", required=True, type=Path, help="the job's spec.json")
    return parser.parse_args(argv)


def _fail(server: EngineServer | distributed.SilentServer, body: P.Error) -> int:
    server.emit(body)
    server.emit(P.State(state="failed", detail=body.message))
    print(f"error: {body.message}. {body.why} {body.fix}".strip(), file=sys.stderr)
    return 1


def run_job(spec: JobSpec, spec_sha256: str, server: EngineServer | distributed.SilentServer) -> int:
    server.emit(P.State(state="loading", detail="loading the training stack and the model"))
    try:
        from engine.train.recipes import recipe_for

        try:
            recipe = recipe_for(spec.kind)(spec, spec_sha256, server)
        except (ValueError, ImportError) as exc:
            raise EngineError(f"this engine cannot run {spec.kind!r} jobs", why=str(exc)) from exc
        distributed.prepare(recipe)
        if not distributed.is_main():  # another rank of a multi-process job: trains in step, reports nothing
            return 0 if spec.dry_run else distributed.run_worker(recipe)
        if spec.dry_run:
            plan = recipe.dry_run()
            server.emit(P.State(state="completed" if plan.ok else "failed", detail="dry run: " + (
                f"{plan.steps} steps, {plan.tokens:,} tokens" if plan.ok else "; ".join(plan.problems))))
            return 0 if plan.ok else 1
        result = recipe.run()
    except EngineError as exc:
        return _fail(server, exc.body())
    except ModelRefError as exc:
        return _fail(server, P.Error(message="the model cannot be used", why=str(exc)))
    except Exception as exc:  # the job fails visibly, with the traceback in its events and stderr
        tb = traceback.format_exc()
        print(tb, file=sys.stderr)
        return _fail(server, P.Error(message=f"training crashed: {type(exc).__name__}: {exc}",
                                     fix="see the traceback; the run's engine.err has the full log",
                                     traceback=tb[-4000:]))
    server.emit(P.State(state=result.status, detail=f"{result.metrics.get('steps')} steps"))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    spec, spec_sha256 = JobSpec.read(args.spec)
    distributed.configure_env()
    distributed.watch_parent()  # a rank of a multi-process job ends with its launcher
    run_dir = Path(spec.run_dir)
    # only the main process (rank 0) binds the socket and writes events.jsonl; other ranks get a silent stand-in
    server = distributed.server_for(spec.job_id, Path(spec.socket_path), spec.token, run_dir / "events.jsonl",
                                    spec.kind)
    server.start()
    server.emit(P.State(state="starting", detail=f"engine pid {os.getpid()}"))
    try:
        return run_job(spec, spec_sha256, server)
    finally:
        server.close()


if __name__ == "__main__":
    sys.exit(main())
