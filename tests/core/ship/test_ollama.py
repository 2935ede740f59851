"""Ollama export: the derived Go TEMPLATE writes what the Jinja export template writes, the Modelfile, `ollama create`."""
from __future__ import annotations

import ast
import functools
import json
import os
import re
import stat

import pytest

from app.core.ship import ollama
from app.core.ship.errors import ShipError
from app.core.ship.template import export_template
from tests.tiny_model import CHATML

SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
           "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
           "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
           "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
# Literal text full of what a Go string must escape: quotes, backslashes, `{{`, a tab, a control character; a BOS.
ODD = ("{{ bos_token }}{% for message in messages %}{{ '[' + message['role'] + '] \"{{\\\\}}\"\t' + message['content']"
       " + '\x07<end>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '[assistant] \"{{\\\\}}\"\t' }}{% endif %}")
EOS = "<|im_end|>"


class GoTemplate:
    """A STAND-IN for Ollama's Go text/template engine, which cannot run here: exactly the subset go_template emits
    (if / else if / else / range / with / end, `$v :=`, `$`, fields, eq ne and or not len slice index, string and
    number literals, (pipeline).Field, comments, and the `{{-` / `-}}` whitespace trimming)."""

    def __init__(self, source: str, args_json=json.dumps):
        self.args_json = args_json  # how {{ .Function.Arguments }} prints (Go calls its String(): json.Marshal)
        self.tree, rest = self._parse(iter(self._lex(source)))
        assert rest is None

    @staticmethod
    def _lex(src):
        items, pos, trim_next, ws = [], 0, False, " \t\r\n"
        for m in re.finditer(r'{{(-\s)?((?:"(?:\\.|[^"\\])*"|[^"}]|}(?!}))*?)(\s-)?}}', src, re.S):
            text = src[pos:m.start()].lstrip(ws) if trim_next else src[pos:m.start()]
            items.append(("text", text.rstrip(ws) if m.group(1) else text))
            if not m.group(2).strip().startswith("/*"):  # a comment writes nothing
                items.append(("action", m.group(2).strip()))
            pos, trim_next = m.end(), bool(m.group(3))
        return items + [("text", src[pos:].lstrip(ws) if trim_next else src[pos:])]

    def _parse(self, items):
        """Nodes up to an `end` / `else…` (returned as the second value; None at the end of the template)."""
        nodes = []
        for kind, body in items:
            word = body.split(" ", 1)[0] if kind == "action" else ""
            if kind == "text":
                nodes.append(("text", body))
            elif word in ("end", "else"):
                return nodes, body
            elif word in ("if", "with", "range"):
                nodes.append(self._block(word, body[len(word):].strip(), items))
            else:
                nodes.append(("print", body))
        return nodes, None

    def _block(self, word, head, items):
        body, stop = self._parse(items)
        branches = [(head, body)]
        while stop and stop.startswith("else if "):
            cond = stop[len("else if "):]
            body, stop = self._parse(items)
            branches.append((cond, body))
        other = self._parse(items)[0] if stop == "else" else []
        return (word, branches, other)

    def render(self, data) -> str:
        out = []
        self._run(self.tree, data, {"$": data}, out)
        return "".join(out)

    def _run(self, nodes, dot, env, out):
        for node in nodes:
            if node[0] == "text":
                out.append(node[1])
            elif node[0] == "print":
                if decl := re.match(r"(\$\w+) := (.*)", node[1]):
                    env[decl.group(1)] = self._eval(decl.group(2), dot, env)
                else:
                    out.append(self._show(self._eval(node[1], dot, env)))
            elif node[0] == "range":
                (head, body), = node[1]
                index, elem, expr = re.match(r"(?:(\$\w+), (\$\w+) := )?(.*)", head).groups()
                for i, item in enumerate(self._eval(expr, dot, env) or []):
                    self._run(body, item, {**env, index: i, elem: item} if index else dict(env), out)
            else:  # if / with
                for cond, body in node[1]:
                    value = self._eval(cond, dot, env)
                    if value:
                        self._run(body, value if node[0] == "with" else dot, dict(env), out)
                        break
                else:
                    self._run(node[2], dot, dict(env), out)

    def _show(self, value) -> str:
        assert isinstance(value, (str, int, dict)) and not isinstance(value, bool), value
        return self.args_json(value) if isinstance(value, dict) else str(value)

    TOKEN = re.compile(r'\s*("(?:\\.|[^"\\])*"|\d+|\(|\)|\$\w*(?:\.\w+)*|(?:\.\w+)+|\.|\w+)')
    FUNCS = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "len": len, "not": lambda a: not a,
             "slice": lambda x, i: x[i:], "index": lambda x, i: x[i],
             "and": lambda *a: next((x for x in a if not x), a[-1]), "or": lambda *a: next((x for x in a if x), a[-1])}

    def _eval(self, expr, dot, env):
        tokens = self.TOKEN.findall(expr)
        value, rest = self._command(tokens, dot, env)
        assert not rest, (expr, rest)
        return value

    def _command(self, tokens, dot, env):
        if tokens[0] in self.FUNCS:
            name, args, tokens = tokens[0], [], tokens[1:]
            while tokens and tokens[0] != ")":
                arg, tokens = self._operand(tokens, dot, env)
                args.append(arg)
            return self.FUNCS[name](*args), tokens
        return self._operand(tokens, dot, env)

    def _operand(self, tokens, dot, env):
        tok, tokens = tokens[0], tokens[1:]
        if tok == "(":
            value, tokens = self._command(tokens, dot, env)
            assert tokens[0] == ")"
            tokens = tokens[1:]
            if tokens and tokens[0].startswith(".") and tokens[0] != ".":  # (pipeline).Field
                value, tokens = self._fields(value, tokens[0]), tokens[1:]
            return value, tokens
        if tok.startswith('"') or tok.isdigit():  # Go's \n \t \\ \" \uXXXX \UXXXXXXXX read the same in Python
            return ast.literal_eval(tok), tokens
        if tok.startswith("$"):
            name, _, path = tok.partition(".")
            return self._fields(env[name], "." + path if path else ""), tokens
        return (dot if tok == "." else self._fields(dot, tok)), tokens

    @staticmethod
    def _fields(value, path):  # a missing field is an error, as for Go structs
        return functools.reduce(lambda v, name: v[name], filter(None, path.split(".")), value)


