"""A new agent is a parser and one row of capture/agents.py: a planted row (its tiny parser below) reaches capture
(folders, detection, ingest), the dataset files' refusal, a dataset build and the Capture tab's colours."""
from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select

from app.core.base.lines import Reading, read_jsonl
from app.core.capture import agents
from app.core.capture.session import Message, Part, Session

FAKE = agents.Agent("fake-cli", "Fake", "Fake CLI", "#5e2ca5", ".fake", ("logs",), ("fake-*.jsonl",),
                    "tests.ui.test_agent_row:parse_fake", "tests.ui.test_agent_row:detect_fake",
                    "tests.ui.test_agent_row:detect_fake")
RECORDS = [
    {"fake": "meta", "session": "fake-1", "cwd": "/home/me/fakeproj", "at": "2025-03-04T10:00:00Z"},
    {"fake": "user", "text": "Fix the failing test in utils.py: add returns a - b", "at": "2025-03-04T10:00:01Z"},
    {"fake": "assistant", "text": "First I will read utils.py.", "at": "2025-03-04T10:00:02Z",
     "calls": [{"id": "c1", "name": "Read", "input": {"file_path": "utils.py"}}]},
    {"fake": "tool", "id": "c1", "output": "def add(a, b):\n    return a - b", "at": "2025-03-04T10:00:03Z"},
    {"fake": "assistant", "text": "Now the edit.", "at": "2025-03-04T10:00:04Z",
     "calls": [{"id": "c2", "name": "Edit", "input": {"file_path": "utils.py", "new": "return a + b"}}]},
    {"fake": "tool", "id": "c2", "output": "File updated", "at": "2025-03-04T10:00:05Z"},
    {"fake": "assistant", "text": "Done: add now returns a + b and the test passes.", "at": "2025-03-04T10:00:06Z"},
]


def detect_fake(rec: dict) -> bool:
    return rec.get("fake") in ("meta", "user", "assistant", "tool")


def parse_fake(path: str | Path, final: bool = False, progress: Reading | None = None) -> Session:
    """The planted agent's format: one record per message, `fake` its role, tool calls under `calls`."""
    read = read_jsonl(path, final=final, progress=progress)
    session = Session("fake-cli", Path(path).stem, str(path), lines=read.lines, problems=list(read.problems),
                      blank=read.blank, end_offset=read.end_offset)
    for rec in read.records:
        d = rec.data
        if d["fake"] == "meta":
            session.session_id, session.cwd, session.started_at = d["session"], d["cwd"], d["at"]
            session.project = Path(d["cwd"]).name
            continue
        if d["fake"] == "tool":
            parts = [Part("tool_result", d["output"], call_id=d["id"])]
        else:
            parts = [Part("text", d["text"])] + [Part("tool_call", tool_name=c["name"], tool_input=c["input"],
                                                      call_id=c["id"]) for c in d.get("calls", [])]
        session.messages.append(Message(d["fake"], parts, timestamp=d["at"], line=rec.line))
        session.ended_at = d["at"]
    return session


def test_a_planted_agent_reaches_capture_datasets_and_the_capture_tab(qtbot, monkeypatch, tmp_path, store,
                                                                      tiny_model):
    from app.core.base.schema import AgentSession
    from app.core.capture.detect import detect_format
    from app.core.capture.found import agent_folders
    from app.core.capture.ingest import Ingestor
    from app.core.capture.sources import CaptureConfig, session_files
    from app.core.datafiles.dropped import check_dataset
    from app.core.datasets.catalog import Registry
    from app.core.datasets.config import BuildConfig
    from app.core.datasets.runs import start_build
    from app.core.scrub.scrubber import Scrubber
    from app.ui.capture.controller import CaptureController
    from app.ui.capture.panel import CapturePanel

    monkeypatch.setitem(agents.AGENTS, FAKE.name, FAKE)
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    path = tmp_path / "me" / ".fake" / "logs" / "fake-1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")

    # capture: its default folder, its files, its detection, its ingest (told from the content alone)
    config = CaptureConfig()
    assert config.roots[FAKE.name] == [str(path.parent)] and config.agent_for(path) == FAKE.name
    assert (FAKE.name, path) in session_files(config)
    assert [(f.label, f.sessions) for f in agent_folders(config) if f.agent == FAKE.name] == [("Fake", 1)]
    assert detect_format(path) == FAKE.name
    result = Ingestor(store, CaptureConfig(roots={}), Scrubber(home="/home/me")).ingest(path, final=True)
    assert result.status == "ok" and result.agent == FAKE.name and result.stored == len(RECORDS), result.message
    with store.session() as db:
        sid, = db.scalars(select(AgentSession.id).where(AgentSession.agent == FAKE.name))
    why = check_dataset(path).reason  # a dropped dataset file of its records: refused as its transcript
    assert why.startswith("fake-1.jsonl is a Fake CLI session transcript, not a dataset"), why

    # datasets: a build holds its session
    outcome = start_build(store, BuildConfig(base_model=str(tiny_model), max_length=512, val_share=0.0,
                                             test_share=0.0)).finish()
    assert outcome.ok, outcome.message
    built = Path(Registry(store).get(outcome.name).path)
    examples = [json.loads(line) for split in ("train", "val", "test")
                for line in (built / f"{split}.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert examples and {e["session_id"] for e in examples} == {sid}

    # the Capture tab draws its sessions in its colour
    controller = CaptureController(store, config, watch=False)
    panel = CapturePanel(controller)
    qtbot.addWidget(panel)
    try:
        panel.refresh()
        assert panel.per_day.colours[FAKE.name] == FAKE.colour
        assert panel.per_day.bars[FAKE.name].opts["brush"] == FAKE.colour
    finally:
        controller.stop()
