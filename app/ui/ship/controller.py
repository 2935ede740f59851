"""Ship controller: checkpoints with their gate verdicts; export, deploy, roll back, serve, chat on worker threads."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from PySide6.QtCore import Signal

from app.core.base import protocol
from app.core.base.errors import Explained
from app.core.base.schema import Deployment
from app.core.judge import records
from app.core.ship import deploy, exports, lmstudio, ollama, serving
from app.core.ship.errors import ShipError
from app.ui.background import BackgroundController
from app.ui.judge.controller import read_choices as judge_choices
from app.ui.kit import local_time
from app.ui.ship.connect import ConnectController

MARKS = {"pass": "✓", "fail": "✗", "inconclusive": "?", None: "–", "base": "◆"}
CHAT_TURNS = 8  # messages of the conversation sent with each question (the model's context is small)


@dataclass
class ShipChoice:
    """A model the Ship tab can export: the base model or a checkpoint, with its newest gate verdict."""

    ref: str
    label: str
    base_model: str
    checkpoint_id: int | None
    verdict: str | None  # "base" | pass | fail | inconclusive | None (not judged)
    why: str = ""  # why Deploy is refused ("" when it can be deployed)

    @property
    def deployable(self) -> bool:
        return not self.why

    @property
    def text(self) -> str:
        return f"{MARKS.get(self.verdict, '✗')}  {self.label}"


@dataclass
class Served:
    """The server's state (None: stopped), the deployment it serves and its label, the API key."""

    state: dict | None
    current: Deployment | None
    label: str
    key: str


@dataclass
class Snapshot:
    choices: list[ShipChoice]
    served: Served
    history: list[tuple[str, str, str, str, str]]  # time, action, model, quant, note
    latest: exports.Export | None


def model_stem(choice: ShipChoice) -> str:
    """The default model name for Ollama / LM Studio (the export's file stem: <base>-ck<ID> or <base>-base)."""
    return exports.stem_of(choice.base_model, choice.checkpoint_id)


def answer_of(body: dict) -> str:
    """The answer text of an OpenAI chat response (tool calls written as <tool_call> lines)."""
    message = body["choices"][0]["message"]
    calls = [c.get("function", c) for c in message.get("tool_calls") or []]
    lines = [message.get("content") or ""] + [
        "<tool_call>" + json.dumps({"name": f.get("name"), "arguments": f.get("arguments")}) + "</tool_call>"
        for f in calls]
    return "\n".join(line for line in lines if line) or "(an empty answer)"