def ollama_data(messages: list[dict]) -> dict:
    """OpenAI messages as Ollama hands them to the template (content null -> "", arguments an object)."""
    return {"Tools": None, "Messages": [
        {"Role": m["role"], "Content": m.get("content") or "",
         "ToolCalls": [{"Function": {"Name": c["function"]["name"], "Arguments": c["function"]["arguments"]}}
                       for c in m.get("tool_calls") or []]} for m in messages]}


def call(name, **args):
    return {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": args}}


AGENT = [
    {"role": "system", "content": "You are a coding agent.\nUse tools."},
    {"role": "user", "content": "Fix the failing test in `calc.py` (it says \"1 + 1 = 3\")."},
    {"role": "assistant", "content": "Let me look.",
     "tool_calls": [call("read_file", path="calc.py"), call("bash", command="pytest -q", timeout=60)]},
    {"role": "tool", "content": "def add(a, b):\n    return a + b + 1\n"},
    {"role": "tool", "content": "1 failed, 3 passed"},
    {"role": "assistant", "content": None,
     "tool_calls": [call("edit", path="calc.py", old="a + b + 1", new="a + b", opts={"all": True, "n": [1, 2]},
                         note="café {{ .Content }}")]},
    {"role": "tool", "content": "ok"},
    {"role": "assistant", "content": "Fixed: `add` no longer adds 1. {{ not a template }}"},
]
CONVERSATIONS = {
    "agent, ends with the answer": AGENT,
    "agent, user follows up": AGENT + [{"role": "user", "content": "Thanks! Run it again?"}],
    "no system, ends with a tool result": AGENT[1:5],
    "no system, empty content with calls": [{"role": "user", "content": "ls"},
                                             {"role": "assistant", "content": "", "tool_calls": [call("ls")]}],
    "one user message": [{"role": "user", "content": "  hi  "}],
    "plain chat": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
}


@pytest.mark.parametrize("template", [SMOLLM2, CHATML, ODD], ids=["smollm2", "chatml", "odd-literals"])
@pytest.mark.parametrize("conversation", CONVERSATIONS, ids=list(CONVERSATIONS))
def test_go_template_renders_byte_identically_to_the_jinja_export(template, conversation):
    messages, bos = CONVERSATIONS[conversation], "<s>" if template is ODD else ""
    gen = messages[-1]["role"] != "assistant"  # Ollama prompts for the assistant after a user / tool turn
    jinja = ollama.render_jinja(export_template(template), messages, gen, bos_token=bos, eos_token=EOS)
    go = GoTemplate(ollama.go_template(template, EOS, bos)).render(ollama_data(messages))
    assert go == jinja
    assert "<tool_call>" in jinja or not any(m.get("tool_calls") for m in messages)


def test_smollm2_default_system_message_only_when_the_first_message_is_not_system():
    go = GoTemplate(ollama.go_template(SMOLLM2, EOS))
    assert go.render(ollama_data(AGENT[1:2])).startswith("<|im_start|>system\nYou are a helpful AI assistant")
    assert go.render(ollama_data(AGENT[:2])).startswith("<|im_start|>system\nYou are a coding agent.")


def test_arguments_printed_as_ollama_does_differ_only_inside_the_arguments():
    # Ollama prints {{ .Function.Arguments }} through its String(): Go json.Marshal of a map -- compact, keys sorted,
    # <>& escaped, non-ASCII kept (template.go templateArgs / api ToolCallFunctionArguments.String). The Jinja
    # template (and training) writes json.dumps: spaced, key order kept. Everything else stays byte-identical.
    def go_json(args):
        text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")

    go = GoTemplate(ollama.go_template(SMOLLM2, EOS), go_json).render(ollama_data(AGENT))
    jinja = ollama.render_jinja(export_template(SMOLLM2), AGENT, eos_token=EOS)
    for m in AGENT:
        for c in m.get("tool_calls") or []:
            jinja = jinja.replace(json.dumps(c["function"]["arguments"]), go_json(c["function"]["arguments"]))
    assert go == jinja and '"arguments": {"path":"calc.py"}' in go


def test_go_template_lets_ollama_find_tools_and_the_tool_call_tag():
    go = ollama.go_template(SMOLLM2, EOS)
    assert "{{- if .Tools }}" in go  # Ollama offers tool calling only when the template mentions .Tools
    # Ollama takes the first text inside `if .ToolCalls`, up to "{", as the tag that starts a tool call
    assert "{{- if .ToolCalls }}{{ range $j, $c := .ToolCalls }}<tool_call>{" in go


@pytest.mark.parametrize("template, why", [
    (CHATML.replace("message['content']", "message['content'] | trim"), "changes the content"),
    (CHATML.replace("message['content']", "message['content'] | upper"), "content"),
    ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
     "{% endif %}{{ m['role'] + ': ' + m['content'] + '\n' }}{% endfor %}", "System role not supported"),
    ("{% for m in messages %}{{ m['role'] + ': ' + m['content'] }}{% if not loop.last %}{{ '\n' }}{% endif %}"
     "{% endfor %}", "not wrapped like the others"),
], ids=["trim", "upper", "raises", "last-message-differs"])
def test_templates_that_do_not_decompose_are_refused(template, why):
    with pytest.raises(ShipError, match=why) as err:
        ollama.go_template(template, EOS)
    assert "TEMPLATE by hand" in str(err.value)


