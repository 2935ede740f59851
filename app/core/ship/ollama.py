"""Ollama: a Go TEMPLATE derived from the shipped Jinja template, the Modelfile, and `ollama create`."""
from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.core.base.files import atomic_write
from app.core.ship.errors import ShipError
from app.core.ship.template import export_template, stop_strings

ROLES = ("system", "user", "assistant", "tool")
NAME_RULE = "lowercase letters, digits and - _ . (one optional :tag), starting with a letter or digit"
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,79}(:[a-z0-9_][a-z0-9._-]{0,79})?")
_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BY_HAND = ("Write a TEMPLATE by hand in the Modelfile (Ollama's Go template syntax: "
            "https://github.com/ollama/ollama/blob/main/docs/template.md), or serve the GGUF with llama.cpp / "
            "LM Studio, which read the Jinja template embedded in it")
# Ollama prints {{ .Function.Arguments }} with Go's json.Marshal: compact (`{"a":1}`), keys sorted, `<>&` escaped.
# The Jinja template (and training) writes json.dumps: `{"a": 1}`, key order kept. Only the history's tool-call
# arguments can differ; the Go template language here has no way to respace them.
_GO_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}
TOOL_CALL = ('<tool_call>{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}</tool_call>')


def _raise(message: str):
    raise jinja2.exceptions.TemplateError(message)


@lru_cache(maxsize=1)
def _env() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def render_jinja(template: str, messages: list[dict], add_generation_prompt: bool = False, bos_token: str = "",
                 eos_token: str = "") -> str:
    """Render a chat template the way transformers and llama.cpp do (sandboxed, trim_blocks, lstrip_blocks)."""
    return _env().from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                               bos_token=bos_token, eos_token=eos_token)


@dataclass(frozen=True)
class Parts:
    """The export template cut into the pieces the Go template writes around each message."""
    head: str  # once, before everything (e.g. a BOS written as text)
    default: str  # the default system block, when the first message is not a system message
    prefix: dict[str, str]
    suffix: dict[str, str]
    gen: str  # the generation prompt


def _refuse(why: str) -> ShipError:
    return ShipError("The chat template cannot be turned into an Ollama TEMPLATE automatically", why, _BY_HAND)


def _segments(text: str, markers: list[str]) -> list[str]:
    """The text around each marker (each must appear exactly once, in order): [before, between..., after]."""
    out, pos = [], 0
    for m in markers:
        at = text.find(m, pos)
        if at < 0 or text.count(m) != 1:
            raise _refuse("it does not write each message's content exactly once, unchanged and in order")
        out.append(text[pos:at])
        pos = at + len(m)
    return out + [text[pos:]]


def _cut_prefix(text: str, prefix: str, what: str) -> str:
    if not text.startswith(prefix):
        raise _refuse(f"the text between messages does not split into per-role wrappers ({what})")
    return text[len(prefix):]


def _derive(render) -> Parts:
    s0, s1, x, u = ({"role": r, "content": f"@@ns-{n}@@"} for r, n in
                    (("system", "s0"), ("system", "s1"), ("user", "x"), ("user", "u")))
    before, s_sys = _segments(render([s0], False), [s0["content"]])
    prefix, suffix = {}, {"system": s_sys}
    for role in ROLES[1:]:
        head, mid, suffix[role] = _segments(render([s0, {**x, "role": role}], False), [s0["content"], x["content"]])
        if head != before:
            raise _refuse(f"the text before the system message changes when a {role} message follows")
        prefix[role] = _cut_prefix(mid, s_sys, f"system then {role}")
    try:  # a later system message shows the system prefix alone; templates that refuse one keep head = ""
        mid = _segments(render([s0, u, s1], False), [m["content"] for m in (s0, u, s1)])[2]
        prefix["system"] = _cut_prefix(mid, suffix["user"], "user then system")
        if not before.endswith(prefix["system"]):
            raise _refuse("the system prefix differs between the first and a later system message")
    except (ShipError, jinja2.exceptions.TemplateError):
        prefix["system"] = before
    head = before[:len(before) - len(prefix["system"])]
    lead, tail = _segments(render([u], False), [u["content"]])
    if tail != suffix["user"] or not lead.startswith(head) or not lead.endswith(prefix["user"]) \
            or len(lead) < len(head) + len(prefix["user"]):
        raise _refuse("a conversation that starts with a user message is not wrapped like the others")
    default = lead[len(head):len(lead) - len(prefix["user"])]
    gen = _cut_prefix(render([s0, u], True), render([s0, u], False), "the generation prompt is not appended last")
    return Parts(head, default, prefix, suffix, gen)


def _content(message: dict) -> str:
    """Content, then one <tool_call> line per call (arguments as json.dumps: the stand-in for Ollama's JSON)."""
    calls = [c.get("function", c) for c in (message.get("tool_calls") or []) if message["role"] == "assistant"]
    blocks = ['<tool_call>{"name": "%s", "arguments": %s}</tool_call>' % (f["name"], json.dumps(f["arguments"]))
              for f in calls]
    return "\n".join([t for t in [message.get("content") or ""] if t] + blocks)


