"""The teacher: re-answers flagged experiences through an OpenAI-compatible chat API, within its limits."""
from __future__ import annotations

import email.utils
import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlparse

import requests
from sqlalchemy import func, select, update

from app.core.base.schema import CorrectionRow, ExperienceRow, TeacherCallRow
from app.core.base.store import Store
from app.core.experience import config, corrections, keys
from app.core.experience.config import TeacherConfig

log = logging.getLogger("nightschool.teacher")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}  # a local teacher server may need no key
ANSWERED, UNREACHABLE, RATE_LIMITED, ERROR = "answered", "unreachable", "rate_limited", "error"
NOT_READY = "not_ready"  # not asked: not configured, asked to wait, or over the day's budget


@dataclass
class CorrectionRun:
    """What one run of the teacher did, and why it stopped (empty when it went through every due entry)."""

    tried: int = 0
    accepted: int = 0
    waiting: int = 0
    rejected: int = 0
    failed: int = 0
    tokens_used: int = 0
    budget_left: int = 0
    stopped_because: str = ""
    details: list[dict] = field(default_factory=list)  # [{experience_id, outcome, reason}]
    blocked_until: str | None = None  # ISO time the teacher asked to be left alone until (HTTP 429)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Reply:
    """One call's outcome: the parsed answer, or why there is none."""

    status: str
    http_status: int | None = None
    message: dict | None = None
    finish_reason: str = "stop"
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retry_after_s: float | None = None
    error: str = ""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def correct(store: Store, limit: int | None = None, now: datetime | None = None, by: str = "cycle") -> CorrectionRun:
    """Re-answer the due flagged entries (oldest first; at most `limit`, else the config's batch per cycle) and offer
    each answer as a correction. Stops early, saying why, when the teacher is not configured, the day's token
    budget is spent, the API asked to wait (429 Retry-After) or refused the key.

    Every call is recorded (TeacherCallRow: status, HTTP status, tokens, Retry-After); the daily budget is their sum
    since local midnight. An entry whose call fails (unreachable, an HTTP error, an answer that is not a chat
    completion) or whose correction is rejected stays flagged with the reason and is tried again after the cooldown.
    The API key goes only into the Authorization header: never into the store, a log or an error's text. A teacher
    on loopback (a local server) may have no key."""
    cfg, now = config.teacher(store), _utc(now)
    run = CorrectionRun(budget_left=_left(store, cfg, now))
    key, why = _ready(store, cfg, now)
    if why:
        run.stopped_because = why
        return run
    for exp_id in _due(store, now, cfg.batch_per_cycle if limit is None else limit):
        left = _left(store, cfg, now)
        if left <= 0:
            run.stopped_because = _over_budget(store, cfg, now)
            break
        request = _claim(store, exp_id, now, now + timedelta(minutes=cfg.cooldown_min))
        if request is None:  # deleted by retention, or taken by a run in another process meanwhile
            continue
        reply = _ask(cfg, key, request)
        if reply.status == RATE_LIMITED and reply.retry_after_s is None:
            reply.retry_after_s = cfg.cooldown_min * 60  # no Retry-After: wait out the cooldown
        _record_call(store, exp_id, reply, now)
        stop = _settle(store, cfg, run, exp_id, reply, now)
        if stop:
            run.stopped_because = stop
            break
    run.budget_left = _left(store, cfg, now)
    log.info("teacher run (%s): tried %d, accepted %d, waiting %d, rejected %d, failed %d, %d tokens%s", by,
             run.tried, run.accepted, run.waiting, run.rejected, run.failed, run.tokens_used,
             f"; stopped: {run.stopped_because}" if run.stopped_because else "")
    return run


def unready(store: Store, now: datetime | None = None) -> str:
    """Why the teacher cannot be asked now (not configured, asked to wait, over the day's budget); "" when it can."""
    return _ready(store, config.teacher(store), _utc(now))[1]


