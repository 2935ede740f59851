"""A stand-in for the served student (named as such): the connect tests need an OpenAI-compatible endpoint that
answers a tool-calling request at once, in both wires the tools use (/v1/chat/completions, /v1/responses); the real
server's tool calls are another test's subject (engine/serve). A real HTTP server on loopback that checks the bearer
key like the real one, records each request, and is found through the server's real state file (serve/server.json,
with this process's pid), so `serving.state()` and `endpoint.current()` run as they do for the real server."""
from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from app.core.ship import serving

CALL = {"name": "run_command", "arguments": json.dumps({"command": "pytest -x"})}


def chat_answer(model: str) -> dict:
    return {"id": "chatcmpl-standin", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": None,
                                     "tool_calls": [{"id": "call_0", "type": "function", "function": CALL}]}}]}


def responses_answer(model: str) -> dict:
    return {"id": "resp_standin", "object": "response", "model": model, "status": "completed",
            "output": [{"type": "function_call", "id": "fc_0", "call_id": "call_0", **CALL}]}


class StandInStudent:
    """The stand-in served student: start() serves and writes serve/server.json; close() stops and removes it.
    `responses=False` answers /v1/responses 404, as llama-cpp-python's own server (and ours before it served the
    Responses API) does."""

    def __init__(self, responses: bool = True) -> None:
        self.responses = responses
        self.received: list[dict] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        state = {"pid": os.getpid(), "url": self.url, "host": "127.0.0.1", "port": self.port,
                 "current": {"name": "model.q4_k_m", "path": "model.q4_k_m.gguf", "sha256": "", "quant": "q4_k_m"},
                 "standby": None, "parked": False}
        (serving.serve_dir() / "server.json").write_text(json.dumps(state), encoding="utf-8")

    def _answer(self, path: str, headers, body: dict) -> tuple[int, dict]:
        if headers.get("Authorization") != f"Bearer {serving.api_key()}":
            return 401, {"detail": "Invalid API key"}
        if path == "/v1/chat/completions":
            return 200, chat_answer(body.get("model", ""))
        if path == "/v1/responses" and self.responses:
            return 200, responses_answer(body.get("model", ""))
        return 404, {"detail": "Not Found"}

    def _handler(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server calls it by this name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.received.append({"path": self.path, "body": body})
                code, answer = outer._answer(self.path, self.headers, body)
                payload = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):  # quiet
                pass

        return Handler

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        (serving.serve_dir() / "server.json").unlink(missing_ok=True)
