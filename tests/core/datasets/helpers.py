"""Hand-made agent sessions for dataset tests: real Claude Code JSONL written to disk and ingested by capture."""
from __future__ import annotations

import json
from pathlib import Path

from tests.core.capture.helpers import assistant, call, result, text, user, write

TASKS = [
    ("Fix the failing test in utils.py", "utils.py", "def add(a, b):\n    return a - b", "return a + b"),
    ("Rename the helper in parser.py to parse_line", "parser.py", "def helper(line):\n    pass", "def parse_line"),
    ("Add a docstring to models.py", "models.py", "class Model:\n    pass", '"""The model."""'),
    ("Make the CLI print its version", "cli.py", "def main():\n    pass", "print(__version__)"),
    ("Remove the unused import in app.py", "app.py", "import os\nimport sys\n", "import sys"),
    ("Handle an empty list in stats.py", "stats.py", "def mean(xs):\n    return sum(xs) / len(xs)", "if not xs"),
    ("Sort the output of list_files", "files.py", "def list_files(d):\n    return os.listdir(d)", "sorted("),
    ("Log a warning when the config is missing", "config.py", "def load(p):\n    return json.load(open(p))",
     "log.warning"),
]


def session_records(sid: str, task: str, file: str, before: str, after: str, answer: str | None = None,
                    error_first: bool = False, extra_user: str = "") -> list[dict]:
    """A finished session: read the file, (maybe fail once), edit it, run the tests, answer."""
    u = lambda *a, **k: user(*a, sessionId=sid, **k)  # noqa: E731
    a = lambda *a_, **k: assistant(*a_, sessionId=sid, **k)  # noqa: E731
    recs = [u(f"{sid}-u1", None, task + extra_user),
            a(f"{sid}-a1", f"{sid}-u1", [text(f"First I will read {file}."), call(f"{sid}-c1", "Read", file_path=file)]),
            u(f"{sid}-r1", f"{sid}-a1", [result(f"{sid}-c1", before)])]
    parent = f"{sid}-r1"
    if error_first:
        recs += [a(f"{sid}-a2", parent, [call(f"{sid}-c2", "Edit", file_path=file, old="nope", new=after)]),
                 u(f"{sid}-r2", f"{sid}-a2", [result(f"{sid}-c2", "old_string not found", is_error=True)])]
        parent = f"{sid}-r2"
    recs += [a(f"{sid}-a3", parent, [text("Now the edit."), call(f"{sid}-c3", "Edit", file_path=file, new=after)]),
             u(f"{sid}-r3", f"{sid}-a3", [result(f"{sid}-c3", "File updated")]),
             a(f"{sid}-a4", f"{sid}-r3", [call(f"{sid}-c4", "Bash", command="pytest -q")]),
             u(f"{sid}-r4", f"{sid}-a4", [result(f"{sid}-c4", "4 passed in 0.1s")]),
             a(f"{sid}-a5", f"{sid}-r4", [text(answer or f"Done: {task.lower()} — I changed {file} and the tests pass.")])]
    return recs


def write_session(folder: Path, index: int, **over) -> Path:
    """Session number `index` (task chosen by index) as a Claude Code file under folder."""
    task, file, before, after = TASKS[index % len(TASKS)]
    task = over.pop("task", f"{task} (ticket {index})")
    sid = f"{index:08d}-0000-4000-8000-000000000000"
    return write(folder / f"{sid}.jsonl", *session_records(sid, task, file, before, after, **over))


def ingest(store, folder: Path) -> None:
    """Ingest every session file under folder through the real capture path (scrubbing included)."""
    from app.core.capture.ingest import Ingestor
    from app.core.scrub.scrubber import Scrubber
    from app.core.capture.sources import CaptureConfig
    from app.core.importer import import_paths

    report = import_paths(Ingestor(store, CaptureConfig(roots={}), Scrubber(home="/home/me")), [folder])
    assert not report.refused(), report.refused()


def split_ids(folder: Path) -> dict[str, set[str]]:
    out = {}
    for split in ("train", "val", "test"):
        path = Path(folder) / f"{split}.jsonl"
        out[split] = {json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()}
    return out


def records(folder: Path, split: str) -> list[dict]:
    path = Path(folder) / f"{split}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
