"""What a dataset build is asked to do: the base model, filters, windows, splits, replay, corrections (pydantic, saved
in the manifest)."""
from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field

# The defaults below are the only ones: the CLI's options and the GUI form's initial values read them from here.
Mode = Literal["auto", "full", "incremental"]
MODES: tuple[str, ...] = get_args(Mode)
# turns: whole turns packed into each window (a decision may sit anywhere in it); decisions: one window ending at each
# teacher action (tool call or text answer), its context cut from the left to fit (datasets/windows)
Windows = Literal["turns", "decisions"]
WINDOWS: tuple[str, ...] = get_args(Windows)


class Filters(BaseModel):
    """Session filters, applied in this order; each reports how many it removed."""

    # abandoned = ended on a request, a pending call or an unanswered result. False: keep its turns up to the last
    # completed action (the unfinished tail is cut); True: drop the whole session
    drop_abandoned: bool = False
    drop_errored: bool = True  # ended on a failed tool call
    min_tool_calls: int = Field(1, ge=0)
    min_steps: int = Field(2, ge=0)  # assistant messages: a multi-step workflow has at least this many
    require_recovery: bool = False  # keep only sessions where an error was followed by a successful retry
    min_reasoning: int = Field(0, ge=0)  # reasoning markers + self-corrections + constraints + pruning
    include_subagents: bool = True  # sub-agent sessions become examples of their own
    near_duplicate: float = Field(0.85, ge=0.0, le=1.0)  # MinHash Jaccard at or above this is a duplicate; 0 = off
    min_tokens: int = Field(32, ge=0)  # an example shorter than this is dropped


class BuildConfig(BaseModel):
    """One build request. `mode` full = every eligible session; incremental = sessions no earlier dataset of this
    base model used (with `learned_from`: none of those datasets trained or validated on, and not held out), plus
    `replay` share of examples replayed from earlier ones. Either way `test_share` of the new
    sessions joins the base model's held-out set for ever, and the test split is the whole held-out set so far.
    Accepted corrections (incremental: those no earlier dataset of this base model holds) join the train split, up
    to `corrections_share` of its new examples (at least `corrections_min`), before the replay share is counted."""

    name: str | None = None
    base_model: str = "default"
    mode: Mode = "auto"  # auto: incremental when an earlier dataset exists
    # the datasets whose train/val sessions (and corrections) an incremental build leaves out; None: every earlier one.
    # A cycle names those its school trained on, so a dataset built by hand and never trained uses nothing up
    learned_from: list[str] | None = None
    max_length: int = Field(2048, ge=64)
    windows: Windows = "turns"
    val_share: float = Field(0.1, ge=0.0, lt=0.5)
    test_share: float = Field(0.1, ge=0.0, lt=0.5)
    replay: float = Field(0.3, ge=0.0, lt=1.0)  # share of the new dataset replayed from earlier ones
    corrections: bool = True  # accepted corrections of the student's answers join the train split
    # the most of the new train examples corrections may take; the rest wait for the next build
    corrections_share: float = Field(0.3, ge=0.0, lt=1.0)
    corrections_min: int = Field(5, ge=0)  # corrections a build may take whatever the share (few new sessions)
    thinking: bool = True  # keep the agent's thinking as <think>…</think> before its answer
    max_tool_output: int = Field(2000, ge=0)  # characters of a tool result kept (0 = all)
    seed: int = 0
    filters: Filters = Field(default_factory=Filters)
