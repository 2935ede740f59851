"""The stand-in teacher the experience tests share: a hosted OpenAI-compatible chat API cannot be reached from CI, so
a real HTTP server on loopback answers from a script."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def chat(message: dict, prompt_tokens: int = 100, completion_tokens: int = 20, model: str = "stand-in-teacher-1"):
    body = {"id": "x", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}
    return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()


class StandInTeacher:
    """A stand-in for a hosted OpenAI-compatible chat API (which cannot be reached from CI): a real HTTP server on
    loopback that answers POST /v1/chat/completions from a script keyed by the request's last user message, and
    records every request it received (path, headers, JSON body)."""

    def __init__(self) -> None:
        self.script: dict[str, list[tuple[int, dict, bytes]]] = {}
        self.default = chat({"content": "done"})  # tests script what they need
        self.received: list[dict] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, prompt: str, *responses: tuple[int, dict, bytes]) -> None:
        """Answer requests for this prompt with these responses in turn (the last one repeats)."""
        self.script[prompt] = list(responses)

    def prompts(self) -> list[str]:
        with self.lock:
            return [r["body"]["messages"][-1]["content"] for r in self.received]

    def _respond(self, body: dict) -> tuple[int, dict, bytes]:
        queue = self.script.get(body["messages"][-1]["content"])
        if not queue:
            return self.default
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def _handler(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server calls it by this name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.received.append({"path": self.path, "headers": dict(self.headers), "body": body})
                code, headers, payload = outer._respond(body)
                self.send_response(code)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):  # quiet
                pass

        return Handler

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
