"""`nightschool dataset build | list | show | validate`: datasets from captured sessions, from the terminal."""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from app.cli.common import open_store

SHOWN = 5  # problems shown per check


def _config(args):
    from app.core.datasets.config import BuildConfig, Filters

    f = Filters(drop_abandoned=args.drop_abandoned, drop_errored=not args.keep_errored,
                min_tool_calls=args.min_tool_calls, min_steps=args.min_steps, require_recovery=args.require_recovery,
                min_reasoning=args.min_reasoning, include_subagents=not args.no_subagents,
                near_duplicate=args.near_duplicate)
    return BuildConfig(name=args.name, base_model=args.model, mode=args.mode, max_length=args.max_length,
                       windows=args.windows, val_share=args.val, test_share=args.test, replay=args.replay,
                       thinking=not args.no_thinking, filters=f)


def _follow(run, log=None) -> None:
    """Progress bar per phase from the worker's envelopes; logs above it (on `log`, stdout unless given)."""
    from tqdm import tqdm

    bar, phase = None, None
    for env in run.events():
        body = env.body
        if env.type == "log":
            if bar:
                bar.write(body.message, file=log)
            else:
                print(body.message, file=log)
        elif env.type == "progress":
            if body.phase != phase:
                if bar:
                    bar.close()
                phase = body.phase
                bar = tqdm(total=body.total, desc=phase, unit="item", leave=False, dynamic_ncols=True)
            bar.total = body.total
            bar.update(body.step - bar.n)
    if bar:
        bar.close()


def _finish(run, log=None):
    """Follow a worker to its end; the Outcome when it registered something, else the exit code."""
    try:
        _follow(run, log)
    except KeyboardInterrupt:
        run.cancel()
        print("cancelled: nothing was registered")
        return 130
    outcome = run.finish()
    if not outcome.ok:
        print(f"error: {outcome.message}", file=sys.stderr)
        return 1
    return outcome


def cmd_build(args) -> int:
    from app.core.datasets.catalog import Registry
    from app.core.datasets.runs import start_build

    store = open_store()
    outcome = _finish(start_build(store, _config(args)), sys.stderr if args.json else None)
    if isinstance(outcome, int):
        return outcome
    ds = Registry(store).get(outcome.identical_to or outcome.name)
    if args.json:
        from app.cli.common import print_json

        return print_json({**build_summary(ds), "identical_to": outcome.identical_to})
    if outcome.identical_to:
        print(f"unchanged: identical to {outcome.identical_to} (fingerprint {outcome.fingerprint[:16]}); "
              "nothing new was stored")
        return 0
    _summary(ds)
    return 0


def build_summary(ds) -> dict:
    """What a build made, as data (`dataset build --json`): splits, filters, counts, the held-out set, trimming."""
    from app.core.datasets import manifest

    man = manifest.read(Path(ds.path))
    return {"name": ds.name, "base_model": ds.base_model, "mode": ds.mode, "examples": ds.examples,
            "fingerprint": ds.fingerprint, "folder": ds.path,
            "splits": {k: v.model_dump() for k, v in man.splits.items()}, "filters": man.filters,
            "counts": man.counts, "replayed_from": man.replayed_from,
            "abandoned": {"sessions_trimmed": man.counts.get("abandoned sessions trimmed", 0),
                          "examples_added": man.counts.get("examples from trimmed sessions", 0)},
            "heldout": {"added": man.heldout_added, "sessions": man.heldout_sessions, "read_from": man.heldout_from}}


def cmd_pairs(args) -> int:
    from app.core.datasets.pairs import PairsConfig
    from app.core.datasets.runs import start_pairs

    store = open_store()
    config = PairsConfig(name=args.name, base_model=args.model, adapter=args.adapter, source=args.source,
                         max_contexts=args.max_contexts, max_new_tokens=args.max_new_tokens,
                         include_dropped=not args.no_dropped,
                         blind_judges=[*([] if args.no_blind else ["person"]),
                                       *(["teacher"] if args.teacher_blind else [])])
    outcome = _finish(start_pairs(store, config))
    if isinstance(outcome, int):
        return outcome
    print(f"{outcome.name}: {outcome.examples} preference pairs ({outcome.message}); "
          f"`nightschool dataset show {outcome.name}`")
    return 0


