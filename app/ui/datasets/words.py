"""What the Datasets tab says about a built dataset: its report as HTML (splits, filters, excluded examples, provenance;
a preference dataset's pairs), pure functions of the controller's `Details`."""
from __future__ import annotations

import json
from collections import defaultdict
from html import escape
from pathlib import Path

from app.core.datasets.splits import SPLITS
from app.ui.datasets.controller import Details
from app.ui.kit import FAINT

MAX_SHOWN = 25  # excluded examples listed per check
PASSED, PROBLEM = "#7bd88f", "#ff8a8a"  # softer than the kit's GOOD and BAD: text on the dark base
COUNT_WORDS = {"from_corrections": "examples from accepted corrections",
               "correction_pairs": "preference pairs from corrections"}  # counts stored under a key (stages read it)


def table_html(head: list[str], rows: list[list]) -> str:
    cells = "".join(f"<th align='{'left' if i == 0 else 'right'}' style='color:{FAINT}'>{escape(h)}</th>"
                    for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f"<td align='{'left' if i == 0 else 'right'}'>{escape(str(v))}</td>"
                                    for i, v in enumerate(r)) + "</tr>" for r in rows)
    return f"<table cellspacing='0' cellpadding='3'><tr>{cells}</tr>{body}</table>"


def splits_html(details: Details) -> str:
    splits = details.manifest.splits if details.manifest else {}
    rows = []
    for s in SPLITS:
        z = splits.get(s)
        if z is not None:
            share = f"{z.trained_tokens / z.tokens:.0%}" if z.tokens else "—"
            rows.append([s, f"{z.examples:,}", f"{z.sessions:,}", f"{z.tokens:,}", f"{z.trained_tokens:,}", share])
    head = ["Split", "Examples", "Sessions", "Tokens", "Trained tokens", "Trained share"]
    note = (f"<p style='color:{FAINT}'>Trained tokens: the ones the loss is computed on (the assistant's turns); the "
            "rest is context the model reads. Trained share: trained tokens out of all tokens.</p>")
    return "<h3>Splits</h3>" + table_html(head, rows) + note


def count_words(name: str) -> str:
    """A build's count or filter as the report names it (the few stored under a key, in words)."""
    return COUNT_WORDS.get(name, name.replace("_", " "))


def filters_html(details: Details) -> str:
    found = details.report.get("filters") or (details.manifest.filters if details.manifest else {})
    counts = details.report.get("counts") or (details.manifest.counts if details.manifest else {})
    rows = [[count_words(name), f"{n:,}"] for name, n in found.items()]
    out = "<h3>Filters</h3>" + (table_html(["Filter", "Removed"], rows) if rows else "<p>No filter ran.</p>")
    plain = " · ".join(f"{escape(count_words(name))} {n:,}" for name, n in counts.items()
                       if not name.startswith("excluded: "))
    return out + (f"<p><span style='color:{FAINT}'>Counts:</span> {plain}</p>" if plain else "")


def excluded_html(details: Details) -> str:
    groups: dict[str, list[str]] = defaultdict(list)
    excluded = details.report.get("excluded") or []
    for ex in excluded:
        where = f"session {ex.get('session_id', '?')} window {ex.get('window', 0)}"
        for p in ex.get("problems") or []:
            groups[p.get("check", "?")].append(f"{where}: {p.get('detail', '')}")
    out = f"<h3>Excluded examples ({len(excluded):,})</h3>"
    if not excluded:
        return out + "<p>None: every rendered example passed the checks.</p>"
    for name, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        lines = "".join(f"<li>{escape(i[:400])}</li>" for i in items[:MAX_SHOWN])
        more = f"<li style='color:{FAINT}'>… {len(items) - MAX_SHOWN:,} more</li>" if len(items) > MAX_SHOWN else ""
        out += f"<p><b style='color:{PROBLEM}'>{escape(name)}</b> ({len(items):,})</p><ul>{lines}{more}</ul>"
    return out


def provenance_html(details: Details) -> str:
    m = details.manifest
    if m is None:
        return ""
    cfg = m.config
    rows = [["Base model", m.base_model_label or m.base_model], ["Template sha256", m.template_sha256[:16]],
            ["Tool calls", m.convention], ["Mode", m.mode], ["Fingerprint", m.fingerprint],
            ["Max length", cfg.get("max_length", "?")], ["Val / test share", f"{cfg.get('val_share')} / "
                                                                             f"{cfg.get('test_share')}"],
            ["Replayed from", ", ".join(m.replayed_from) or "—"],
            ["Held-out set", f"{m.heldout_sessions} sessions (+{len(m.heldout_added)} by this build)"], ["Created", m.created_at],
            ["Folder", details.folder]]
    body = "".join(f"<tr><td style='color:{FAINT}'>{escape(k)}</td><td>{escape(str(v))}</td></tr>" for k, v in rows)
    return f"<h3>Provenance</h3><table cellspacing='0' cellpadding='2'>{body}</table>"


def pairs_html(details: Details) -> str:
    """A preference dataset: where its contexts came from, how often the student already agreed, a few pairs."""
    r = details.report
    rows = [["Source dataset", (r.get("source") or {}).get("name", "?")], ["Teacher contexts", r.get("contexts", 0)],
            ["Student already agreed (no pair)", r.get("agreed", 0)], ["Pairs from the student", r.get("student_pairs", 0)],
            ["Pairs from corrections", r.get("correction_pairs", 0)],
            ["Pairs from the blind test", r.get("blind_pairs", 0)],
            ["Pairs from your files", r.get("dropped_pairs", 0)], ["Excluded", r.get("excluded", 0)],
            ["Student answers cut at the token limit", r.get("truncated", 0)]]
    body = "".join(f"<tr><td style='color:{FAINT}'>{escape(k)}</td><td>{escape(str(v))}</td></tr>" for k, v in rows)
    out = f"<h3>Pairs</h3><table cellspacing='0' cellpadding='2'>{body}</table>"
    for rec in _first_pairs(details.folder, 3):
        chosen, rejected = (escape(rec[k][0]["content"][:300]) for k in ("chosen", "rejected"))
        out += (f"<p><b style='color:{PASSED}'>chosen (teacher)</b> {chosen}<br>"
                f"<b style='color:{PROBLEM}'>rejected (student)</b> {rejected}</p>")
    return out


def _first_pairs(folder: Path, n: int) -> list[dict]:
    path = Path(folder) / "train.jsonl"
    out: list[dict] = []
    if path.is_file():
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if len(out) >= n:
                    break
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    return out


def report_html(details: Details) -> str:
    problems = "".join(f"<p style='color:{PROBLEM}'>{escape(p)}</p>" for p in details.problems)
    if details.manifest is not None and details.manifest.kind == "preference":
        return problems + splits_html(details) + pairs_html(details) + provenance_html(details)
    return problems + splits_html(details) + filters_html(details) + excluded_html(details) + \
        provenance_html(details)