def ask(store: Store, messages: list[dict], about: str, max_tokens: int | None = None,
        now: datetime | None = None) -> Reply:
    """One chat call to the teacher for another part of the school (`about` names it in the call's record, e.g. a
    blind trial), deterministic, within the day's budget and recorded against it like a correction's call; a Reply
    with status NOT_READY and the reason when it may not be asked now."""
    cfg, now = config.teacher(store), _utc(now)
    key, why = _ready(store, cfg, now)
    if why:
        return Reply(NOT_READY, error=why)
    reply = _ask(cfg.model_copy(update={"max_tokens": max_tokens}) if max_tokens else cfg, key, {"messages": messages})
    if reply.status == RATE_LIMITED and reply.retry_after_s is None:
        reply.retry_after_s = cfg.cooldown_min * 60
    _record_call(store, about, reply, now)
    return reply


def usage(store: Store, now: datetime | None = None) -> dict[str, Any]:
    """The teacher's day so far: {tokens_today, tokens_per_day, left, blocked_until, configured, key_at}."""
    cfg, now = config.teacher(store), _utc(now)
    used, blocked = tokens_today(store, now), blocked_until(store, now)
    try:
        key_at = keys.where()
    except keys.TeacherKeyError as exc:
        key_at = f"unusable: {exc.message}"
    return {"tokens_today": used, "tokens_per_day": cfg.tokens_per_day, "left": max(0, cfg.tokens_per_day - used),
            "blocked_until": blocked.isoformat() if blocked else None,
            "configured": not _missing(cfg, _key_or_none()), "key_at": key_at}


def tokens_today(store: Store, now: datetime | None = None) -> int:
    """Tokens the teacher used since local midnight."""
    midnight = _utc(now).astimezone().replace(hour=0, minute=0, second=0, microsecond=0).astimezone(UTC)
    with store.session() as s:
        return int(s.scalar(select(func.coalesce(func.sum(TeacherCallRow.tokens), 0))
                            .where(TeacherCallRow.at >= midnight)) or 0)


def blocked_until(store: Store, now: datetime | None = None) -> datetime | None:
    """Until when the teacher asked not to be called (the latest 429's Retry-After), if that is still ahead."""
    now = _utc(now)
    with store.session() as s:
        last = s.scalars(select(TeacherCallRow).where(TeacherCallRow.status == RATE_LIMITED)
                         .order_by(TeacherCallRow.at.desc(), TeacherCallRow.id.desc()).limit(1)).first()
        if last is None or last.retry_after_s is None:
            return None
        until = _utc(last.at) + timedelta(seconds=last.retry_after_s)
    return until if until > now else None


def _ready(store: Store, cfg: TeacherConfig, now: datetime) -> tuple[str, str]:
    """(the key, "") when a run may start, else ("", why not)."""
    key = _key_or_none()
    missing = _missing(cfg, key)
    if missing:
        return "", (f"the teacher is not configured: {missing}. Set it with `nightschool experience teacher url URL`, "
                    "`nightschool experience teacher model NAME` and `nightschool experience teacher key --stdin`, "
                    "or in the Experience tab")
    blocked = blocked_until(store, now)
    if blocked:
        return "", f"the teacher asked to wait (HTTP 429 Retry-After) until {blocked.isoformat(timespec='seconds')}"
    if _left(store, cfg, now) <= 0:
        return "", _over_budget(store, cfg, now)
    return key or "", ""


def _missing(cfg: TeacherConfig, key: str | None) -> str:
    gaps = [name for name, value in (("no URL", cfg.url), ("no model", cfg.model)) if not value.strip()]
    if not key and not _loopback(cfg.url):
        gaps.append("no API key")
    return ", ".join(gaps)


def _key_or_none() -> str | None:
    try:
        return keys.get_key()
    except keys.TeacherKeyError:
        return None


def _loopback(url: str) -> bool:
    return (urlparse(url).hostname or "") in LOOPBACK


def _left(store: Store, cfg: TeacherConfig, now: datetime) -> int:
    return max(0, cfg.tokens_per_day - tokens_today(store, now))


