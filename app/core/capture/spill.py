"""A huge transcript's records kept in a temporary file while it is read, scrubbed and written: memory then stays
about the same whatever the file's size (messages are read back from the file each time they are gone through)."""
from __future__ import annotations

import os
import pickle
import tempfile
import threading
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import lz4.block

from app.core.capture.session import Message

SPILL_FILE_BYTES = 32 * 1024**2  # a transcript file from this size on keeps its records in a Spill
BUFFER_BYTES = 1024**2  # blocks gathered in memory before they are written
PREAD = hasattr(os, "pread")  # not on Windows: seek + read there


class Spill:
    """An unnamed temporary file of LZ4 blocks (deleted when closed, or by the system if the process dies); blocks
    are written a buffer at a time."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = str(directory or tempfile.gettempdir())
        self.file = tempfile.TemporaryFile(dir=self.directory, prefix="nightschool-spill-", buffering=0)  # noqa: SIM115
        self.end, self.kept, self.closed = 0, 0, False
        self.written = 0  # the blocks before this offset are in the file, the rest in `pending`
        self.pending = bytearray()
        self.lock = threading.Lock()

    def put(self, data: bytes) -> tuple[int, int]:
        """Keep bytes; where to find them (offset, length)."""
        block = lz4.block.compress(data, store_size=True)
        with self.lock:
            at = self.end
            self.pending += block
            self.end += len(block)
            self.kept += len(data)
            if len(self.pending) >= BUFFER_BYTES:
                self._flush()
        return at, len(block)

    def _flush(self) -> None:
        self.file.seek(self.written)  # seek + write rather than os.pwrite, which Windows lacks
        view = memoryview(self.pending)
        try:
            while view:  # a raw write may take part of it
                view = view[self.file.write(view):]
        except OSError as exc:  # a full disk: say where, the file is read again on the next look
            raise OSError(exc.errno, f"{exc.strerror} (setting aside a huge transcript's records in "
                                     f"{self.directory})") from exc
        finally:
            view.release()
        self.written = self.end
        self.pending = bytearray()

    def get(self, ref: tuple[int, int]) -> bytes:
        at, size = ref
        if at < self.written and PREAD:  # one call, no seek to share
            return lz4.block.decompress(os.pread(self.file.fileno(), size, at))
        with self.lock:
            if at >= self.written:  # still in the buffer
                block = bytes(self.pending[at - self.written:at - self.written + size])
            else:
                self.file.seek(at)
                block = self.file.read(size)
        return lz4.block.decompress(block)

    def put_value(self, value: Any) -> tuple[int, int]:
        """Keep any value pickle keeps exactly (messages, parts, their tool inputs: huge ints, lone surrogates)."""
        return self.put(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))

    def value(self, ref: tuple[int, int]) -> Any:
        return pickle.loads(self.get(ref))  # noqa: S301 - this process's own file

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.pending = bytearray()
            self.file.close()


class SpilledMessages:
    """A list of messages held in a Spill, 16 bytes each in memory: read back one at a time when indexed or gone
    through, kept again when set (the scrubber's pieces). Compares equal to a list of the same messages."""

    def __init__(self, spill: Spill, messages: Iterable[Message] = ()) -> None:
        self.spill, self.at, self.size = spill, array("q"), array("q")
        for message in messages:
            self.append(message)

    def append(self, message: Message) -> None:
        self.refer(self.spill.put_value(message))

    def refer(self, ref: tuple[int, int]) -> None:
        """Add a message the spill holds already."""
        self.at.append(ref[0])
        self.size.append(ref[1])

    def __len__(self) -> int:
        return len(self.at)

    def _one(self, index: int) -> Message:
        return self.spill.value((self.at[index], self.size[index]))

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self._one(k) for k in range(*index.indices(len(self)))]
        return self._one(range(len(self))[index])  # a negative index too; IndexError past the end

    def __setitem__(self, index: int | slice, value: Any) -> None:
        if not isinstance(index, slice):
            index, value = slice(index, index + 1 if index != -1 else None), [value]
        places = range(*index.indices(len(self)))
        value = list(value)
        if len(value) != len(places):
            raise ValueError(f"{len(value)} messages cannot replace {len(places)} of a spilled list")
        for k, message in zip(places, value):
            data, ref = pickle.dumps(message, pickle.HIGHEST_PROTOCOL), (self.at[k], self.size[k])
            if data != self.spill.get(ref):  # kept again only when it changed (most of what is scrubbed does not)
                self.at[k], self.size[k] = self.spill.put(data)

    def __iter__(self) -> Iterator[Message]:
        return (self._one(k) for k in range(len(self)))

    def __reversed__(self) -> Iterator[Message]:
        return (self._one(k) for k in reversed(range(len(self))))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SpilledMessages | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment] - mutable, like a list

    def __repr__(self) -> str:
        return f"SpilledMessages({len(self)} messages)"
