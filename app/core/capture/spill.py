"""A huge transcript's big texts kept in a temporary file while it is read, scrubbed and written: memory then grows
with its records, not with their text (a Part reads its text back each time it is asked for it)."""
from __future__ import annotations

import json
import tempfile
import threading
from pathlib import Path
from typing import Any

import lz4.block

from app.core.capture.rows import _dumps  # the parts' own encoder: orjson, else the standard one
from app.core.capture.session import Part

SPILL_FILE_BYTES = 32 * 1024**2  # a transcript file from this size on keeps its parts' big texts in a Spill
SPILL_CHARS = 1024  # a text (or a tool input's JSON) from this size on goes to the file


class Spill:
    """An unnamed temporary file of LZ4 blocks (deleted when closed, or by the system if the process dies)."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = str(directory or tempfile.gettempdir())
        self.file = tempfile.TemporaryFile(dir=self.directory, prefix="nightschool-spill-", buffering=0)  # noqa: SIM115
        self.end, self.kept, self.closed = 0, 0, False
        self.lock = threading.Lock()

    def put(self, data: bytes) -> tuple[int, int]:
        """Keep bytes; where to find them (offset, length)."""
        block = lz4.block.compress(data, store_size=True)
        with self.lock:  # seek + write rather than os.pwrite, which Windows lacks
            at = self.end
            self.file.seek(at)
            view = memoryview(block)
            try:
                while view:  # a raw write may take part of it
                    view = view[self.file.write(view):]
            except OSError as exc:  # a full disk: say where, the file is read again on the next look
                raise OSError(exc.errno, f"{exc.strerror} (setting aside a huge transcript's texts in "
                                         f"{self.directory})") from exc
            self.end += len(block)
            self.kept += len(data)
        return at, len(block)

    def get(self, ref: tuple[int, int]) -> bytes:
        at, size = ref
        with self.lock:
            self.file.seek(at)
            block = self.file.read(size)
        return lz4.block.decompress(block)

    def part(self, part: Part) -> Part:
        """The part itself when it is small or spilled already, else a SpilledPart holding the same values."""
        if isinstance(part, SpilledPart) or (len(part.text) < SPILL_CHARS and not _big_input(part.tool_input)):
            return part
        return SpilledPart(part, self)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.file.close()


def _big_input(value: Any) -> bool:
    """A tool input worth spilling: a dict or list (cheap checks first, its JSON's size last)."""
    if not isinstance(value, dict | list) or not value:
        return False
    return len(_dumps(value)) >= SPILL_CHARS


class SpilledPart(Part):
    """A Part whose big text and tool input live in a Spill: read back when asked for, kept again when set (the
    scrubber sets them); the other fields are plain attributes. Equal to another SpilledPart with the same values."""

    def __init__(self, part: Part, spill: Spill) -> None:  # not the dataclass __init__
        self._spill = spill
        self.kind, self.tool_name, self.call_id, self.is_error = part.kind, part.tool_name, part.call_id, part.is_error
        self.text, self.tool_input = part.text, part.tool_input

    @property
    def text(self) -> str:
        held = self._text
        return self._spill.get(held).decode("utf-8", "surrogatepass") if isinstance(held, tuple) else held

    @text.setter
    def text(self, value: str) -> None:
        self._chars = len(value)
        self._text = self._spill.put(value.encode("utf-8", "surrogatepass")) if self._chars >= SPILL_CHARS else value

    @property
    def chars(self) -> int:
        return self._chars

    @property
    def tool_input(self) -> Any:
        held = self._input
        return json.loads(self._spill.get(held[1])) if isinstance(held, tuple) and held[0] is _SPILLED else held

    @tool_input.setter
    def tool_input(self, value: Any) -> None:
        big = isinstance(value, dict | list) and value and len(data := _dumps(value)) >= SPILL_CHARS
        self._input = (_SPILLED, self._spill.put(data)) if big else value


_SPILLED = object()  # marks a tool input held in the spill (a tool input itself may be a tuple-like JSON list)
