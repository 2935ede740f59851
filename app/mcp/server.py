"""The MCP server over the School facade: tools a coding agent calls to ask about its student and steer it.

Transports: stdio (`run_stdio`: stdout is the protocol, so everything else goes to stderr) and streamable HTTP on
loopback only behind a bearer token (`run_http`; the token is in `<data dir>/runtime/mcp_token`). A School refusal
(Explained: what / why / fix) comes back as a tool error carrying that text. Reads need no runtime and never load
the training stack; commands are written to the store, where the runtime takes them up."""
from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from app.core.base import paths
from app.core.base.errors import Explained
from app.core.base.store import Store
from app.core.experience import buffer, config
from app.core.runtime.school.facade import School
from app.mcp import DEFAULT_PORT, PATH, access
from app.mcp.schemas import (
    Answer,
    BlindResults,
    Checkpoints,
    Cycle,
    Evaluation,
    ExperienceSummary,
    Feedback,
    History,
    Mark,
    Started,
    Status,
    TeamStatus,
)

NAME = "nightschool"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
INSTRUCTIONS = (
    "Nightschool trains a small local model (the student) on coding-agent sessions, cycle after cycle. "
    "`status` says what the student is, what the next cycle waits for and where the current one stands; "
    "`run_cycle_now` starts one; a cycle in state 'approval' waits for `approve_deployment` or `refuse_deployment`; "
    "`mark_session` weighs a captured session for the next dataset; `ask_student` asks the served student; "
    "`blind_results` says how often a person (or, apart, the teacher) could not tell the student's work from the "
    "agent's; "
    "`experience_feedback` rates one of the student's answers (id from its X-Nightschool-Experience header), "
    "optionally with a better answer; `experience_summary` counts what the experience buffer holds; on a team "
    "member's data dir `team_status` says what the team's school is doing.")

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


@contextlib.contextmanager
def _explained() -> Iterator[None]:
    """A School refusal becomes the tool's error result with its what / why / fix text."""
    try:
        yield
    except Explained as exc:
        raise ToolError(str(exc)) from exc


def _tool(server: MCPServer, annotations: ToolAnnotations):
    """Register a tool with its docstring, on one line, as the description the agent reads."""
    def register(fn):
        server.add_tool(fn, description=" ".join((fn.__doc__ or "").split()), annotations=annotations)
        return fn
    return register


class StaticToken:
    """The SDK's TokenVerifier for the one token in <data dir>/runtime/mcp_token (read per request)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if not access.matches(token):
            return None
        return AccessToken(token=token, client_id="local-agent", scopes=[])


def build_server(store: Store | None = None, *, token_auth: bool = False, url: str = "http://127.0.0.1") -> MCPServer:
    """The tools over one data dir's School. token_auth: HTTP requests need `Authorization: Bearer <token>`
    (`url` is where the server answers; the SDK's auth settings require it, nothing is served for OAuth)."""
    school = School(store)
    auth = {}
    if token_auth:
        auth = {"token_verifier": StaticToken(),
                "auth": AuthSettings(issuer_url=url, resource_server_url=None, required_scopes=[])}
    server = MCPServer(NAME, title="Nightschool", instructions=INSTRUCTIONS, version=paths.app_version(), log_level="WARNING",
                       **auth)
    _school_tools(server, school)
    _cycle_tools(server, school)
    _student_tools(server, school)
    _experience_tools(server, school.store)
    _team_tools(server)
    return server


def _school_tools(server: MCPServer, school: School) -> None:
    """What the school is and was: status, history, checkpoints, and measuring one."""
    @_tool(server, READ)
    def status() -> Status:
        """The school now: the deployed student and whether it is served, the learning policy, what the next cycle
        waits for, the current cycle (stage, state) and the last one that ended."""
        with _explained():
            return Status.model_validate(school.status())

    @_tool(server, READ)
    def history(limit: Annotated[int, Field(ge=1, le=200, description="how many cycles")] = 10) -> History:
        """The most recent learning cycles, newest first, with each one's stages, timings, outcome and report."""
        with _explained():
            return History(cycles=school.history(limit))

    @_tool(server, READ)
    def checkpoints() -> Checkpoints:
        """The checkpoints the student was trained to, with whether each passed the quality gate; pass '#ID' to
        `evaluate`."""
        with _explained():
            return Checkpoints(checkpoints=school.checkpoints())

    @_tool(server, WRITE)
    def evaluate(checkpoint: Annotated[str, Field(description="'#ID' from `checkpoints`, a job id, or 'base'")]
                 ) -> Evaluation:
        """Measure a checkpoint (or the base model) on its held-out set and return the metrics; a repeated
        evaluation is answered from the record. Slow the first time: it runs the model."""
        from app.core.judge.records import resolve

        with _explained():
            return Evaluation.model_validate(school.evaluate(resolve(school.store, checkpoint)))

    @_tool(server, READ)
    def blind_results() -> BlindResults:
        """The blind test's results: per tested model and judge ('person', or 'teacher' when the teacher model judged
        over its API: a machine's view, apart), the share of answered trials where the judge could not tell the
        student's next action from the agent's (a wrong pick or "can't tell"), its session-level 95 % interval and
        the number of trials; 50 % is chance, above 45 % the goal. A person takes the test (`nightschool judge
        blind` or the Judge tab), the teacher with `--judge teacher`: this never runs it."""
        with _explained():
            return BlindResults(results=school.blind_results())


def _cycle_tools(server: MCPServer, school: School) -> None:
    """Steering cycles: start one now, approve or refuse a deployment that waits."""
    @_tool(server, WRITE)
    def run_cycle_now() -> Started:
        """Start a learning cycle now, skipping the session count, window and cooldown (or name the one already
        running); returns the cycle id at once: follow its progress with `status`. Refused, with the reason, when
        there is nothing new to learn."""
        with _explained():
            return Started.model_validate(school.now(by="mcp"))

    @_tool(server, WRITE)
    def approve_deployment(cycle_id: Annotated[int, Field(description="the cycle in state 'approval'")]) -> Cycle:
        """Approve the deployment a cycle waits for: the student it trained will be served."""
        with _explained():
            return Cycle.model_validate(school.decide(cycle_id, approve=True))

    @_tool(server, WRITE)
    def refuse_deployment(cycle_id: Annotated[int, Field(description="the cycle in state 'approval'")]) -> Cycle:
        """Refuse the deployment a cycle waits for: the student served now stays."""
        with _explained():
            return Cycle.model_validate(school.decide(cycle_id, approve=False))


def _student_tools(server: MCPServer, school: School) -> None:
    """The student and its material: ask the served student, mark a captured session."""
    @_tool(server, READ)
    def ask_student(question: str,
                    max_tokens: Annotated[int, Field(ge=1, le=4096, description="longest answer")] = 256) -> Answer:
        """Ask the deployed student a question and get its answer, to see what it learned (needs a served model)."""
        with _explained():
            return Answer(answer=school.ask(question, max_tokens=max_tokens))

    @_tool(server, ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                   open_world_hint=False))
    def mark_session(session_id: Annotated[str, Field(description="a captured session's id")], good: bool,
                     note: str = "") -> Mark:
        """Say whether a captured agent session was good work: good sessions count twice in the next dataset,
        bad ones are left out."""
        with _explained():
            return Mark.model_validate(school.mark_session(session_id, good, note))


