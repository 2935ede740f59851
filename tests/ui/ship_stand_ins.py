"""The Ship tab tests' rows and stand-ins (named as such): checkpoints and verdicts recorded directly, and StandIns for
the core's export / deploy / rollback / server calls (the real ones are tested in tests/core/ship)."""
from __future__ import annotations

import json
import os
from pathlib import Path


from app.core.base import protocol as P
from app.core.base.fingerprint import sha256_file
from app.core.base.schema import CheckpointRow, Deployment, EvalRow, ExportRow, Job, Run, VerdictRow
from app.core.judge import records as registry
from app.core.ship import deploy, exports, serving as server
from app.core.ship.config import STAGE_CONVERT, STAGE_LORA, STAGE_MERGE, STAGE_QUANTIZE, STAGE_SMOKE
from app.core.ship.errors import ShipError
from tests.tiny_model import CHATML

WAIT_MS = 15_000
ANSWER = '<tool_call>{"name": "Bash", "arguments": {"command": "pytest -x"}}</tool_call>'
REASON = "next-action agreement 0.400 → 0.300 fell"



def checkpoints(store, manager, chat_file, model: str, count: int = 3) -> list[int]:
    """A completed job with `count` registered checkpoints (real folders, no training); their ids, oldest first."""
    job = manager.submit(chat_file, model=model, start=False)
    run_dir = Path(job.spec_path).parent
    with store.session() as s:
        s.get(Job, job.id).state = "completed"
        run = Run(job_id=job.id, run_dir=str(run_dir), socket_path=str(run_dir / "engine.sock"), state="completed")
        s.add(run)
        s.flush()
        rows = []
        for n in range(1, count + 1):
            folder = run_dir / "checkpoints" / f"checkpoint-{10 * n}"
            folder.mkdir(parents=True)
            rows.append(CheckpointRow(run_id=run.id, step=10 * n, kind="checkpoint", path=str(folder)))
        s.add_all(rows)
        s.flush()
        return [r.id for r in rows]


def record_verdict(store, checkpoint_id: int, model: str, verdict: str, reasons: list[str]) -> None:
    with store.session() as s:
        ev = EvalRow(checkpoint_id=checkpoint_id, base_model=model, label=f"#{checkpoint_id}", eval_set="held.jsonl",
                     eval_set_sha256="0" * 64, settings_sha256="0" * 64, report_path="report.json")
        s.add(ev)
        s.flush()
        s.add(VerdictRow(checkpoint_id=checkpoint_id, eval_id=ev.id, verdict=verdict,
                         reasons_json=json.dumps(reasons), thresholds_json="{}"))


def ref_of(target) -> str:
    """How the Ship tab names a model ('#ID', 'base:MODEL'): what the stand-ins record of each call."""
    return f"base:{target.base_model}" if target.is_base else f"#{target.id}"


