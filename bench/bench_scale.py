"""What the school's everyday reads cost as the store grows: 1 000, 10 000 and 100 000 sessions, generated straight
into the store (not by ingesting 20 GB), each already learned from by a cycle, plus 50 new ones.

    .venv/bin/python -m bench.bench_scale [--sizes 1000,10000,100000] [--new 50] [--keep DIR] [--margin-s 0]

For each size: the cycle learning every session stored (its dataset registered, then what the end of its training
stage does: `datasets.pending.refresh` takes the sessions out of the kept set of what is left to read; the
sessions generated since the last look come in at once: one probe each, so this row grows with the size), then an
incremental build of the 50 new sessions (the real builder in-process, a small BPE tokenizer; the new sessions'
content is the same at every size), the build's read of the sessions (load_conversations) by the kept set and by
the probe of every stored session it replaced (best of 3 each),
`school status` (School.status: the new-sessions count, readiness; its first look after the cycle learned apart,
then the best of 3), the contradiction scan (20 recorded answers
whose requests a captured session answered), the Capture tab's reads (totals, the per-day chart's 90 days,
projects, tools, the newest 200 sessions, the quarantine), the Datasets tab's reads (the built datasets, the
sessions stored), the Experience tab's reads, and `capture status --json`. The goal is a flat line: the 100 000
column within 1.5x of the 1 000 column. `--keep DIR` leaves the store in DIR to look into. Sessions are `bench.synthetic_sessions` (Claude Code shape, stored through
`capture.rows.session_rows`); the datasets the cycles learned from are registered with each session's real content
hash, as a build would, without rendering 100 000 sessions.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.machine import load_line  # noqa: E402
from bench.synthetic_sessions import populate  # noqa: E402

BASE = "default"
NEW_SEED = 10**9  # the new sessions' generator seed (less the index they start at)
MAX_DAYS = 90  # the Capture tab's per-day chart (app/ui/capture/panel.MAX_DAYS)


def quiet(*_) -> None:
    return None


def timed(fn, repeat: int = 1) -> float:
    """The best of `repeat` wall times, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


