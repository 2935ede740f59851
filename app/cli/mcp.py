"""`nightschool mcp [--http [--port N]] | mcp token`: the MCP server coding agents use to ask about and steer their
student (stdio by default; the SDK is imported only when the server starts, so `nightschool --help` stays fast)."""
from __future__ import annotations

from app.cli.common import refusals
from app.mcp import DEFAULT_PORT


def cmd_mcp(args) -> int:
    if args.action == "token":
        from app.mcp.access import token

        print(token())
        return 0

    def go() -> int:
        from app.mcp import server

        try:
            if args.http:
                server.run_http(args.port, args.host)
            else:
                server.run_stdio()
        except KeyboardInterrupt:
            return 130
        return 0
    return refusals(go)


def register(sub) -> None:
    p = sub.add_parser("mcp", help="the MCP server for coding agents: stdio (default), --http, or `mcp token`",
                       description="Serve Nightschool's tools (status, history, checkpoints, evaluate, run_cycle_now, "
                                   "approve_deployment, refuse_deployment, ask_student, mark_session) over MCP. "
                                   "stdio by default (stdout is the protocol; logs go to stderr); --http serves "
                                   "streamable HTTP on loopback behind a bearer token (`nightschool mcp token`).")
    p.add_argument("action", nargs="?", default="serve", choices=["serve", "token"],
                   help="serve (default) or token: print the HTTP bearer token for configuring an agent")
    p.add_argument("--http", action="store_true", help="streamable HTTP at http://127.0.0.1:PORT/mcp instead of stdio")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT}; 0: any free)")
    p.add_argument("--host", default="127.0.0.1", help="loopback address to listen on: 127.0.0.1, localhost or ::1")
    p.set_defaults(func=cmd_mcp)
