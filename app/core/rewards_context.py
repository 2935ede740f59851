"""What an RL completion is judged against (RewardContext): the teacher's next step, the state the context ends in."""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from app.core.datasets.agreement import as_text, parse_student

# A tool is exploratory (reads, never changes) when a word of its name contains one of these ...
EXPLORE_SUBSTRINGS = ("read", "grep", "glob", "search", "find", "list", "fetch", "view")
EXPLORE_WORDS = {"ls", "cat"}  # ... or is one of these (as substrings they would hit "tools", "locate")
WRITE_WORDS = {"edit", "write", "replace", "patch", "create", "delete", "remove", "update", "insert", "move", "rename",
               "apply", "set", "put", "post", "commit", "push"}  # search_replace, find_and_replace are edits
SHELL_TOOLS = {"bash", "shell", "run_shell_command", "run_terminal_cmd", "terminal", "exec_command", "local_shell"}
READ_ONLY_COMMANDS = {"ls", "cat", "head", "tail", "grep", "rg", "ag", "find", "fd", "tree", "wc", "pwd", "stat",
                      "file", "du", "less", "cd", "echo", "which", "type"}
READ_ONLY_GIT = {"status", "log", "diff", "show", "blame", "grep", "ls-files", "branch"}
PATH_KEYS = ("file_path", "path", "notebook_path", "filename", "file")

_NAME_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_REDIRECT = re.compile(r"(?<![0-9&>])>(?!&)")
_SEGMENTS = re.compile(r"&&|\|\||[|;\n]")
# convert.system_message's "Tools: A, B. Call a tool by writing …" (not imported: convert loads SQLAlchemy)
_TOOLS_LINE = re.compile(r"Tools: ([^\n]+?)\. Call a tool by writing ")
_TOOLS_BLOCK = re.compile(r"<tools>(.*?)</tools>", re.S)
_ERROR_START = re.compile(r"^\s*(?:\[error\]|<tool_use_error>|(?:error|fatal|exception)\b[:\s!])", re.I)
_ERROR_HEAD = re.compile(r"traceback \(most recent call last\)|command not found|no such file or directory|"
                         r"permission denied|exit(?:ed with)? (?:code|status):? *-?[1-9]|"
                         r"\"?exit_code\"?\s*[:=]\s*-?[1-9]", re.I)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ("" if content is None else json.dumps(content))


def shell_command(args: dict) -> str:
    cmd = args.get("command", args.get("cmd", args.get("input", "")))
    if isinstance(cmd, list):
        cmd = cmd[-1] if len(cmd) == 3 and cmd[1] in ("-c", "-lc") else " ".join(map(str, cmd))
    return str(cmd).strip()


def _read_only_shell(command: str) -> bool:
    """A shell command that only looks (ls, cat, grep, git status …): every segment, no redirection into a file."""
    if not command or _REDIRECT.search(command):
        return False
    for segment in filter(str.strip, _SEGMENTS.split(command)):
        words = segment.split()
        if words[0] not in READ_ONLY_COMMANDS and not (words[0] == "git" and words[1:2] and words[1] in READ_ONLY_GIT):
            return False
    return True


def name_words(name: str) -> list[str]:
    """A tool name's words, lower case: "WebFetch" -> web, fetch; "read_many_files" -> read, many, files."""
    return [w.lower() for w in _NAME_WORDS.findall(name)]


def is_exploratory(call: dict) -> bool:
    """A read/search-type call: by the words of the tool's name (case-insensitive; a write word wins), or a shell tool
    whose command only looks."""
    name = str(call.get("name") or "")
    args = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
    if name.lower() in SHELL_TOOLS:
        return _read_only_shell(shell_command(args))
    words = name_words(name)
    if any(w in WRITE_WORDS for w in words):
        return False
    return any(w in EXPLORE_WORDS or any(s in w for s in EXPLORE_SUBSTRINGS) for w in words)


def exploration_level(count: int) -> str:
    """REFERENCE A.1's exploration depth of one step: minimal (0-1 exploratory calls), moderate (2-3), thorough (4+)."""
    return "minimal" if count <= 1 else "moderate" if count <= 3 else "thorough"


def call_path(call: dict) -> str | None:
    args = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
    for key in PATH_KEYS:
        if isinstance(args.get(key), str) and args[key].strip():
            return args[key].strip()
    return None