class StandIns:
    """Stand-ins for the core's export / deploy / rollback / server calls (the real ones are tested in tests/core/ship)."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[tuple] = []
        self.cancels = []  # the cancel event each export was given
        self.block = False  # an export waits for its cancel event
        self.refusal: ShipError | None = None  # what deploy raises
        self.asked: list[list[dict]] = []  # the messages each chat sent
        monkeypatch.setattr(exports, "export", self.export)
        monkeypatch.setattr(deploy, "deploy", self.deploy)
        monkeypatch.setattr(deploy, "rollback", self.rollback)
        monkeypatch.setattr(server, "start", self.start)
        monkeypatch.setattr(server, "stop", self.stop)
        monkeypatch.setattr(server, "chat", self.chat)

    def export(self, store, target, quants=None, lora=True, sink=None, cancel=None, force=False) -> exports.Export:
        target = registry.resolve(store, target) if isinstance(target, str) else target  # a test names a ref
        self.calls.append(("export", ref_of(target), quants))
        self.cancels.append(cancel)
        if self.block:
            cancel.wait(WAIT_MS / 1000)
            raise ShipError(f"the export of {target.label} was cancelled", why="nothing was kept")
        with store.session() as s:
            done = s.query(ExportRow).filter_by(label=target.label, key=",".join(quants)).first()
        if done is not None:
            sink(P.make(P.Log(message=f"reusing export #{done.id} of {target.label}")))
            return exports.Export(done)
        stages = [(STAGE_MERGE, 3), (STAGE_CONVERT, 1), (STAGE_QUANTIZE, len(quants))]
        stages += ([] if target.is_base else [(STAGE_LORA, 1)]) + [(STAGE_SMOKE, len(quants))]
        for phase, total in stages:
            for step in range(total + 1):
                sink(P.make(P.Progress(step=step, total=total, phase=phase, elapsed_s=0.5 * step,
                                       eta_s=0.5 * (total - step))))
        sink(P.make(P.Log(message="answers and stops")))
        return self.record(store, target, quants)

    @staticmethod
    def record(store, target, quants: list[str]) -> exports.Export:
        with store.session() as s:
            row = ExportRow(checkpoint_id=target.id, base_model=target.base_model, label=target.label,
                            key=",".join(quants), path="", files_json="[]",
                            meta_json=json.dumps({"stop": ["<|im_end|>"], "eos_token": "<|im_end|>",
                                                  "bos_token": "", "template": CHATML}))
            s.add(row)
            s.flush()
            folder = exports.exports_dir() / f"export-{row.id}"
            folder.mkdir()
            files = []
            for quant in quants:
                gguf = folder / f"{exports.file_stem(target)}.{quant}.gguf"
                gguf.write_bytes(b"GGUF" + bytes(2_000_000))
                files.append({"quant": quant, "file": gguf.name, "sha256": sha256_file(gguf),
                              "size": gguf.stat().st_size, "quant_type": quant.upper(), "load_s": 0.42,
                              "tokens_per_s": 85.3, "answer": ANSWER, "finish_reason": "stop", "ok": True, "why": ""})
            row.path, row.files_json = str(folder), json.dumps(files)
        return exports.Export(row)

    def deploy(self, store, target, quant="q4_k_m", sink=None, cancel=None, port=None) -> deploy.Deployed:
        target = registry.resolve(store, target) if isinstance(target, str) else target  # a test names a ref
        self.calls.append(("deploy", ref_of(target), quant))
        if self.refusal is not None:
            raise self.refusal
        exp = self.export(store, target, [quant], sink=sink, cancel=cancel)
        entry, before = exp.file(quant), deploy.current(store)
        row = Deployment(export_id=exp.row.id, file=entry["file"], quant=quant, sha256=entry["sha256"],
                         checkpoint_id=exp.row.checkpoint_id, base_model=exp.row.base_model, action="deploy",
                         replaces_id=before.id if before else None, note=f"deployed {exp.row.label} ({quant})")
        with store.session() as s:
            s.add(row)
        return deploy.Deployed(row, exp, self.serve(store, row, before))

    def rollback(self, store, port=None) -> deploy.Deployed:
        self.calls.append(("rollback",))
        now = deploy.current(store)
        with store.session() as s:
            before = s.get(Deployment, now.replaces_id)
        exp = exports.get(store, before.export_id)
        row = Deployment(export_id=before.export_id, file=before.file, quant=before.quant, sha256=before.sha256,
                         checkpoint_id=before.checkpoint_id, base_model=before.base_model, action="rollback",
                         replaces_id=before.replaces_id, note=f"rolled back to {exp.row.label} ({before.quant})")
        with store.session() as s:
            s.add(row)
        return deploy.Deployed(row, exp, self.serve(store, before, now))

    def serve(self, store, row: Deployment, standby: Deployment | None) -> dict:
        models = [deploy.served_model(r, exports.get(store, r.export_id)) if r else None for r in (row, standby)]
        return self.start(*models)

    def start(self, current: server.Model, standby: server.Model | None = None, port=None) -> dict:
        """The state file the real server writes (its pid: this process, so `server.state()` reads it as running)."""
        self.calls.append(("start", current.name))
        state = {"pid": os.getpid(), "url": "http://127.0.0.1:8765/v1", "host": "127.0.0.1", "port": 8765,
                 "current": {**current.payload(), "load_s": 0.42},
                 "standby": {**standby.payload(), "load_s": 0.4} if standby else None}
        (server.serve_dir() / "server.json").write_text(json.dumps(state), encoding="utf-8")
        return state

    def stop(self, timeout: float = 30.0) -> bool:
        self.calls.append(("stop",))
        (server.serve_dir() / "server.json").unlink(missing_ok=True)
        return True

    def chat(self, messages: list[dict], max_tokens: int = 256, **_) -> dict:
        self.asked.append(messages)
        answer = f"stand-in answer to {messages[-1]['content']}"
        return {"choices": [{"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]}
