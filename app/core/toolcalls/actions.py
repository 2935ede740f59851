"""What a tool call does, read from its name and arguments: a shell command, an edit of a file, an exploratory read."""
from __future__ import annotations

import re

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


def call_path(call: dict) -> str | None:
    args = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
    for key in PATH_KEYS:
        if isinstance(args.get(key), str) and args[key].strip():
            return args[key].strip()
    return None