def is_error_result(message: dict) -> bool:
    """A tool result that reports a failure: `is_error`, convert's "[error]" prefix, Claude's <tool_use_error>, an
    "Error:"/"fatal:" start, a traceback, a non-zero exit code (looked for in the head and the tail only, so a file
    that merely contains the word is not an error)."""
    parts = message.get("content") if isinstance(message.get("content"), list) else []
    if message.get("is_error") or any(isinstance(p, dict) and p.get("is_error") for p in parts):
        return True
    text = _text(message.get("content"))
    return bool(_ERROR_START.search(text) or _ERROR_HEAD.search(text[:400]) or _ERROR_HEAD.search(text[-200:]))


def tools_in_system(content: str) -> list[str]:
    """Tool names in a system message: convert's "Tools: A, B. Call a tool …" line, or a Hermes <tools> JSON block."""
    line = _TOOLS_LINE.search(content)
    if line:
        return [t.strip() for t in line.group(1).split(", ") if t.strip()]
    names = []
    for block in _TOOLS_BLOCK.findall(content):
        for row in filter(str.strip, block.splitlines()):
            try:
                obj = json.loads(row)
            except json.JSONDecodeError:
                continue
            fn = obj.get("function", obj) if isinstance(obj, dict) else {}
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                names.append(fn["name"])
    return names


def _tool_names(tools: list) -> list[str]:
    out = []
    for t in tools:
        fn = t.get("function", t) if isinstance(t, dict) else {"name": t}
        if isinstance(fn.get("name"), str) and fn["name"].strip():
            out.append(fn["name"].strip())
    return out


def message_calls(message: dict) -> list[dict]:
    """[{name, arguments}] of an assistant message: structured `tool_calls` or Hermes text (agreement's parser)."""
    parsed = parse_student(as_text({**message, "role": "assistant"})["content"])
    return [c["function"] for c in parsed.get("tool_calls", [])]


def _failure(context: list[dict]) -> tuple[bool, dict | None, str]:
    """(the context ends in a failed tool result, the call that failed, the error's text) over its trailing results."""
    tail = []
    for msg in reversed(context):
        if msg.get("role") != "tool":
            break
        tail.append(msg)
    failed = next((m for m in tail if is_error_result(m)), None)
    if failed is None:
        return False, None, ""
    last = next((m for m in reversed(context) if m.get("role") == "assistant"), {})
    calls = last.get("tool_calls") or []
    match = [c for c in calls if c.get("id") and c.get("id") == failed.get("tool_call_id")]
    chosen = match[0] if match else calls[0] if len(calls) == 1 else None
    call = (message_calls({"tool_calls": [chosen]}) or [None])[0] if chosen else None
    return True, call, _text(failed.get("content"))[:500]


@dataclass
class RewardContext:
    """What a completion is judged against. `tools` empty = unknown (any name allowed). `teacher_exploration`: the
    exploratory calls in the teacher's next step (a completion is one step, so one step is what it can match); None =
    counted from `teacher_calls`. `seen_paths`: file paths the context's calls already touched (read before edit)."""

    tools: list[str] = field(default_factory=list)
    teacher_calls: list[dict] = field(default_factory=list)
    teacher_text: str = ""
    teacher_exploration: int | None = None
    after_error: bool = False
    failed_call: dict | None = None
    error_text: str = ""
    seen_paths: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.teacher_exploration is None:
            self.teacher_exploration = sum(is_exploratory(c) for c in self.teacher_calls)

    @classmethod
    def from_messages(cls, context: list[dict], teacher: dict, tools: list | None = None) -> RewardContext:
        """From OpenAI-style chat messages ending right before the teacher's assistant message. `tools` (names or
        OpenAI tool dicts) overrides the names listed in the system message."""
        system = next((m for m in context if m.get("role") == "system"), None)
        names = _tool_names(tools) if tools is not None else tools_in_system(_text((system or {}).get("content")))
        teacher_msg = parse_student(as_text({**teacher, "role": "assistant"})["content"])
        after_error, failed_call, error_text = _failure(context)
        paths = [p for m in context if m.get("role") == "assistant" for c in message_calls(m) if (p := call_path(c))]
        return cls(tools=names, teacher_calls=[c["function"] for c in teacher_msg.get("tool_calls", [])],
                   teacher_text=teacher_msg["content"], after_error=after_error, failed_call=failed_call,
                   error_text=error_text, seen_paths=sorted(set(paths)))

    def to_row(self) -> dict:
        """JSON-able; store `json.dumps(ctx.to_row())` in the dataset (Arrow would merge dict columns' schemas)."""
        return asdict(self)

    @classmethod
    def from_row(cls, row: dict | str) -> RewardContext:
        data = json.loads(row) if isinstance(row, str) else dict(row)
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})