def test_modelfile_has_from_template_and_stops():
    text = ollama.modelfile("smol.Q8_0.gguf", SMOLLM2, EOS, parameters={"temperature": 0.2, "num_ctx": 4096})
    lines = text.splitlines()
    assert lines[0] == "FROM ./smol.Q8_0.gguf"
    assert 'PARAMETER stop "<|im_end|>"' in lines and "PARAMETER temperature 0.2" in lines
    assert "PARAMETER num_ctx 4096" in lines
    assert text.count('"""') == 2
    assert text.split('TEMPLATE """', 1)[1].split('"""', 1)[0] == ollama.go_template(SMOLLM2, EOS)
    with pytest.raises(ShipError, match="cannot be turned into an Ollama TEMPLATE"):
        ollama.modelfile("x.gguf", CHATML.replace("message['content']", "message['content'] | trim"), EOS)


def test_write_puts_the_modelfile_beside_the_gguf(tmp_path):
    gguf = tmp_path / "smol.Q8_0.gguf"
    gguf.write_bytes(b"GGUF")
    path = ollama.write(tmp_path, gguf, SMOLLM2, EOS, "", "nightschool-smol")
    assert path == tmp_path / "Modelfile"
    assert "\nFROM ./smol.Q8_0.gguf\n" in path.read_text() and sorted(os.listdir(tmp_path)) == ["Modelfile", gguf.name]
    with pytest.raises(ShipError, match="not a valid Ollama model name"):
        ollama.write(tmp_path, gguf, SMOLLM2, EOS, "", "Bad Name")