class ShipController(BackgroundController):
    """Model side of the Ship tab: it emits, the view subscribes; every core call runs on a worker thread."""

    choices_changed = Signal(object)  # list[ShipChoice]
    served_changed = Signal(object)  # Served
    history_changed = Signal(object)  # list of (time, action, model, quant, note)
    exported = Signal(object)  # Export: what an export / deploy / Ollama / LM Studio step made or reused
    latest_changed = Signal(object)  # Export: the newest recorded export (read on refresh)
    started = Signal(str, bool)  # what runs ("Exporting #12 …"), whether it reports stages (and can be cancelled)
    progress = Signal(str, int, int, object, object)  # phase, step, total, eta_s, elapsed_s
    log = Signal(str)
    chatting_changed = Signal(bool)
    answered = Signal(str, bool)  # the answer (or the error sentence), ok

    def __init__(self, store) -> None:
        super().__init__()
        self.store = store
        self.choices: list[ShipChoice] = []
        self.served: Served | None = None
        self.conversation: list[dict] = []
        self.chatting = False
        self._cancel = threading.Event()  # the running operation's; Cancel and stop() set it
        self.connections = ConnectController(store)  # "Use it in…": agent tools connected to the student, its work

    # --- threads -------------------------------------------------------------------------------------
    def _run(self, what: str, work: Callable, done: Callable, failed: str, staged: bool = False) -> bool:
        """work(cancel) on a thread, then done(result) here and a refresh; a refusal comes back as `failed — why`."""
        if self.busy:
            self.message.emit("error", "The Ship tab is busy: wait for the running step (or cancel it).")
            return False
        cancel = self._cancel = threading.Event()
        self._set_busy(True)
        self.started.emit(what, staged)
        self._background("ship-" + what.split()[0].lower(), lambda: work(cancel), done, failed)
        return True

    def _finish(self, handler: Callable, result) -> None:
        handler(result)  # the outcome is shown before the tab turns idle
        self._set_busy(False)
        self.refresh()

    def _sink(self, env: protocol.Envelope) -> None:
        """The export worker's envelopes (called on the worker thread)."""
        body = env.body
        if env.type == "progress" and isinstance(body, protocol.Progress):
            self._post(self.progress.emit, (body.phase, body.step, body.total, body.eta_s, body.elapsed_s))
        elif env.type == "log" and isinstance(body, protocol.Log):
            self._post(self.log.emit, (body.message,))

    def cancel(self) -> None:
        if self.busy and not self._cancel.is_set():
            self._cancel.set()
            self.log.emit("cancelling…")

    def stop(self) -> None:
        """Window closing: a running export is cancelled, results still in flight are dropped (the server stays)."""
        self._closed = True
        self._cancel.set()
        self.connections.stop()

    # --- reading -------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the checkpoints, the server, the deployments and the latest export, on a thread."""
        threading.Thread(target=lambda: self._post(self._on_snapshot, (read_snapshot(self.store),)),
                         name="ship-list", daemon=True).start()
        self.connections.refresh()

    def _on_snapshot(self, snap: Snapshot) -> None:
        self.choices, self.served = snap.choices, snap.served
        self.choices_changed.emit(snap.choices)
        self.served_changed.emit(snap.served)
        self.history_changed.emit(snap.history)
        if snap.latest is not None:
            self.latest_changed.emit(snap.latest)

    def choice(self, ref: str) -> ShipChoice | None:
        return next((c for c in self.choices if c.ref == ref), None)

    # --- exporting and deploying ---------------------------------------------------------------------------
    def export(self, ref: str, quant: str) -> bool:
        """Export to GGUF (merge, convert, quantize, LoRA, smoke test); an identical earlier export is reused."""
        label = self._label(ref)
        return self._run(f"Exporting {label} ({quant})",
                         lambda cancel: exports.export(self.store, records.resolve(self.store, ref), [quant],
                                                       sink=self._sink, cancel=cancel),
                         self._on_exported, f"Not exported ({label})", staged=True)

    def _on_exported(self, exp: exports.Export) -> None:
        self.exported.emit(exp)
        bad = [f for f in exp.files if f.get("ok") is False]
        names = ", ".join(f["file"] for f in exp.files)
        if bad:
            self.message.emit("error", f"Exported {exp.row.label} ({names}), but {bad[0]['file']} failed its smoke "
                                       f"test: {bad[0].get('why', '')}. It cannot be deployed.")
        else:
            self.message.emit("info", f"Exported {exp.row.label}: {names} in {exp.folder}.")

    def deploy(self, ref: str, quant: str) -> bool:
        """Gate → export → smoke-verified file → the built-in server serves it."""
        label = self._label(ref)
        return self._run(f"Deploying {label} ({quant})",
                         lambda cancel: deploy.deploy(self.store, records.resolve(self.store, ref), quant,
                                                      sink=self._sink, cancel=cancel),
                         self._on_deployed, f"Not deployed ({label})", staged=True)

    def _on_deployed(self, done: deploy.Deployed) -> None:
        self.exported.emit(done.export)
        where = f"served at {done.state['url']}" if done.state else "the server is stopped"
        self.message.emit("info", f"{done.row.note[0].upper()}{done.row.note[1:]}: {where}.")

    def rollback(self) -> bool:
        """Serve again what the current deployment replaced (instant when the server still holds it)."""
        return self._run("Rolling back", lambda cancel: deploy.rollback(self.store), self._on_rolled_back,
                         "Not rolled back")

    def _on_rolled_back(self, done: deploy.Deployed) -> None:
        self.message.emit("info", f"{done.row.note[0].upper()}{done.row.note[1:]}.")

    def to_ollama(self, ref: str, quant: str, name: str) -> bool:
        """The export's Modelfile beside its GGUF, then `ollama create NAME` (the result says how it went)."""
        def work(cancel):
            exp = exports.export(self.store, records.resolve(self.store, ref), [quant], sink=self._sink, cancel=cancel)
            meta = exp.meta
            path = ollama.write(exp.folder, exp.path(quant), meta.get("template", ""), meta.get("eos_token", ""),
                                meta.get("bos_token", ""), name)
            return exp, path, ollama.register(path, name)
        return self._run(f"Registering {self._label(ref)} with Ollama as {name}", work, self._on_ollama,
                         "Not registered with Ollama", staged=True)

    def _on_ollama(self, result: tuple) -> None:
        exp, path, done = result
        self.exported.emit(exp)
        if done.ok:
            self.message.emit("info", f"{done.message} (Modelfile: {path})")
        else:
            self.message.emit("error", f"Wrote {path}, but not registered — {done.message}")

    def to_lmstudio(self, ref: str, quant: str, name: str) -> bool:
        """The export's GGUF placed in LM Studio's models folder."""
        def work(cancel):
            exp = exports.export(self.store, records.resolve(self.store, ref), [quant], sink=self._sink, cancel=cancel)
            return exp, lmstudio.export(exp.path(quant), name, quant=quant)
        return self._run(f"Exporting {self._label(ref)} to LM Studio", work, self._on_lmstudio,
                         "Not placed in LM Studio", staged=True)

    def _on_lmstudio(self, result: tuple) -> None:
        exp, path = result
        self.exported.emit(exp)
        self.message.emit("info", f"Placed in LM Studio's models folder: {path}. LM Studio lists it under My Models "
                                  f"({Path(path).parent.parent.name}/{Path(path).parent.name}).")

    def _label(self, ref: str) -> str:
        found = self.choice(ref)
        return found.label if found else ref

    # --- the server ----------------------------------------------------------------------------------
    def start_server(self) -> bool:
        return self._run("Starting the model server", lambda cancel: start_serving(self.store),
                         self._on_server, "The model server did not start")

    def stop_server(self) -> bool:
        return self._run("Stopping the model server", lambda cancel: serving.stop(), self._on_stopped,
                         "The model server did not stop")

    def resume_serving(self) -> bool:
        """At start-up: the server runs again with the current deployment when the user left it on."""
        def work(cancel):
            before = serving.state()
            after = deploy.ensure_serving(self.store)
            return after if before is None else None
        return self._run("Checking the model server", work, self._on_resumed, "The model server was not restarted")

    def _on_server(self, st: dict) -> None:
        self.message.emit("info", f"The model server serves {st['current']['name']} at {st['url']}.")

    def _on_resumed(self, st: dict | None) -> None:
        if st is not None:
            self.message.emit("info", f"Restarted the model server you left on: it serves {st['current']['name']} "
                                      f"at {st['url']}.")

    def _on_stopped(self, stopped: bool) -> None:
        self.message.emit("info", "Stopped the model server." if stopped else "The model server was not running.")

    def chat(self, text: str) -> bool:
        """Ask the served model (the conversation so far goes with it); `answered` follows."""
        text = text.strip()
        if not text or self.chatting:
            return False
        self._set_chatting(True)
        messages = (self.conversation + [{"role": "user", "content": text}])[-CHAT_TURNS:]

        def body() -> None:
            try:
                answer, ok = answer_of(serving.chat(messages)), True
            except Explained as exc:
                answer, ok = str(exc), False
            except Exception as exc:  # noqa: BLE001 - shown in the transcript
                answer, ok = f"The chat failed: unexpected {type(exc).__name__}: {exc}.", False
            self._post(self._on_answer, (messages, answer, ok))

        threading.Thread(target=body, name="ship-chat", daemon=True).start()
        return True

    def _on_answer(self, messages: list[dict], answer: str, ok: bool) -> None:
        self._set_chatting(False)
        if ok:
            self.conversation = messages + [{"role": "assistant", "content": answer}]
        self.answered.emit(answer, ok)

    def clear_chat(self) -> None:
        self.conversation = []

    def _set_chatting(self, chatting: bool) -> None:
        self.chatting = chatting
        self.chatting_changed.emit(chatting)


