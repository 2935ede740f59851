"""The live check after connecting: one tool-calling request to the served endpoint, in the API the tool speaks
(/v1/chat/completions, or /v1/responses for Codex), with the key, as the tool would send it; what came back is said
(a tool call, text, or why there was no answer)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from app.core.ship import serving
from app.core.ship.connect.agent import RESPONSES
from app.core.ship.connect.endpoint import Endpoint
from app.core.ship.errors import ShipError

PROMPT = "Run the project's tests with pytest and tell me what failed."
TOOL = {"name": "run_command", "description": "Run a shell command in the project and return its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
MAX_TOKENS = 128
TIMEOUT = 120.0  # a CPU answers in seconds; a server loading a model takes longer


@dataclass
class Check:
    """ok: the endpoint answered the request with a well-formed completion; tool_call: the tool it called (if any)."""

    ok: bool
    route: str
    status: int | None = None
    tool_call: str | None = None
    text: str = ""
    why: str = ""

    def sentence(self) -> str:
        if not self.ok:
            return f"✗ POST {self.route}: {self.why}"
        said = (f"a call of {self.tool_call}" if self.tool_call else
                f"text, no tool call ({self.text[:80]!r})" if self.text else "an empty answer")
        return f"✓ POST {self.route} with a tool answered {said}"

    def payload(self) -> dict:
        return asdict(self)


def request_body(ep: Endpoint, wire: str) -> dict:
    if wire == RESPONSES:
        return {"model": ep.model, "input": PROMPT, "tools": [{"type": "function", **TOOL}],
                "max_output_tokens": MAX_TOKENS, "temperature": 0}
    return {"model": ep.model, "messages": [{"role": "user", "content": PROMPT}],
            "tools": [{"type": "function", "function": TOOL}], "max_tokens": MAX_TOKENS, "temperature": 0}


def _chat_answer(body: dict) -> tuple[str | None, str]:
    message = body["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    return (calls[0]["function"]["name"] if calls else None), message.get("content") or ""


def _responses_answer(body: dict) -> tuple[str | None, str]:
    items = body["output"]
    calls = [i for i in items if i.get("type") == "function_call"]
    text = " ".join(c.get("text", "") for i in items if i.get("type") == "message" for c in i.get("content") or [])
    return (calls[0]["name"] if calls else None), text


def live(ep: Endpoint, wire: str, timeout: float = TIMEOUT) -> Check:
    route = "/v1/responses" if wire == RESPONSES else "/v1/chat/completions"
    if not ep.running:
        return Check(False, route, why="the model server is not running, so nothing answered yet: start it "
                                       "(nightschool serve start) and connect again to check")
    try:
        code, body = serving.request("POST", route, request_body(ep, wire), timeout=timeout,
                                     base=ep.base_url.removesuffix("/v1"))
    except ShipError as exc:
        return Check(False, route, why=str(exc))
    if code != 200:
        detail = str(body.get("detail") or body.get("error") or body)[:200]
        why = f"the server answered {code} ({detail})"
        if code == 404 and wire == RESPONSES:
            why += ("; Codex speaks only the Responses API, which this server does not serve: it is an older one — "
                    "restart it (nightschool serve stop, then nightschool serve start)")
        return Check(False, route, code, why=why)
    try:
        called, text = (_responses_answer if wire == RESPONSES else _chat_answer)(body)
    except (KeyError, IndexError, TypeError) as exc:
        return Check(False, route, code, why=f"the answer is not an OpenAI {wire} response ({exc!r}): "
                                             f"{json.dumps(body)[:200]}")
    return Check(True, route, code, called, text.strip())
