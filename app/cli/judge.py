"""`nightschool eval | compare | promote | rollback | lineage | checkpoints`: judging checkpoints from the terminal
(rollback also switches the served model back when something was deployed)."""
from __future__ import annotations

import argparse
import json
import sys

from app.cli.common import WorkerProgress, open_store, refusals


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.3f}"


def metric_table(rows: list[tuple[str, dict]]) -> str:
    """Metrics as rows, models as columns; after the first column each value carries its delta."""
    from app.core.judge.report import METRICS

    width = max(18, *(len(label) + 2 for label, _ in rows))
    lines = [f"{'':24}" + "".join(f"{label:>{width}}" for label, _ in rows)]
    for metric, (words, _better) in METRICS.items():
        ref = rows[0][1].get(metric)
        cells = []
        for i, (_label, m) in enumerate(rows):
            value = m.get(metric)
            delta = f" ({value - ref:+.3f})" if i and value is not None and ref is not None else ""
            cells.append(f"{_fmt(value) + delta:>{width}}")
        lines.append(f"{words:24}" + "".join(cells))
    return "\n".join(lines)


def _settings(args):
    """`eval`: the reference evaluator with the options' counts."""
    from app.core.judge.report import EvalSettings

    return EvalSettings(max_contexts=args.max_contexts, max_new_tokens=args.max_new_tokens)


def judging_settings(store, args):
    """`promote`, `compare`: the settings a cycle judges with on this machine (the school policy's judge_with,
    judge_examples, judge_contexts), the options a person gave over them: one cache with the cycle's evaluations."""
    from app.core.runtime.school.policy import judge_settings, load

    return judge_settings(load(store), max_contexts=args.max_contexts, max_new_tokens=args.max_new_tokens)