def fake_ollama(tmp_path, body: str):
    """A FAKE `ollama` executable (the real one cannot be installed here): records its argv, folder and Modelfile."""
    script = tmp_path / "bin" / "ollama"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{tmp_path}/argv"\npwd > "{tmp_path}/cwd"\n'
                      f'cat "$4" > "{tmp_path}/seen"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return lambda name: str(script) if name == "ollama" else None


@pytest.fixture
def modelfile_path(tmp_path):
    (tmp_path / "out").mkdir()
    return ollama.write(tmp_path / "out", tmp_path / "out" / "smol.Q8_0.gguf", SMOLLM2, EOS, "", "smol")


def test_register_without_ollama_says_how_to_install_and_the_exact_command(modelfile_path):
    result = ollama.register(modelfile_path, "nightschool-smol", which=lambda _: None)
    assert not result.ok and "not installed" in result.message and "https://ollama.com" in result.message
    assert f"ollama create nightschool-smol -f {modelfile_path}" in result.message


def test_register_runs_ollama_create_in_the_modelfile_folder(tmp_path, modelfile_path):
    result = ollama.register(modelfile_path, "nightschool-smol:c1", which=fake_ollama(tmp_path, 'echo "success"'))
    assert result.ok and "ollama run nightschool-smol:c1" in result.message and "success" in result.output
    assert (tmp_path / "argv").read_text().splitlines() == ["create", "nightschool-smol:c1", "-f", str(modelfile_path)]
    assert (tmp_path / "cwd").read_text().strip() == str(modelfile_path.parent)
    assert (tmp_path / "seen").read_text() == modelfile_path.read_text()


def test_register_failure_carries_ollamas_error(tmp_path, modelfile_path):
    which = fake_ollama(tmp_path, 'echo "Error: could not connect to ollama app" >&2\nexit 1')
    result = ollama.register(modelfile_path, "smol", which=which)
    assert not result.ok and "could not connect to ollama app" in result.message and "exit code 1" in result.message


def test_register_refuses_a_bad_name_before_running_anything(modelfile_path):
    result = ollama.register(modelfile_path, "My Model", which=lambda _: pytest.fail("must not look for ollama"))
    assert not result.ok and "lowercase letters, digits" in result.message