def _over_budget(store: Store, cfg: TeacherConfig, now: datetime) -> str:
    return (f"the day's token budget is spent ({tokens_today(store, now)} of {cfg.tokens_per_day} tokens); "
            "it starts again at local midnight, or raise teacher.tokens_per_day")


def _due(store: Store, now: datetime, limit: int) -> list[str]:
    """Flagged chat entries without an accepted or waiting correction whose cooldown has passed, oldest first."""
    if limit <= 0:
        return []
    pending = select(CorrectionRow.experience_id).where(CorrectionRow.state.in_(corrections.PENDING))
    q = (select(ExperienceRow.id).where(ExperienceRow.state == "flagged", ExperienceRow.route == "chat",
                                        ExperienceRow.id.not_in(pending),
                                        (ExperienceRow.next_try_at.is_(None)) | (ExperienceRow.next_try_at <= now))
         .order_by(ExperienceRow.created_at, ExperienceRow.id).limit(limit))
    with store.session() as s:
        return list(s.scalars(q))


def _claim(store: Store, exp_id: str, now: datetime, until: datetime) -> dict | None:
    """The entry's request, once it is this run's to ask about: its next try moves to `until` (the outcome sets it
    again), so a run in another process (the cycle and `correct-now`) does not ask about it at the same time."""
    due = (ExperienceRow.next_try_at.is_(None)) | (ExperienceRow.next_try_at <= now)
    with store.session() as s:  # one conditional UPDATE: SQLite's writer lock, or PostgreSQL's row lock (a second
        # claimant waits, then re-checks the WHERE on the row the first committed and takes nothing)
        taken = s.execute(update(ExperienceRow).where(ExperienceRow.id == exp_id, ExperienceRow.state == "flagged", due)
                          .values(next_try_at=until)).rowcount
        return json.loads(s.get(ExperienceRow, exp_id).request_json or "{}") if taken else None


def _body(cfg: TeacherConfig, request: dict) -> dict:
    """The same prompt with the same tools, answered deterministically within the correction's length."""
    body = {"model": cfg.model, "messages": request.get("messages") or [], "max_tokens": cfg.max_tokens,
            "temperature": 0}
    for name in ("tools", "tool_choice"):
        if request.get(name):
            body[name] = request[name]
    return body


def _ask(cfg: TeacherConfig, key: str, request: dict) -> Reply:
    """POST the request to {url}/chat/completions; every failure becomes a Reply with the reason in words."""
    url = cfg.url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = requests.post(url, json=_body(cfg, request), headers=headers, timeout=cfg.timeout_s)
    except requests.Timeout:
        return Reply(UNREACHABLE, error=f"the teacher at {cfg.url} did not answer within {cfg.timeout_s:g} s")
    except requests.RequestException as exc:
        return Reply(UNREACHABLE, error=f"the teacher at {cfg.url} could not be reached ({type(exc).__name__})")
    return _reply(response, key)


def _reply(response: requests.Response, key: str) -> Reply:
    code = response.status_code
    if code == 429:
        wait = _retry_after(response.headers.get("Retry-After"))
        return Reply(RATE_LIMITED, code, retry_after_s=wait,
                     error=f"the teacher is rate-limiting (HTTP 429); it asked to wait {wait:g} s"
                     if wait is not None else "the teacher is rate-limiting (HTTP 429) without saying how long")
    if code in (401, 403):
        return Reply(ERROR, code, error=f"the teacher refused the API key (HTTP {code}); set the right one with "
                                        "`nightschool experience teacher key --stdin`")
    if code >= 400:
        return Reply(ERROR, code, error=f"the teacher failed (HTTP {code}): {_redact(response.text[:200], key)}")
    return _parse(response, key)