def predict(parts: Parts, messages: list[dict]) -> str:
    """What the emitted Go template writes for `messages` (JSON-dumped arguments): checked against Jinja."""
    out = [parts.head, parts.default if messages and messages[0]["role"] != "system" else ""]
    for m in messages:
        if m["role"] in parts.prefix:
            out += [parts.prefix[m["role"]], _content(m), parts.suffix[m["role"]]]
    if messages and messages[-1]["role"] != "assistant":
        out.append(parts.gen)
    return "".join(out)


def _probes() -> list[list[dict]]:
    calls = [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}},
             {"type": "function", "function": {"name": "ls", "arguments": {}}}]
    talk = [{"role": "system", "content": "  You help.\n"}, {"role": "user", "content": " two\nlines "},
            {"role": "assistant", "content": "Checking.", "tool_calls": calls},
            {"role": "tool", "content": "sunny"}, {"role": "tool", "content": " a.txt\n"},
            {"role": "assistant", "content": None, "tool_calls": calls[:1]}, {"role": "tool", "content": "rain"},
            {"role": "assistant", "content": "Done. "}, {"role": "user", "content": "thanks"}]
    return [talk, talk[:-1], talk[1:], talk[1:3], [{"role": "user", "content": "hi"}], talk[:2]]


def _check(parts: Parts, render) -> None:
    for messages in _probes():
        if render(messages, messages[-1]["role"] != "assistant") != predict(parts, messages):
            raise _refuse("a test conversation (tool calls, content with surrounding whitespace, several turns) "
                          "renders differently from the per-role wrappers derived from it: the template changes "
                          "the content, or wraps a message by its position")


def derive_parts(template: str, eos_token: str, bos_token: str = "") -> Parts:
    """The export template as head / default system / per-role prefix and suffix / generation prompt (verified)."""
    shipped = export_template(template)

    def render(messages, gen):
        return render_jinja(shipped, messages, gen, bos_token=bos_token, eos_token=eos_token)

    try:
        parts = _derive(render)
        _check(parts, render)
    except jinja2.exceptions.TemplateError as exc:
        raise _refuse(f"rendering a test conversation failed: {exc}") from exc
    return parts


def go_string(text: str) -> str:
    """A Go double-quoted string literal for `text` (printable characters kept, the rest escaped)."""
    return '"' + "".join(_GO_ESCAPES.get(ch) or (ch if ch.isprintable() else f"\\U{ord(ch):08x}") for ch in text) + '"'


def _lit(text: str, trim: bool = False) -> str:
    return ("{{- " if trim else "{{ ") + go_string(text) + " }}" if text else ""


def _branch(keyword: str, role: str, parts: Parts) -> list[str]:
    head = "{{- " + keyword + ' eq .Role "' + role + '" }}' + _lit(parts.prefix[role]) + "{{ .Content }}"
    if role != "assistant":
        return [head + _lit(parts.suffix[role])]
    return [head,
            '{{- if .Content }}{{ with .ToolCalls }}{{ "\\n" }}{{ end }}{{ end }}',
            "{{- if .ToolCalls }}{{ range $j, $c := .ToolCalls }}" + TOOL_CALL
            + '{{ if ne (len (slice $m.ToolCalls $j)) 1 }}{{ "\\n" }}{{ end }}{{ end }}{{ end }}',
            _lit(parts.suffix[role], trim=True)]


def go_template(template: str, eos_token: str, bos_token: str = "") -> str:
    """Ollama's TEMPLATE (Go text/template over .Messages) writing exactly what the export Jinja template writes.
    `{{ if .Tools }}{{ end }}` writes nothing but tells Ollama the model takes tools (it then parses <tool_call>)."""
    parts = derive_parts(template, eos_token, bos_token)
    lines = ["{{- /* Nightschool: derived from the model's chat template; tool calls as <tool_call> lines */ -}}",
             "{{- if .Tools }}{{ end }}", "{{- if .Messages }}", _lit(parts.head, trim=True)]
    if parts.default:
        lines.append('{{- if ne (index $.Messages 0).Role "system" }}' + _lit(parts.default) + "{{ end }}")
    lines += ["{{- range $i, $m := .Messages }}", "{{- $last := eq (len (slice $.Messages $i)) 1 }}"]
    for n, role in enumerate(ROLES):
        lines += _branch("if" if n == 0 else "else if", role, parts)
    lines += ["{{- end }}", '{{- if and $last (ne .Role "assistant") }}' + _lit(parts.gen) + "{{ end }}",
              "{{- end }}", "{{- end }}"]
    return "\n".join(line for line in lines if line)