class Corpus:
    """The growing store: sessions written, and the content hash each would get in a build."""

    def __init__(self, store) -> None:
        self.store = store
        self.size = 0
        self.pending: dict[str, str] = {}  # session id -> content sha256, not yet in a learned dataset
        self.user_texts: list[tuple[str, str]] = []  # (session id, a user message) to ask the contradiction scan

    def grow(self, n: int, alike: bool = False) -> None:
        """n more sessions; `alike`: the same content whatever the size (the generator's seed is offset by where it
        starts), so the new sessions each size builds cost the same to render."""
        from app.core.datasets.convert import conversation, trimmed

        def written(rows: list[dict], messages: list[dict]) -> None:
            by_session: dict[str, list] = {}
            for m in messages:
                by_session.setdefault(m["session_id"], []).append(m)
            for r in rows:  # sub-agent sessions too: a build trains on them as sessions of their own
                main = sorted((SimpleNamespace(**{**dict(meta=0, compact_summary=0, branch=0), **m})
                               for m in by_session.get(r["id"], []) if m.get("branch", 0) == 0), key=lambda m: m.seq)
                conv = conversation(SimpleNamespace(**r), main)
                conv = trimmed(conv) if r["outcome"] == "abandoned" else conv  # as the builder cuts it
                if conv is not None:
                    self.pending[r["id"]] = conv.content_sha256
                first_user = next((m.text for m in main if m.role == "user" and m.text), None)
                if first_user and r["parent_id"] is None and len(self.user_texts) < 20:
                    self.user_texts.append((r["id"], first_user))

        populate(self.store, n, seed=NEW_SEED - self.size if alike else 7, start_index=self.size, written=written)
        self.size += n

    def learn(self, name: str) -> float:
        """Register the pending sessions as one SFT dataset a finished cycle trained on, and take them out of the
        kept set of what is left to read as the end of its training stage does: its seconds (they grow with what the
        cycle learned and with the sessions generated since the last look, all of them here)."""
        from sqlalchemy import insert

        from app.core.base.schema import BuiltDataset, CycleRow, DatasetSession
        from app.core.datasets import pending
        from app.core.runtime.school import cycles

        with self.store.engine.begin() as conn:
            ds = conn.execute(insert(BuiltDataset).values(
                name=name, kind="sft", base_model=BASE, fingerprint=uuid.uuid4().hex, spec_id="chat_sft_v1",
                template_sha256="0" * 64, path=f"/nonexistent/{name}", mode="incremental", examples=len(self.pending),
                train=len(self.pending), manifest_json="{}")).inserted_primary_key[0]
            conn.execute(insert(DatasetSession), [dict(dataset_id=ds, session_id=sid, split="train", examples=1,
                                                       content_sha256=sha) for sid, sha in self.pending.items()])
            conn.execute(insert(CycleRow).values(
                base_model=BASE, stage="deploying", state="done", trigger="bench",
                outputs_json=json.dumps({"building": {"dataset": name}, "training": {"job": 1}})))
        self.pending.clear()
        started = time.perf_counter()  # what the end of a cycle's training stage does (cycles.end_stage)
        pending.refresh(self.store, BASE, cycles.learned_from(self.store, BASE))
        return time.perf_counter() - started

    def answers(self) -> None:
        """Recorded answers (before the sessions that answered the same request) for the contradiction scan."""
        from datetime import UTC, datetime, timedelta

        from sqlalchemy import delete, insert

        from app.core.base.schema import ExperienceRow

        with self.store.engine.begin() as conn:
            conn.execute(delete(ExperienceRow))
            conn.execute(insert(ExperienceRow), [dict(
                id=f"exp-{i}", created_at=datetime(2026, 5, 1, tzinfo=UTC) + timedelta(minutes=i),
                request_json=json.dumps({"messages": [{"role": "user", "content": text}],
                                         "tools": [{"type": "function", "function": {"name": "Bash"}}]}),
                answer_json=json.dumps({"role": "assistant", "content": "I would rather not."}), state="recorded")
                for i, (_, text) in enumerate(self.user_texts)])


class _rendering_clock:  # noqa: N801 - used as a context of one build
    """Seconds the build spends rendering the new sessions (builder._examples): the part of an incremental build
    that is the new work itself, different sessions at each size; the rest is what may grow with the store."""

    def __init__(self) -> None:
        from app.core.datasets import builder

        self.builder, self.original, self.spent = builder, builder._examples, 0.0

        def clocked(*args, **kwargs):
            started = time.perf_counter()
            try:
                return self.original(*args, **kwargs)
            finally:
                self.spent += time.perf_counter() - started

        builder._examples = clocked

    def stop(self) -> None:
        self.builder._examples = self.original


