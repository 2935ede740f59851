"""The runtime: holds the data dir's lock and runs every background loop on its own thread — capture, the queue's
scheduler, the model-server keeper, the cycle orchestrator, and on a team member's data dir the shipper (shipping.py)
— with one bus and a status channel for viewers. The same code runs inside the window, the daemon or the team
server."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from app.core.base.store import Store
from app.core.runtime.machinery import lock as runtime_lock
from app.core.runtime.machinery.bus import Bus, Kind
from app.core.runtime.machinery.channel import StatusChannel
from app.core.runtime.school.orchestrator import Orchestrator
from app.core.runtime.school.policy import load
from app.core.runtime.shipping import Shipper

log = logging.getLogger("nightschool.runtime")
TICK_S = 1.0  # the queue's scheduler
CYCLE_S = 5.0  # the orchestrator looks at its triggers at least this often
KEEP_S = 30.0  # the model-server keeper


class Runtime:
    """start() takes the lock (RuntimeBusy when another process holds it) and starts the loops; stop() ends them and
    leaves running engines alone (they are re-attached at the next start)."""

    def __init__(self, role: str = "daemon", store: Store | None = None, capture: bool = True, keeper: bool = True,
                 tick_s: float = TICK_S, cycle_s: float = CYCLE_S, capture_config=None,
                 team_retry_s: float | None = None) -> None:
        """capture_config: the capture settings to watch with (a CaptureConfig; None: the saved ones).
        team_retry_s: seconds between a member's pushes while its server is away (None: the `team.retry_s`
        setting)."""
        self.role, self.store = role, store or Store()
        self.capture_config = capture_config
        self.capture_on, self.keeper_on, self.tick_s, self.cycle_s = capture, keeper, tick_s, cycle_s
        self.bus = Bus()
        self.stopping = threading.Event()
        self.wake_up = threading.Event()
        self.lock: runtime_lock.RuntimeLock | None = None
        self.channel: StatusChannel | None = None
        self.capture = None
        self.queue = None
        self.orchestrator: Orchestrator | None = None
        self.shipper = Shipper(self.store, self.bus, self.stopping, team_retry_s) if capture else None
        self._threads: list[threading.Thread] = []

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> Runtime:
        from app.core.queue.scheduler import Queue

        self.lock = runtime_lock.RuntimeLock.acquire(self.role)
        self.channel = StatusChannel(self.bus, runtime_lock.runtime_dir(), self.snapshot)
        self.channel.start()
        self.lock.update(channel=str(self.channel.path), token=self.channel.token)
        self.queue = Queue(self.store)
        self.orchestrator = Orchestrator(self.store, self.bus, self.queue, self.stopping)
        if self.capture_on:
            self._start_capture()
            self._spawn("runtime-team", self.shipper.run)
        self._spawn("runtime-queue", self._tick_loop)
        if self.keeper_on:
            self._spawn("runtime-keeper", self._keep_loop)
        self._spawn("runtime-cycles", self._cycle_loop)
        self.bus.publish(Kind.RUNTIME_STARTED, role=self.role, pid=self.lock.info["pid"])
        log.info("runtime started (%s, pid %s)", self.role, self.lock.info["pid"])
        return self

    def stop(self) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.wake_up.set()
        if self.shipper is not None:
            self.shipper.nudge()
        if self.capture is not None:
            self.capture.stop()
        for thread in self._threads:
            thread.join(timeout=30)
        self.bus.publish(Kind.RUNTIME_STOPPED, role=self.role)
        if self.channel is not None:
            self.channel.stop()
        if self.lock is not None:
            self.lock.release()
        log.info("runtime stopped")

    def wake(self) -> None:
        """Look at the cycle now (a session was captured, a command came)."""
        self.wake_up.set()

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=self._guarded(name, target), name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _guarded(self, name: str, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except Exception as exc:  # noqa: BLE001 - said on the bus and in the log; the others go on
                log.exception("%s stopped", name)
                self.bus.publish(Kind.RUNTIME_ERROR, loop=name, message=f"{type(exc).__name__}: {exc}")
        return run

    # --- loops ---------------------------------------------------------------------------------
    def _start_capture(self) -> None:
        from app.core.capture.ingest import Ingestor
        from app.core.capture.sources import CaptureConfig
        from app.core.capture.watcher import CaptureService

        def ingested(result) -> None:
            self.bus.publish(Kind.CAPTURE, path=str(result.path), agent=result.agent, sessions=result.sessions,
                             stored=result.stored)
            if result.sessions or result.stored:
                self.shipper.nudge()  # a team member's new sessions go out on the shipper's thread
            self.wake()

        config = self.capture_config or CaptureConfig.load()
        self.capture = CaptureService(Ingestor(self.store, config), config, on_ingest=ingested)
        self.capture.start()

    def _tick_loop(self) -> None:
        while not self.stopping.is_set():
            report = self.queue.tick()
            for job_id in report.started:
                self.bus.publish(Kind.JOB_STARTED, job=job_id)
            for job_id, state in report.ended:
                self.bus.publish(Kind.JOB_ENDED, job=job_id, state=state)
                self._fatal_alert(job_id, state)
                self.wake()
            for job_id, why in report.failed_to_start:
                self.bus.publish(Kind.JOB_ENDED, job=job_id, state="failed", reason=why)
            for outcome in report.inbox:
                self.bus.publish(Kind.INBOX, name=outcome.name, job=outcome.job_id, reason=outcome.reason,
                                 moved_to=str(outcome.moved_to))
            self.stopping.wait(self.tick_s)

    def _fatal_alert(self, job_id: str, state: str) -> None:
        if state != "failed":
            return
        from app.core.train.events import read_events

        run = self.queue.manager.latest_run(job_id)
        events = read_events(Path(run.run_dir) / "events.jsonl") if run else []
        for env in events:
            if env.type == "alert" and getattr(env.body, "severity", "") == "fatal":
                self.bus.publish(Kind.ALERT_FATAL, job=job_id, kind=env.body.kind, message=env.body.message)
                return

    def _keep_loop(self) -> None:
        from app.core.base import settings
        from app.core.runtime.school.resources import PARKED_KEY
        from app.core.ship import serving
        from app.core.ship.deploy import ensure_serving

        while not self.stopping.is_set():
            if not settings.get(self.store, PARKED_KEY, False):
                try:
                    was = serving.state()
                    state = ensure_serving(self.store, load(self.store).port)
                    if was is None and state is not None:
                        self.bus.publish(Kind.SERVER_RESTARTED, url=state.get("url"),
                                         model=(state.get("current") or {}).get("name"))
                except Exception as exc:  # noqa: BLE001 - the keeper tries again; the reason is shown
                    self.bus.publish(Kind.SERVER_ERROR, message=str(exc))
            self.stopping.wait(KEEP_S)

    def _cycle_loop(self) -> None:
        while not self.stopping.is_set():
            self.wake_up.clear()
            try:
                self.orchestrator.step()
            except Exception as exc:  # noqa: BLE001 - the cycle's own failures are recorded by the orchestrator
                log.exception("cycle step failed")
                self.bus.publish(Kind.RUNTIME_ERROR, loop="cycles", message=f"{type(exc).__name__}: {exc}")
            self.wake_up.wait(self.cycle_s)

    # --- views -----------------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """What a viewer gets first: the school's status, and each capture source as this runtime's watcher has it
        (None when it does not capture)."""
        from dataclasses import asdict

        from app.core.runtime.school.facade import School

        capture = self.capture
        return {**School(self.store).status(),
                "capture": [asdict(s) for s in capture.status()] if capture is not None else None}