def _summary(ds) -> None:
    from app.core.datasets import manifest
    from app.core.datasets.catalog import Registry

    man = manifest.read(Path(ds.path))
    print(f"{ds.name}: {ds.examples} examples (train {ds.train}, val {ds.val}, test {ds.test}); "
          f"excluded {ds.excluded}; mode {ds.mode}")
    print(f"  base model {ds.base_model} ({man.base_model_label}), template {ds.template_sha256[:12]} "
          f"({man.convention}), spec {ds.spec_id}")
    for split, size in man.splits.items():
        print(f"  {split:5} {size.examples:6} examples {size.sessions:5} sessions {size.tokens:9} tokens "
              f"({size.trained_tokens} trained)")
    removed = ", ".join(f"{name}: {n}" for name, n in man.filters.items())
    print(f"  filters removed: {removed or 'nothing'}")
    if gone := Registry(open_store()).no_longer_stored(ds.id):
        print(f"  built with {gone} session(s) no longer stored (withdrawn by a team member or deleted): its "
              "examples hold them, no later build will")
    if man.replayed_from:
        print(f"  replayed {man.counts.get('replayed', 0)} examples from {', '.join(man.replayed_from)}")
    if trimmed := man.counts.get("abandoned sessions trimmed", 0):
        print(f"  interrupted sessions kept up to their last completed action: {trimmed} "
              f"({man.counts.get('examples from trimmed sessions', 0)} examples)")
    if man.heldout_added or man.heldout_sessions:
        print(f"  held-out set of {ds.base_model}: {man.heldout_sessions} sessions, never trained on "
              f"({len(man.heldout_added)} new in this build; the test split holds them all: {ds.test} examples)")
    print(f"  fingerprint {ds.fingerprint}\n  folder {ds.path}")


def cmd_list(args) -> int:
    from app.core.datasets.catalog import Registry

    rows = Registry(open_store()).all()
    if getattr(args, "json", False):
        from app.cli.common import print_json, row_dict

        return print_json([row_dict(d, exclude=("manifest_json",)) for d in rows])
    if not rows:
        print("no datasets yet: `nightschool dataset build`")
        return 0
    print(f"{'name':24} {'kind':10} {'examples':>8} {'train':>6} {'val':>5} {'test':>5}  {'created':16}  base model")
    for d in rows:
        print(f"{d.name:24} {d.kind:10} {d.examples:8} {d.train:6} {d.val:5} {d.test:5}  "
              f"{d.created_at:%Y-%m-%d %H:%M}  {d.base_model}")
    return 0


def _dataset(name: str):
    from app.core.datasets.catalog import Registry

    ds = Registry(open_store()).get(name)
    if ds is None:
        print(f"error: no dataset named {name!r} (see `nightschool dataset list`)", file=sys.stderr)
        raise SystemExit(2)
    return ds


def cmd_show(args) -> int:
    ds = _dataset(args.name)
    _summary(ds)
    report = json.loads((Path(ds.path) / "report.json").read_text(encoding="utf-8"))
    if ds.kind == "preference":
        print(f"  from {report['source']['name']}: {report['contexts']} contexts, {report['agreed']} where the "
              f"student already agreed (not pairs), {report['student_pairs']} student pairs, "
              f"{report.get('correction_pairs', 0)} from corrections, {report.get('blind_pairs', 0)} from the blind "
              f"test, {report['dropped_pairs']} from your files, {report['excluded']} excluded")
        if blind := report.get("blind_test"):
            said = blind["evidence"]
            print(f"  blind test: {said['worse']} answers judged worse than the agent's, {said['better']} better, "
                  f"{said['same']} the same (evidence, not pairs); its pairs come from {len(blind['sessions'])} "
                  "held-out session(s)")
        return 0
    _print_problems([{"example": f"{e['session_id']}#{e['window']}", **p} for e in report.get("excluded", [])
                     for p in e["problems"]], "excluded by checks")
    if args.example is not None:
        _preview(Path(ds.path), args.example)
    return 0