# --- worker threads -------------------------------------------------------------------------------------

def read_choices(store) -> list[ShipChoice]:
    """The base model(s) then every checkpoint, each with its newest verdict and, when not deployable, why."""
    out = []
    for c in judge_choices(store):
        if c.checkpoint_id is None:
            out.append(ShipChoice(c.ref, c.label, c.base_model, None, "base"))
            continue
        found = records.verdicts_of(store, c.checkpoint_id)
        verdict = found[0].verdict if found else None
        if verdict is None:
            why = (f"{c.label} has not been judged: promote it in the Judge tab first (only a checkpoint that passed "
                   "the quality gate can be deployed). It can still be exported.")
        elif verdict != "pass":
            reasons = "; ".join(records.verdict_reasons(found[0])) or verdict.replace("_", " ")
            why = (f"{c.label} did not pass the quality gate ({verdict.replace('_', ' ')}): {reasons}. "
                   "It can still be exported.")
        else:
            why = ""
        out.append(ShipChoice(c.ref, c.label, c.base_model, c.checkpoint_id, verdict, why))
    return out


def read_snapshot(store) -> Snapshot:
    rows = deploy.history(store)
    labels: dict[int, str] = {}
    for row in rows:
        if row.export_id not in labels:
            try:
                labels[row.export_id] = exports.get(store, row.export_id).row.label
            except Explained:
                labels[row.export_id] = f"export #{row.export_id}"
    history = [(local_time(r.created_at), r.action, f"{labels[r.export_id]} · {r.file}", r.quant, r.note)
               for r in rows]
    now = rows[0] if rows else None
    served = Served(serving.state(), now, labels.get(now.export_id, "") if now else "", serving.api_key())
    latest = exports.history(store, limit=1)
    return Snapshot(read_choices(store), served, history, latest[0] if latest else None)


def start_serving(store) -> dict:
    """Start the server with the current deployment (and the one it replaced kept loaded for an instant rollback)."""
    now = deploy.current(store)
    if now is None:
        raise ShipError("nothing is deployed yet", why="the server serves the current deployment",
                        fix="select the base model or a checkpoint that passed the gate and press Deploy")
    previous = None
    if now.replaces_id is not None:
        with store.session() as s:
            before = s.get(Deployment, now.replaces_id)
        previous = deploy.served_model(before, exports.get(store, before.export_id))
        previous = previous if Path(previous.path).is_file() else None
    return serving.start(deploy.served_model(now, exports.get(store, now.export_id)), previous)