def check_name(name: str) -> str:
    """The name unchanged when Ollama takes it, else ShipError saying the rule."""
    if not _NAME.fullmatch(name or ""):
        raise ShipError(f"{name!r} is not a valid Ollama model name", f"Ollama model names use {NAME_RULE}",
                        "Choose a name like nightschool-smol or nightschool-smol:cycle3")
    return name


def _param_lines(stops: list[str], parameters: dict | None) -> list[str]:
    items = [("stop", s) for s in stops]
    for key, value in (parameters or {}).items():
        items += [(key, v) for v in value] if isinstance(value, (list, tuple)) else [(key, value)]
    lines = []
    for key, value in items:
        text = json.dumps(value) if isinstance(value, bool) else str(value)
        if not _PARAM.fullmatch(key) or "\n" in text or "\r" in text:
            raise ShipError(f"The Modelfile parameter {key}={text!r} cannot be written",
                            "parameter names are letters, digits and _, values one line", "Fix the parameter")
        lines.append(f"PARAMETER {key} " + (text if key != "stop" and text and text.strip() == text else f'"{text}"'))
    return lines


def modelfile(gguf_file: str, template: str, eos_token: str, bos_token: str = "",
              parameters: dict | None = None) -> str:
    """The Modelfile text: FROM the GGUF (relative to the Modelfile unless absolute), TEMPLATE, stop parameters."""
    go = go_template(template, eos_token, bos_token)
    if '"""' in go:
        raise _refuse('the derived template contains """, which ends a Modelfile TEMPLATE block')
    if any(c in gguf_file for c in "\n\r\""):
        raise ShipError(f"The GGUF path {gguf_file!r} cannot be written into a Modelfile",
                        "it contains a newline or a double quote", "Rename the GGUF file")
    source = gguf_file if Path(gguf_file).is_absolute() else "./" + Path(gguf_file).as_posix()
    stops = stop_strings(export_template(template), eos_token)
    return "\n".join([f"FROM {source}", f'TEMPLATE """{go}"""', *_param_lines(stops, parameters)]) + "\n"


def write(folder: Path, gguf: Path, template: str, eos_token: str, bos_token: str, name: str,
          parameters: dict | None = None) -> Path:
    """Write `folder/Modelfile` (atomically) for `gguf`, normally the GGUF beside it; returns its path."""
    folder, gguf = Path(folder), Path(gguf)
    check_name(name)
    try:
        source = gguf.resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        source = str(gguf.resolve())
    header = f"# Nightschool model {name}. Register it with: ollama create {name} -f Modelfile\n"
    text = header + modelfile(source, template, eos_token, bos_token, parameters)
    folder.mkdir(parents=True, exist_ok=True)
    return atomic_write(folder / "Modelfile", text)


@dataclass
class OllamaResult:
    """What `ollama create` did: ok, the model name, a message for the user (what / why / fix), Ollama's output."""
    ok: bool
    name: str
    message: str
    output: str = ""


def create_command(name: str, modelfile_path: Path) -> str:
    """The exact shell command that registers the model (shown to the user when we cannot run it)."""
    return f"ollama create {shlex.quote(name)} -f {shlex.quote(str(modelfile_path))}"


def register(modelfile_path: Path, name: str, which=shutil.which, run=subprocess.run,
             timeout: float = 600) -> OllamaResult:
    """`ollama create NAME -f PATH` (run in the Modelfile's folder); never raises, the result says what happened."""
    modelfile_path = Path(modelfile_path)
    command = create_command(name, modelfile_path)
    try:
        check_name(name)
    except ShipError as exc:
        return OllamaResult(False, name, str(exc))
    exe = which("ollama")
    if exe is None:
        return OllamaResult(False, name, str(ShipError(
            "Ollama is not installed or not on PATH", "the model is registered with Ollama's own command",
            f"Install Ollama from https://ollama.com, then run `{command}`")))
    try:
        done = run([exe, "create", name, "-f", str(modelfile_path)], cwd=str(modelfile_path.parent),
                   capture_output=True, text=True, timeout=timeout)
    except (subprocess.TimeoutExpired, OSError) as exc:
        what = (f"`ollama create` did not finish within {timeout:g} s" if isinstance(exc, subprocess.TimeoutExpired)
                else "Ollama could not be started")
        fix = f"Check that Ollama runs, then run `{command}`"
        return OllamaResult(False, name, str(ShipError(what, str(exc), fix)))
    output = (done.stdout or "") + (done.stderr or "")
    tail = "\n".join(output.strip().splitlines()[-15:])[-2000:]
    if done.returncode == 0:
        return OllamaResult(True, name, f"Registered {name} with Ollama. Try it: ollama run {name}", output)
    return OllamaResult(False, name, str(ShipError(
        f"`ollama create` failed (exit code {done.returncode})", f"Ollama said: {tail or 'nothing'}",
        f"Check that the Ollama server is running (ollama serve), then run `{command}`")), output)