def cmd_eval(args) -> int:
    if args.gguf:
        return cmd_eval_gguf(args)

    def go() -> int:
        from app.core.judge.evaluate import choose_set, evaluate
        from app.core.judge.records import resolve

        store, view = open_store(), WorkerProgress()
        target = resolve(store, args.checkpoint, args.model)
        evset = choose_set(store, target, args.dataset, args.data)
        row, report = evaluate(store, target, evset, _settings(args), view, force=args.force)
        view.close()
        print(f"{target.label} on {report.eval_set}: {report.contexts} next actions, {report.examples} examples "
              f"({report.tokens} assistant tokens)" + (f"; {report.set_aside} held-out context(s) set aside, as "
                                                       "blind-test pairs were made of them" if report.set_aside else ""))
        print(metric_table([(target.label, report.metrics)]))
        print("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(report.outcomes.items())))
        print(f"report: {row.report_path}")
        return 0
    return refusals(go)


def _gguf_file(store, target, value: str, view):
    """(path, quant): a .gguf file as given, or the target's export in that quantization (exported now if needed)."""
    from pathlib import Path

    from app.core.ship.config import QUANTS
    from app.core.ship.exports import export

    if value in QUANTS:
        return export(store, target, [value], sink=view).path(value), value
    return Path(value).expanduser(), ""


def cmd_eval_gguf(args) -> int:
    """`nightschool eval REF --gguf PATH|QUANT`: the exported file through llama.cpp beside the checkpoint itself."""
    def go() -> int:
        from app.core.judge.evaluate import choose_set
        from app.core.judge.gguf import served_vs_trained
        from app.core.judge.records import resolve

        store, view = open_store(), WorkerProgress()
        target = resolve(store, args.checkpoint, args.model)
        path, quant = _gguf_file(store, target, args.gguf, view)
        evset = choose_set(store, target, args.dataset, args.data)
        got = served_vs_trained(store, target, path, evset, quant, _settings(args), view, force=args.force)
        view.close()
        m = got["metrics"]
        print(f"{target.label} on {got['eval_set']}: {got['contexts']} next actions, {got['examples']} examples; "
              f"{path.name} ({got['quant']}) through llama.cpp")
        print(metric_table([("checkpoint (HF)", {k: v["hf"] for k, v in m.items()}),
                            (f"GGUF {got['quant']}", {k: v["gguf"] for k, v in m.items()})]))
        share = got["outcome_agreement"]
        print(f"same next-action outcome: {'—' if share is None else f'{share:.0%}'} of {got['contexts_compared']} "
              f"({got['same_text']} identical answers); tokenised like HF: {got['tokenization_matched']} of "
              f"{got['examples']} examples; template renders like training: {got['prompts_matched']} of "
              f"{got['contexts']} prompts")
        print(f"time: HF {got['elapsed_s']['hf']} s, GGUF {got['elapsed_s']['gguf']} s")
        for reason in got["reasons"]:
            print(f"FLAGGED: {reason}")
        return 1 if got["flag"] else 0
    return refusals(go)


def cmd_compare(args) -> int:
    def go() -> int:
        from app.core.judge.promote import compare
        from app.core.judge.records import resolve

        view, store = WorkerProgress(), open_store()
        found = compare(store, [resolve(store, ref) for ref in args.checkpoints], args.dataset, args.data,
                        judging_settings(store, args), view)
        view.close()
        shown = sorted(found, key=lambda c: -1 if c.target.is_base else c.target.id)  # base first, then by id
        print(f"held-out set: {found[0].report.eval_set} ({found[0].report.contexts} next actions)")
        print(metric_table([(c.target.label, c.report.metrics) for c in shown]))
        print("\nranking by composite score:")
        for i, c in enumerate(found, 1):
            print(f"  {i}. {c.target.label:32} {c.score:.4f}")
        return 0
    return refusals(go)


def verdict_json(judgement, promotion) -> dict:
    """The verdict as data: every check with its interval and counts, the notes, whether it was promoted."""
    v = judgement.verdict
    return {"checkpoint": judgement.target.id, "label": judgement.target.label, "verdict": v.verdict,
            "verdict_id": judgement.row.id, "promoted": promotion is not None,
            "checks": [c.model_dump() for c in v.checks], "notes": v.notes, "reasons": v.reasons,
            "metrics": {name: r.metrics for name, r in judgement.reports.items()}}


def cmd_promote(args) -> int:
    def go() -> int:
        from app.cli.common import print_json
        from app.core.judge.promote import promote
        from app.core.judge.records import resolve

        view, store = WorkerProgress(), open_store()  # progress on stderr: stdout stays the JSON document
        judgement, promotion = promote(store, resolve(store, args.checkpoint), args.dataset, args.data,
                                       judging_settings(store, args), view)
        view.close()
        if args.json:
            print_json(verdict_json(judgement, promotion))
            return 0 if promotion is not None else 1
        v = judgement.verdict
        print(f"verdict on {judgement.target.label}: {v.verdict.upper()}")
        for reason in v.reasons:
            print(f"  - {reason}")
        if promotion is None:
            why = " (inconclusive is never promoted)" if v.verdict == "inconclusive" else ""
            print(f"not promoted{why}: the deployed model stays as it is", file=sys.stderr)
            return 1
        print(f"promoted: {judgement.target.label} is now the deployed model of {judgement.target.base_model} "
              "(undo: nightschool rollback)")
        return 0
    return refusals(go)


def cmd_rollback(args) -> int:
    def go() -> int:
        from app.core.judge.deployment import promotions, rollback
        from app.core.judge.records import JudgeError
        from app.core.ship import deploy

        store = open_store()
        if args.model is None and deploy.current(store) is not None:  # the served model: switch back, then record
            done = deploy.rollback(store)
            where = f" (serving at {done.state['url']})" if done.state else " (the server is stopped)"
            print(f"rolled back: {done.row.note}{where}")
            return 0
        model = args.model or next((p.base_model for p in promotions(store)), None)
        if model is None:
            raise JudgeError("nothing has been promoted yet, so there is nothing to roll back")
        row = rollback(store, model)
        print(f"rolled back: {row.note}")
        return 0
    return refusals(go)


def cmd_lineage(args) -> int:
    def go() -> int:
        from app.core.judge.lineage import lineage
        from app.core.judge.records import resolve

        store = open_store()
        data = lineage(store, resolve(store, args.checkpoint))
        if args.json:
            print(json.dumps(data, indent=1))
            return 0
        _print_lineage(data)
        return 0
    return refusals(go)


SHOWN_SESSIONS = 12  # session ids `lineage` prints; --json lists them all


def _print_lineage(d: dict) -> None:
    if d["checkpoint"] is None:
        print(f"the base model {d['base_model']}: no lineage")
        return
    ck, job, ds = d["checkpoint"], d["job"], d["dataset"]
    print(f"checkpoint {ck['label']}  ({ck['kind']}, step {ck['step']}){'  DEPLOYED' if d['deployed'] else ''}")
    print(f"  path {ck['path']}\n  sha256 {ck['sha256']}")
    print(f"run {d['run']['id']} ({d['run']['state']}), job {job['id']}: {job['recipe']} on {job['base_model']}")
    print(f"  config {job['config_fingerprint'][:16]}  code {job['code_hash'][:16]}")
    print(f"dataset {ds.get('name', ds['file'])}  fingerprint {ds['fingerprint']}")
    if ds.get("sessions"):
        train = [s["id"] for s in ds["sessions"] if s["split"] == "train"]
        more = len(train) - SHOWN_SESSIONS
        print(f"  {len(ds['sessions'])} sessions ({len(train)} trained on): {', '.join(train[:SHOWN_SESSIONS])}"
              + (f" … and {more} more (nightschool lineage '#{ck['id']}' --json lists them all)" if more > 0 else ""))
    if d["parent"]:
        p = d["parent"]
        print(f"parent {('#' + str(p['checkpoint_id'])) if p['checkpoint_id'] else p['adapter']}"
              + (f" (job {p['job']})" if p["job"] else ""))
    for e in d["evals"]:
        m = e["metrics"]
        print(f"eval {e['id']} on {e['eval_set']}: loss {_fmt(m.get('loss'))}, agreement {_fmt(m.get('agreement'))}, "
              f"validity {_fmt(m.get('validity'))}")
    for v in d["verdicts"]:
        print(f"verdict {v['id']}: {v['verdict']} — " + "; ".join(v["reasons"][:3]))


def cmd_checkpoints(args) -> int:
    from app.core.judge.deployment import deployed
    from app.core.judge.records import all_checkpoints, passing_verdict

    store = open_store()
    found = all_checkpoints(store)
    if getattr(args, "json", False):
        from app.cli.common import print_json

        def deployed_id(base_model: str):
            dep = deployed(store, base_model)
            return dep.checkpoint_id if dep else None

        return print_json([{"id": t.id, "label": t.label, "job": t.job.id if t.job else None,
                            "kind": t.checkpoint.kind, "step": t.checkpoint.step, "base_model": t.base_model,
                            "path": t.checkpoint.path, "sha256": t.checkpoint.sha256,
                            "created_at": t.checkpoint.created_at,
                            "deployable": passing_verdict(store, t.id) is not None,
                            "deployed": deployed_id(t.base_model) == t.id} for t in found])
    if not found:
        print("no checkpoints yet: train one (nightschool train FILE)")
        return 0
    for t in found:
        dep = deployed(store, t.base_model)
        flags = ("deployable " if passing_verdict(store, t.id) else "") + (
            "DEPLOYED" if dep and dep.checkpoint_id == t.id else "")
        print(f"#{t.id:<5} {t.job.id:24} {t.checkpoint.kind:10} step {t.checkpoint.step:<6} {flags}")
    return 0


def _eval_args(p: argparse.ArgumentParser, judging: bool = False) -> None:
    """The held-out set and counts; `judging` (promote, compare): unnamed counts are a cycle's (judging_settings)."""
    p.add_argument("--dataset", help="a built dataset whose test split is the held-out set")
    p.add_argument("--data", help="a chat JSONL file to use as the held-out set")
    if judging:
        p.add_argument("--max-contexts", type=int, help="held-out next actions to generate (default: as a cycle "
                       "judges, the school policy's judge_contexts: 96 on a CPU, 200 with a GPU)")
        p.add_argument("--max-new-tokens", type=int)
        return
    p.add_argument("--max-contexts", type=int, default=48, help="held-out next actions to generate (default 48)")
    p.add_argument("--max-new-tokens", type=int, default=160)


def register(sub) -> None:
    ev = sub.add_parser("eval", help="evaluate a checkpoint (or 'base') on held-out agent work")
    ev.add_argument("checkpoint", help="'#ID' (see `nightschool checkpoints`), a job id, a folder, or 'base'")
    ev.add_argument("--model", help="with 'base': which base model (default: the embedded one)")
    ev.add_argument("--force", action="store_true", help="evaluate again even if a cached evaluation exists")
    ev.add_argument("--gguf", metavar="PATH|QUANT", help="also evaluate the exported GGUF (a .gguf file, or a "
                    "quantization such as q4_k_m: the checkpoint's export) through llama.cpp, side by side")
    _eval_args(ev)
    ev.set_defaults(func=cmd_eval)
    cmp = sub.add_parser("compare", help="evaluate two or more checkpoints on one held-out set, side by side")
    cmp.add_argument("checkpoints", nargs="+")
    _eval_args(cmp, judging=True)
    cmp.set_defaults(func=cmd_compare)
    pr = sub.add_parser("promote", help="deploy a checkpoint if it passes the gate against the base and deployed")
    pr.add_argument("checkpoint")
    pr.add_argument("--json", action="store_true", help="print the verdict, its checks' intervals and counts as JSON")
    _eval_args(pr, judging=True)
    pr.set_defaults(func=cmd_promote)
    rb = sub.add_parser("rollback", help="serve (and deploy) again what the last deployment or promotion replaced")
    rb.add_argument("--model", help="the base model (default: the one promoted last)")
    rb.set_defaults(func=cmd_rollback)
    ln = sub.add_parser("lineage", help="where a checkpoint comes from: dataset, sessions, parent, config, verdicts")
    ln.add_argument("checkpoint")
    ln.add_argument("--json", action="store_true")
    ln.set_defaults(func=cmd_lineage)
    cps = sub.add_parser("checkpoints", help="registered checkpoints, deployable and deployed")
    cps.add_argument("--json", action="store_true", help="print the checkpoints as JSON")
    cps.set_defaults(func=cmd_checkpoints)
    from app.cli.blind import register as register_blind

    register_blind(sub)  # `judge blind`
