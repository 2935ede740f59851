"""Chat-format (`messages`) JSONL: check a file line by line, snapshot the good records, keep the bad ones."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from app.core.base import lines
from app.core.base.errors import Explained
from app.core.base.fingerprint import sha256_file
from app.core.datafiles.formats import CHECKS, EXAMPLE_LINES, check_record, shape_name

SHOWN_PROBLEMS = 5


class DatasetError(Explained, ValueError):
    """A dataset file that cannot be trained on; the message says what, why and what to do."""


@dataclass
class Problem:
    line: int
    reason: str
    raw: str = ""


@dataclass
class ChatFileReport:
    path: Path
    lines: int = 0
    blank: int = 0
    records: list[dict] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    foreign: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        return (f"{self.lines} lines: {len(self.records)} usable, {len(self.problems)} set aside, "
                f"{self.blank} blank")


def _read_line(report: ChatFileReport, number: int, line: lines.Line, check=check_record) -> None:
    if line.data is None:
        report.problems.append(Problem(number, lines.too_long(line.size)))
        return
    if not line.data.strip():
        report.blank += 1
        return
    text = line.data.decode("utf-8", errors="replace").rstrip("\r\n")
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as exc:
        report.problems.append(Problem(number, f"not valid JSON ({exc.msg} at column {exc.colno})", text))
        return
    if check is check_record and (name := shape_name(rec)):
        report.foreign[name] = report.foreign.get(name, 0) + 1
    if problem := check(rec):
        report.problems.append(Problem(number, problem, text))
    else:
        report.records.append(rec)


def _refuse_if_unusable(path: Path, report: ChatFileReport, fmt: str = "chat") -> None:
    if report.records:
        return
    if fmt != "chat" and report.lines > report.blank:
        shown = "; ".join(f"line {p.line}: {p.reason}" for p in report.problems[:SHOWN_PROBLEMS])
        raise DatasetError(f"{path.name} has no usable {fmt} record ({report.summary()}). This recipe trains on "
                           f"lines like {EXAMPLE_LINES[fmt]}. {shown}")
    if report.lines == report.blank:
        raise DatasetError(f"{path.name} is empty: there are no records to train on. "
                           "Choose a JSONL file with one chat record ({\"messages\": [...]}) per line.")
    if report.foreign:
        name = max(report.foreign, key=report.foreign.get)
        raise DatasetError(f"{path.name} looks like {name}, not chat `messages` records. The SFT recipe trains on "
                           "lines like {\"messages\": [{\"role\": \"user\", ...}, {\"role\": \"assistant\", ...}]}: "
                           "convert the file to that shape.")
    if _is_one_json_document(path):
        raise DatasetError(f"{path.name} is one JSON document, not JSON Lines. Put one chat record per line "
                           "({\"messages\": [...]}), e.g. with `jq -c '.[]' file.json > file.jsonl`.")
    shown = "; ".join(f"line {p.line}: {p.reason}" for p in report.problems[:SHOWN_PROBLEMS])
    raise DatasetError(f"{path.name} has no usable chat record ({report.summary()}). {shown}")


def _is_one_json_document(path: Path) -> bool:
    try:
        json.loads(path.read_text(encoding="utf-8"))
        return True
    except (ValueError, UnicodeDecodeError):
        return False


def check_chat_file(path: str | Path, fmt: str = "chat") -> ChatFileReport:
    """Read a JSONL file of `fmt` records (chat | preference); raise DatasetError when nothing can be trained on."""
    check = CHECKS[fmt]
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path} is not a file. Choose a .jsonl file of chat records.")
    size = path.stat().st_size
    if size > lines.MAX_FILE_BYTES:
        raise DatasetError(f"{path.name} is {size / 1e9:.1f} GB, over the {lines.MAX_FILE_BYTES / 1e9:.0f} GB limit: "
                           "split it into smaller files.")
    with path.open("rb") as fh:
        head = fh.read(lines.BINARY_SNIFF_BYTES)
        if b"\x00" in head:
            raise DatasetError(f"{path.name} is a binary file, not JSONL text. Choose a .jsonl file.")
        fh.seek(0)
        report = ChatFileReport(path)
        for number, line in enumerate(lines.raw_lines(fh), start=1):
            report.lines = number
            _read_line(report, number, line, check)
    _refuse_if_unusable(path, report, fmt)
    return report


def write_snapshot(report: ChatFileReport, dest: Path, quarantine: Path) -> str:
    """Write the usable records to dest and the set-aside lines (with reasons) to quarantine; return dest's sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("w", encoding="utf-8") as fh:
        for rec in report.records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    if report.problems:
        with quarantine.open("w", encoding="utf-8") as fh:
            for p in report.problems:
                fh.write(json.dumps({"source": str(report.path), "line": p.line, "reason": p.reason,
                                     "raw": p.raw}, ensure_ascii=False) + "\n")
    return sha256_file(dest)