def _preview(folder: Path, wanted: str) -> None:
    """One example as the model sees it: trained tokens highlighted (or in [[ ]] when not a terminal)."""
    with (folder / "preview.jsonl").open(encoding="utf-8") as fh:
        lines = [json.loads(line) for line in fh]
    rec = next((r for r in lines if r["id"].startswith(wanted)), None)
    if rec is None and wanted.isdigit() and int(wanted) < len(lines):
        rec = lines[int(wanted)]
    if rec is None:
        print(f"no example {wanted!r} (give an id prefix or an index below {len(lines)})")
        return
    tty = sys.stdout.isatty()
    on, off = ("\033[42;30m", "\033[0m") if tty else ("[[", "]]")
    print(f"\nexample {rec['id']} ({rec['split']}); trained text {'highlighted' if tty else 'inside [[ ]]'}:\n")
    print("".join(f"{on}{t}{off}" if m else t for t, m in rec["segments"]))


def _print_problems(problems: list[dict], title: str) -> None:
    if not problems:
        print(f"  {title}: none")
        return
    groups = defaultdict(list)
    for p in problems:
        groups[p["check"]].append(p)
    print(f"  {title}: {len(problems)}")
    for check, items in sorted(groups.items()):
        print(f"    {check} ({len(items)})")
        for p in items[:SHOWN]:
            print(f"      {p.get('example') or '-'}: {p['detail']}")
        if len(items) > SHOWN:
            print(f"      … and {len(items) - SHOWN} more")


def cmd_validate(args) -> int:
    from app.core.datasets.catalog import Registry
    from app.core.datasets.runs import start_check

    store = open_store()
    ds = Registry(store).get(args.target)
    if ds is not None:
        target, model = Path(ds.path), None if args.quick else ds.base_model
        heldout = Registry(store).heldout(ds.base_model)
    elif Path(args.target).exists():
        target, model, heldout = Path(args.target), args.model, frozenset()
    else:
        print(f"error: {args.target!r} is neither a dataset name nor a file", file=sys.stderr)
        return 2
    run = start_check(store, target, model, args.max_length, heldout)
    _follow(run)
    report, failure = run.finish_report()
    if report is None:
        print(f"error: {failure}", file=sys.stderr)
        return 1
    depth = "STANDARD + DEEP" if model else "STANDARD"
    print(f"{args.target}: {report.checked} examples checked ({depth})")
    _print_problems(report.problems, "problems")
    return 1 if report.problems else 0


def register(sub) -> None:
    """Add `dataset build|pairs|list|show|validate` to the main parser's subcommands."""
    ds = sub.add_parser("dataset", help="datasets built from captured sessions")
    dsub = ds.add_subparsers(title="dataset commands", required=True)
    _add_build(dsub)
    _add_pairs(dsub)
    _add_inspect(dsub)