def measure(corpus: Corpus, renderer, tmp: Path, new: int) -> dict[str, float]:
    from app.cli.capture import cmd_status
    from app.core.capture.queries import CaptureQueries
    from app.core.datasets import pending
    from app.core.datasets.builder import build, load_conversations
    from app.core.datasets.examples import Build
    from app.core.datasets.catalog import Registry
    from app.core.datasets.config import BuildConfig
    from app.core.experience import buffer
    from app.core.experience.contradictions import scan
    from app.core.runtime.school import cycles
    from app.core.runtime.school.facade import School

    store = corpus.store
    out: dict[str, float] = {"cycle learned (all)": corpus.learn(f"learned-{corpus.size}")}  # grows with them
    corpus.grow(new, alike=True)
    corpus.answers()
    config = BuildConfig(base_model=BASE, name=f"new-{corpus.size}", mode="incremental",
                         learned_from=cycles.learned_from(store, BASE))
    target = tmp / f"build-{corpus.size}"
    rendering = _rendering_clock()
    out["incremental build"] = timed(lambda: build(store, config, renderer, target))
    out["build, all but rendering"] = out["incremental build"] - rendering.spent  # what grows with the store
    rendering.stop()
    made = json.loads((target / "manifest.json").read_text())
    skip = Registry(store).unchanged_since_used(BASE, config.learned_from)
    out["sessions read (kept)"] = timed(lambda: load_conversations(
        store, config, Build(), quiet, None, pending.reading(store, config)), 3)
    out["sessions read (probe)"] = timed(lambda: load_conversations(store, config, Build(), quiet, skip), 3)
    out["  sessions built"] = len(made.get("sessions", []))
    school = School(store)
    out["school status, first"] = timed(school.status)  # the first look after a cycle learned
    out["school status"] = timed(school.status, 3)
    out["  new sessions"] = school.status()["next"]["new_sessions"]
    out["contradiction scan"] = timed(lambda: scan(store), 3)
    q = CaptureQueries(store)
    out["Capture tab reads"] = timed(lambda: (q.totals(), q.sessions_per_day(MAX_DAYS), q.projects(),
                                              q.tool_histogram(), q.recent_sessions(200), q.quarantine()), 3)
    out["Datasets tab reads"] = timed(lambda: (Registry(store).all(), q.sessions_stored()), 3)
    out["Experience tab reads"] = timed(lambda: (buffer.counts(store), buffer.entries(store, limit=200)), 3)
    with contextlib.redirect_stdout(io.StringIO()):
        out["capture status --json"] = timed(lambda: cmd_status(SimpleNamespace(json=True)), 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--new", type=int, default=50)
    parser.add_argument("--keep", metavar="DIR", help="work in DIR (empty or new) and leave the store there")
    parser.add_argument("--margin-s", type=float, default=0.0,
                        help="datasets/pending.MARGIN in seconds (the app's: 600). The generator writes every "
                             "session in the minutes before the looks, where a real store's lie months back: with "
                             "600 s a look probes all of them, as one would within 10 minutes of a bulk import")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    with contextlib.ExitStack() as stack:
        if args.keep:
            tmp = Path(args.keep).resolve()
            tmp.mkdir(parents=True, exist_ok=True)
            if any(tmp.iterdir()):
                parser.error(f"--keep {tmp}: not empty (the bench grows a new store)")
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        os.environ["NIGHTSCHOOL_HOME"] = str(tmp / "home")
        from datetime import timedelta

        from app.core.datasets import pending

        pending.MARGIN = timedelta(seconds=args.margin_s)
        from transformers import AutoTokenizer

        from app.core.base.store import Store
        from bench.bench_datasets import tokenizer_folder
        from engine.render import Renderer

        folder, label = tokenizer_folder(tmp, None)
        renderer = Renderer(AutoTokenizer.from_pretrained(folder), label)
        store = Store()  # the data dir's own store, the one `capture status` opens
        corpus = Corpus(store)
        print(f"before: {load_line()}; pending.MARGIN {pending.MARGIN.total_seconds():.0f} s")
        rows: dict[int, dict[str, float]] = {}
        for size in sizes:
            t = time.perf_counter()
            corpus.grow(size - corpus.size)
            made = time.perf_counter() - t
            rows[size] = measure(corpus, renderer, tmp, args.new)
            mb = store.path.stat().st_size / 1024**2
            print(f"{size:>7} sessions generated in {made:.0f} s ({mb:,.0f} MB store); {load_line()}", flush=True)
        names = list(rows[sizes[0]])
        print(f"\n{'':24}" + "".join(f"{s:>11,}" for s in sizes) + f"{'last/first':>12}")
        for name in names:
            vals = [rows[s][name] for s in sizes]
            if name.startswith("  "):
                print(f"{name:24}" + "".join(f"{v:>11.0f}" for v in vals))
            else:
                print(f"{name:24}" + "".join(f"{v * 1000:>9.0f}ms" for v in vals) + f"{vals[-1] / vals[0]:>11.1f}x")
        print(f"after: {load_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
