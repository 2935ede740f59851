"""What a watcher knows about one training job, built from its events (Qt-free): state, progress, chart series that
rewind when a resumed engine re-reports steps, alerts, error, result. The Training tab and the terminal view share it."""
from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path

from app.core.base import protocol as P

LIVE_STATES = ("starting", "loading", "resuming", "running", "paused", "stopping", "saving")
WAITING_STATES = ("queued", "held", "launching")  # in the queue: not started yet, not final either
# chart series fed by a training step's metrics: (series, Metrics field); reward components are "reward · <name>"
TRAIN_SERIES = (("loss", "loss"), ("lr", "lr"), ("grad norm", "grad_norm"), ("tokens/s", "tokens_per_s"),
                ("RAM", "ram_mb"), ("VRAM", "vram_mb"), ("GPU", "gpu_util"), ("reward", "reward"))
EVAL_SERIES = (("eval loss", "eval_loss"),)
REWARD_PREFIX = "reward · "
DIAGNOSIS_CAP = 256 * 1024  # bytes of diagnosis.md read for the alerts view
_CHECKPOINT_STEP = re.compile(r"checkpoint[^0-9]*(\d+)|(\d+)")


@dataclass
class JobView:
    """What a watcher knows about one job, built from its events."""

    id: str
    data: str = ""
    state: str = "starting"
    detail: str = ""
    step: int = 0
    total: int = 0
    eta: float | None = None
    loss: float | None = None
    error: str | None = None
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # chart series -> (step, value)
    last_step: dict[str, int] = field(default_factory=dict)  # "train" | "eval" -> step of the last metrics
    alerts: list[P.Alert] = field(default_factory=list)
    resumes: list[int] = field(default_factory=list)  # checkpoint steps the engine resumed from
    metrics_seen: bool = False
    gpu_reported: bool = False  # some metrics carried gpu_util
    events: int = 0
    final: bool = False  # the engine has exited and its result was checked and recorded
    result: P.Result | None = None

    def pts(self, series: str) -> list[tuple[int, float]]:
        return self.series.setdefault(series, [])

    @property
    def loss_pts(self) -> list[tuple[int, float]]:
        return self.pts("loss")

    @property
    def ram_pts(self) -> list[tuple[int, float]]:
        return self.pts("RAM")

    @property
    def vram_pts(self) -> list[tuple[int, float]]:
        return self.pts("VRAM")

    def set_job_state(self, state: str, error: str | None) -> None:
        """The job's state as the store has it (no events: queued, held, or ended while nobody watched)."""
        self.state, self.final = state, state not in LIVE_STATES + WAITING_STATES
        self.error = error if state == "failed" else None


@dataclass
class Update:
    """What one event changed, for a view to redraw: the row, new points, rewound series, a resume, an alert."""

    changed: bool = False
    points: list[tuple[str, int, float]] = field(default_factory=list)  # (series, step, value)
    rewound: list[tuple[str, int]] = field(default_factory=list)  # (series, step): points from step on dropped
    resumed: int | None = None  # the checkpoint step the engine resumed from
    alert: int | None = None  # index in JobView.alerts


def apply(view: JobView, env: P.Envelope) -> Update:
    """Fold one engine event into the view."""
    view.events += 1
    body, out = env.body, Update()
    if env.type == "state":
        view.state, view.detail = body.state, body.detail
        if body.state == "resuming":
            _on_resuming(view, body.detail, out)
    elif env.type == "progress" and body.phase == "train":
        view.step, view.total, view.eta = body.step, body.total, body.eta_s
    elif env.type == "metrics":
        _on_metrics(view, body, out)
        return out
    elif env.type == "log" and view.state in ("starting", "loading"):
        view.detail = body.message  # e.g. the one-time model materialisation steps
    elif env.type == "alert":
        view.alerts.append(body)
        out.alert = len(view.alerts) - 1
        return out
    elif env.type == "error":
        view.error = f"{body.message}. {body.why} {body.fix}".strip()
    elif env.type == "result":
        view.result = body
        return out
    else:
        return out
    out.changed = True
    return out