def _team_tools(server: MCPServer) -> None:
    """Team mode: on a member's data dir, the team school as its server answers (member.team_status)."""
    @_tool(server, ToolAnnotations(read_only_hint=True, open_world_hint=True))
    def team_status() -> TeamStatus:
        """The team school this data dir has joined, as the team's server answers: its status, the deployed
        student (model, checkpoint, since when, its verdict), the last cycle's verdict and the sessions each member
        shipped. `status` stays this data dir's own school; on the team's server itself `status` is the team
        school. Refused, with the reason, when this data dir has not joined a team or the server cannot be
        reached."""
        from app.core.team import member

        with _explained():
            return TeamStatus.model_validate(member.team_status())


def _experience_tools(server: MCPServer, store: Store) -> None:
    """The experience buffer's tools: rate an answer of the served student, count what the buffer holds."""
    @_tool(server, ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    def experience_feedback(
            experience: Annotated[str, Field(description="the answer's id: the X-Nightschool-Experience header the "
                                                         "built-in server sent with it")],
            rating: Annotated[Literal["up", "down"], Field(description="'up': a good answer, 'down': a bad one")],
            correction: Annotated[str | dict[str, Any] | None,
                                  Field(description="optional: the better answer, as text or an assistant message "
                                                    "{role, content, tool_calls}; it is validated before it may "
                                                    "train")] = None,
            note: Annotated[str, Field(description="optional: why, in a sentence")] = "") -> Feedback:
        """Rate one of the served student's answers. 'down' flags it for a teacher's correction; a correction you
        give is validated (it must parse, call the request's tools validly and end its turn) and, when accepted,
        trains the next cycle. A malformed call is refused with what was wrong."""
        with _explained():
            entry = buffer.feedback(store, experience, rating, correction, note, by="mcp")
        return Feedback.model_validate({k: v for k, v in entry.items() if k not in ("request", "answer")})

    @_tool(server, READ)
    def experience_summary() -> ExperienceSummary:
        """What the experience buffer holds: whether it records, entries by state, flagged entries by reason, and
        corrections by state (waiting ones need a person's review)."""
        with _explained():
            return ExperienceSummary(enabled=config.buffer(store).enabled, **buffer.counts(store))


def run_stdio(store: Store | None = None) -> None:
    """Serve on stdin/stdout until the client closes them (the SDK points fd 1 at stderr meanwhile; opening the
    store, which may migrate it, happens before that, so its prints are sent to stderr here)."""
    with contextlib.redirect_stdout(sys.stderr):
        server = build_server(store)
    server.run("stdio")


class HttpError(Explained):
    """The HTTP transport cannot start."""


def run_http(port: int = DEFAULT_PORT, host: str = "127.0.0.1", store: Store | None = None) -> None:
    """Serve streamable HTTP at http://host:port/mcp on loopback only; every request needs the bearer token.
    Port 0 picks a free port; the URL (and where the token is) goes to stderr once the socket listens."""
    import uvicorn

    if host not in LOOPBACK:
        raise HttpError(f"the MCP server listens on loopback only, not {host!r}",
                        why="its tools steer the school; only this machine's agents may reach them",
                        fix="use --host 127.0.0.1 (the default), localhost or ::1")
    sock = _listen(host, port)
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}{PATH}"
    access.token()  # made now, so the path printed below exists
    server = build_server(store, token_auth=True, url=f"http://{shown}:{port}")
    app = server.streamable_http_app(streamable_http_path=PATH, host=host)
    print(f"Nightschool MCP server at {url}\n"
          f"  send Authorization: Bearer <token>; the token is in {access.token_path()} "
          f"(`nightschool mcp token` prints it)", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise HttpError(f"cannot listen on {host}:{port}", why=exc.strerror or str(exc),
                        fix="pick another port with --port N (0: any free one)") from None
    sock.listen(128)
    return sock