def _parse(response: requests.Response, key: str) -> Reply:
    """A chat completion's first choice, or why the answer is not one."""
    try:
        data = response.json()
    except ValueError:
        return Reply(ERROR, response.status_code, error="the teacher's answer is not JSON: "
                                                        f"{_redact(response.text[:120], key)!r}")
    choices = data.get("choices") if isinstance(data, dict) else None
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    message = first.get("message") if first else None
    if not isinstance(message, dict):
        return Reply(ERROR, response.status_code, error="the teacher's answer is not a chat completion (no choices "
                                                        "with a message)")
    used = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return Reply(ANSWERED, response.status_code, message=message, finish_reason=first.get("finish_reason") or "stop",
                 model=data.get("model") if isinstance(data.get("model"), str) else "",
                 prompt_tokens=_count(used.get("prompt_tokens")), completion_tokens=_count(used.get("completion_tokens")))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds: a number of seconds or an HTTP date (RFC 9110); None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError):
        return None
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _redact(text: str, key: str) -> str:
    return text.replace(key, "<teacher key>") if key else text


def _record_call(store: Store, exp_id: str, reply: Reply, now: datetime) -> None:
    with store.session() as s:
        s.add(TeacherCallRow(at=now, experience_id=exp_id, status=reply.status, http_status=reply.http_status,
                             tokens=reply.tokens, retry_after_s=reply.retry_after_s, error=reply.error))


def _settle(store: Store, cfg: TeacherConfig, run: CorrectionRun, exp_id: str, reply: Reply,
            now: datetime) -> str:
    """Offer the answer or note the failure on the entry; returns why the run must stop ("" to go on)."""
    run.tried += 1
    run.tokens_used += reply.tokens
    if reply.status == ANSWERED:
        return _offer(store, cfg, run, exp_id, reply, now)
    if reply.status == RATE_LIMITED:
        until = now + timedelta(seconds=reply.retry_after_s or 0.0)
        _failed(store, run, exp_id, reply.error, until, outcome="rate_limited")
        run.blocked_until = until.isoformat()
        return f"the teacher asked to wait (HTTP 429 Retry-After) until {until.isoformat(timespec='seconds')}"
    _failed(store, run, exp_id, reply.error, now + timedelta(minutes=cfg.cooldown_min))
    return reply.error if reply.http_status in (401, 403) else ""


def _offer(store: Store, cfg: TeacherConfig, run: CorrectionRun, exp_id: str, reply: Reply, now: datetime) -> str:
    cost = (reply.prompt_tokens * cfg.price_in + reply.completion_tokens * cfg.price_out) / 1e6
    fix = corrections.offer(store, exp_id, reply.message, source="teacher", by="validation",
                            teacher_model=reply.model or cfg.model, prompt_tokens=reply.prompt_tokens,
                            completion_tokens=reply.completion_tokens, cost=cost, finish_reason=reply.finish_reason)
    setattr(run, fix["state"], getattr(run, fix["state"]) + 1)
    run.details.append({"experience_id": exp_id, "outcome": fix["state"], "reason": fix["reason"],
                        "correction_id": fix["id"]})
    rejected = fix["state"] == "rejected"
    with store.session() as s:
        row = s.get(ExperienceRow, exp_id)
        if row is None:
            return ""
        row.attempts += 1
        row.last_error = f"the teacher's correction was rejected: {fix['reason']}" if rejected else None
        row.next_try_at = now + timedelta(minutes=cfg.cooldown_min) if rejected else None
    return ""


def _failed(store: Store, run: CorrectionRun, exp_id: str, why: str, next_try: datetime,
            outcome: str = "failed") -> None:
    run.failed += 1
    run.details.append({"experience_id": exp_id, "outcome": outcome, "reason": why})
    with store.session() as s:
        row = s.get(ExperienceRow, exp_id)
        if row is None:  # deleted by retention during the call
            return
        row.attempts += 1
        row.last_error, row.next_try_at = why, next_try


def _utc(now: datetime | None) -> datetime:
    """A time in UTC (naive times are taken as UTC, as the store keeps them)."""
    if now is None:
        return datetime.now(UTC)
    return now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)