def _on_metrics(view: JobView, m: P.Metrics, out: Update) -> None:
    """Each series keeps the latest value per step: metrics for a step already plotted (a resumed engine re-emits
    the steps after its checkpoint) first drop that group's points from that step on."""
    train = [(name, getattr(m, key)) for name, key in TRAIN_SERIES]
    train += [(REWARD_PREFIX + name.removeprefix("reward_"), value) for name, value in m.rewards.items()]
    evals = [(name, getattr(m, key)) for name, key in EVAL_SERIES]
    flagged = set(m.nonfinite)
    groups = {"train": any(v is not None for _, v in train) or bool(flagged - {"eval_loss"}),
              "eval": m.eval_loss is not None or "eval_loss" in flagged}
    view.metrics_seen = True
    view.gpu_reported = view.gpu_reported or m.gpu_util is not None
    for group, present in groups.items():
        if not present:
            continue
        last = view.last_step.get(group)
        if last is not None and m.step <= last:
            names = [n for n in view.series if (n == "eval loss") == (group == "eval")]
            _rewind(view, names, m.step, out)
        view.last_step[group] = m.step
    for name, value in train + evals:
        if value is not None:
            view.pts(name).append((m.step, value))
            out.points.append((name, m.step, float(value)))
    if m.loss is not None:
        view.loss = m.loss
        out.changed = True


def _on_resuming(view: JobView, detail: str, out: Update) -> None:
    """The engine resumes from a checkpoint: it will report the steps after it again, so they are dropped."""
    match = _CHECKPOINT_STEP.search(detail or "")
    if match is None:
        return
    step = int(match.group(1) or match.group(2))
    view.resumes.append(step)
    _rewind(view, list(view.series), step + 1, out)
    for group, last in list(view.last_step.items()):
        view.last_step[group] = min(last, step)
    out.resumed = step


def _rewind(view: JobView, names: list[str], step: int, out: Update) -> None:
    for name in names:
        pts = view.series.get(name)
        if pts and pts[-1][0] >= step:
            del pts[bisect_left(pts, step, key=lambda p: p[0]):]
            out.rewound.append((name, step))


def read_diagnosis(alert: P.Alert, cap: int = DIAGNOSIS_CAP) -> str:
    """Markdown for one alert: its section of the run's diagnosis.md (the whole file when no section matches),
    read up to `cap` bytes; the alert's own message when there is no file."""
    head = f"**{alert.severity.upper()}** · {alert.kind}"
    head += f" · step {alert.step}" if alert.step is not None else ""
    if not alert.diagnosis_path:
        return f"{head}\n\n{alert.message}\n\n*No diagnosis file was written for this alert.*"
    path = Path(alert.diagnosis_path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(cap + 1)
    except OSError as exc:
        return f"{head}\n\n{alert.message}\n\n*The diagnosis could not be read: {exc.strerror or exc}.*"
    text = raw[:cap].decode("utf-8", errors="replace")
    note = f"\n\n*Only the first {cap // 1024} KB of the diagnosis are shown.*" if len(raw) > cap else ""
    section = _section(text, alert)
    return (section or text) + note


def _section(text: str, alert: P.Alert) -> str | None:
    """The last '## SEVERITY kind at step N' section of diagnosis.md that belongs to this alert."""
    where = f"at step {alert.step}" if alert.step is not None else "at no step yet"
    wanted = f" {alert.kind} {where} "
    sections = re.split(r"(?m)^(?=## )", text)
    found = [part for part in sections if part.startswith("## ") and wanted in part.splitlines()[0] + " "]
    return "####" + found[-1][2:].rstrip() if found else None  # a smaller heading: it is one alert of the file


def waiting_words(job, where: str) -> str | None:
    """What a job with no run waits for, in a sentence; None when it no longer waits (it ended before any run)."""
    on = f" on {where}" if where != "local" else ""
    if job.state == "queued":
        return (f"job {job.id} is queued{on}: it starts once no other job holds the queue, while the app, the daemon "
                "or `nightschool queue run` is running")
    if job.state == "held":
        return f"job {job.id} is held: it starts once resumed (nightschool queue resume {job.id})"
    if job.state == "launching":
        return f"job {job.id} is being started{on}"
    return None