def _add_build(dsub) -> None:
    from app.core.datasets.config import MODES, WINDOWS, BuildConfig

    d = BuildConfig()  # the defaults: argparse's match a build made without any option
    b = dsub.add_parser("build", help="build an SFT dataset from the captured sessions")
    b.add_argument("--name")
    b.add_argument("--model", default=d.base_model,
                   help="base model whose chat template renders the examples "
                        "(default: %(default)r, the embedded SmolLM2)")
    b.add_argument("--mode", choices=MODES, default=d.mode,
                   help="incremental: only sessions no earlier dataset used, plus --replay; full: every eligible "
                        "session; auto: incremental when an earlier dataset exists (default %(default)s)")
    b.add_argument("--max-length", type=int, default=d.max_length,
                   help="tokens; longer conversations are cut into windows of whole turns (default %(default)s)")
    b.add_argument("--windows", choices=WINDOWS, default=d.windows,
                   help="turns: whole turns packed per window; decisions: one window ending at each teacher action, "
                        "its context cut from the left (default %(default)s)")
    b.add_argument("--min-tool-calls", type=int, default=d.filters.min_tool_calls,
                   help="sessions with fewer tool calls are dropped (default %(default)s)")
    b.add_argument("--min-steps", type=int, default=d.filters.min_steps,
                   help="sessions with fewer assistant messages are dropped (default %(default)s)")
    b.add_argument("--min-reasoning", type=int, default=d.filters.min_reasoning,
                   help="reasoning markers + self-corrections + constraints + pruning a session needs "
                        "(default %(default)s)")
    b.add_argument("--require-recovery", action="store_true")
    b.add_argument("--drop-abandoned", action="store_true",
                   help="drop interrupted sessions whole (default: keep their turns up to the last completed action)")
    b.add_argument("--keep-abandoned", action="store_true", help=argparse.SUPPRESS)  # the default now
    b.add_argument("--keep-errored", action="store_true")
    b.add_argument("--no-subagents", action="store_true")
    b.add_argument("--no-thinking", action="store_true")
    b.add_argument("--near-duplicate", type=float, default=d.filters.near_duplicate,
                   help="MinHash Jaccard threshold (0 = off; default %(default)s)")
    b.add_argument("--replay", type=float, default=d.replay,
                   help="share replayed from earlier datasets (incremental; default %(default)s)")
    b.add_argument("--val", type=float, default=d.val_share, help="validation share (default %(default)s)")
    b.add_argument("--test", type=float, default=d.test_share,
                   help="share of the new sessions held out for ever (default %(default)s)")
    b.add_argument("--json", action="store_true", help="print what the build made as JSON")
    b.set_defaults(func=cmd_build)


def _add_pairs(dsub) -> None:
    p = dsub.add_parser("pairs", help="preference pairs: a student's next actions vs the teacher's")
    p.add_argument("--name")
    p.add_argument("--model", default="default", help="the student's base model")
    p.add_argument("--adapter", help="a LoRA adapter or checkpoint folder on top of it (default: the base model)")
    p.add_argument("--source", help="the SFT dataset whose train split gives the contexts (default: the latest)")
    p.add_argument("--max-contexts", type=int, default=200)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--no-dropped", action="store_true", help="leave out your dropped preference files")
    blind = p.add_mutually_exclusive_group()
    blind.add_argument("--blind", action="store_true", help="add the blind test's pairs (a person's trials that found "
                                                            "the student's answer worse; the default: the judge sets "
                                                            "their held-out contexts aside)")
    blind.add_argument("--no-blind", action="store_true", help="leave out the blind test's pairs (a person's trials)")
    p.add_argument("--teacher-blind", action="store_true", help="add the trials the teacher judged in the blind "
                                                                "test (a machine's judgement)")
    p.set_defaults(func=cmd_pairs)


def _add_inspect(dsub) -> None:
    """list, show and validate: the built datasets, one's manifest and examples, a check run again."""
    ls = dsub.add_parser("list", help="built datasets")
    ls.add_argument("--json", action="store_true", help="print the datasets as JSON (manifests: dataset show)")
    ls.set_defaults(func=cmd_list)
    s = dsub.add_parser("show", help="manifest, filters, exclusions; --example ID|N previews one")
    s.add_argument("name")
    s.add_argument("--example")
    s.set_defaults(func=cmd_show)
    v = dsub.add_parser("validate", help="check a built dataset (or a dataset file) again")
    v.add_argument("target", metavar="NAME|FILE")
    v.add_argument("--model", help="for a file: also the DEEP checks with this model's template")
    v.add_argument("--max-length", type=int, default=0)
    v.add_argument("--quick", action="store_true", help="skip the DEEP (tokenizer) checks")
    v.set_defaults(func=cmd_validate)
