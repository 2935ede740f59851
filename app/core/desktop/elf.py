"""The dynamic section of an ELF file, read in plain Python (`read_dynamic`): the libraries it needs and its runpath.
User machines need no binutils, and a read costs milliseconds; only the program headers are read, so stripped files
read the same."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple


@dataclass(frozen=True)
class Dynamic:
    """The dynamic section of an ELF file: the libraries it needs and where its own runpath points."""
    needed: tuple[str, ...]
    runpath: tuple[str, ...]


class _Header(NamedTuple):
    wide: bool  # ELFCLASS64
    order: str  # struct's byte order: "<" little-endian, ">" big-endian
    phoff: int
    phentsize: int
    phnum: int


def read_dynamic(path: Path) -> Dynamic | None:
    """DT_NEEDED and DT_RUNPATH/DT_RPATH of an ELF shared object or executable (None: not ELF, or no dynamic
    section). Reads the program headers only, so stripped files read the same."""
    with open(path, "rb") as f:
        header = _header(f.read(64))
        if header is None:
            return None
        loads, dynamic = _segments(f, header)
        if dynamic is None:
            return None
        entries = _dynamic_entries(f, header, *dynamic)
        strtab = next((value for tag, value in entries if tag == 5), None)  # DT_STRTAB (an address)
        base = next((offset + strtab - vaddr for vaddr, offset, filesz in loads
                     if strtab is not None and vaddr <= strtab < vaddr + filesz), None)
        if base is None:
            return Dynamic((), ())
        return _named(f, base, entries)


def _header(head: bytes) -> _Header | None:
    """Where the program headers are, from the ELF header (None: not ELF)."""
    if len(head) < 52 or head[:4] != b"\x7fELF":
        return None
    wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
    if wide:
        phoff, = struct.unpack_from(order + "Q", head, 32)
        phentsize, phnum = struct.unpack_from(order + "HH", head, 54)
    else:
        phoff, = struct.unpack_from(order + "I", head, 28)
        phentsize, phnum = struct.unpack_from(order + "HH", head, 42)
    return _Header(wide, order, phoff, phentsize, phnum)


def _segments(f: BinaryIO, header: _Header) -> tuple[list[tuple[int, int, int]], tuple[int, int] | None]:
    """The PT_LOAD segments as (vaddr, offset, filesz), and the PT_DYNAMIC segment as (offset, filesz) or None."""
    f.seek(header.phoff)
    table = f.read(header.phentsize * header.phnum)
    loads, dynamic = [], None
    for i in range(header.phnum):
        if header.wide:
            kind, _, offset, vaddr, _, filesz = struct.unpack_from(header.order + "IIQQQQ", table, i * header.phentsize)
        else:
            kind, offset, vaddr, _, filesz = struct.unpack_from(header.order + "IIIII", table, i * header.phentsize)
        if kind == 1:  # PT_LOAD
            loads.append((vaddr, offset, filesz))
        elif kind == 2:  # PT_DYNAMIC
            dynamic = (offset, filesz)
    return loads, dynamic


def _dynamic_entries(f: BinaryIO, header: _Header, offset: int, size: int) -> list[tuple[int, int]]:
    """The dynamic section's (tag, value) entries."""
    f.seek(offset)
    raw = f.read(size)
    fmt, step = (header.order + "qQ", 16) if header.wide else (header.order + "iI", 8)
    return [struct.unpack_from(fmt, raw, at) for at in range(0, len(raw) - step + 1, step)]


def _named(f: BinaryIO, base: int, entries: list[tuple[int, int]]) -> Dynamic:
    """The needed libraries and runpath entries, read from the string table at file offset `base`."""
    needed, runpath = [], []
    for tag, value in entries:
        if tag == 0:  # DT_NULL
            break
        if tag == 1:  # DT_NEEDED
            needed.append(_string(f, base + value))
        elif tag in (15, 29):  # DT_RPATH, DT_RUNPATH
            runpath.extend(p for p in _string(f, base + value).split(":") if p)
    return Dynamic(tuple(needed), tuple(runpath))


def _string(f: BinaryIO, at: int) -> str:
    """The NUL-terminated string at a file offset."""
    f.seek(at)
    data = f.read(256)
    while b"\0" not in data:
        more = f.read(256)
        if not more:
            break
        data += more
    return data.split(b"\0", 1)[0].decode("utf-8", "replace")


def runpath_dirs(path: Path, dyn: Dynamic) -> list[Path]:
    """The folders a file's runpath names, $ORIGIN resolved to the file's own folder."""
    return [Path(p.replace("$ORIGIN", str(path.parent)).replace("${ORIGIN}", str(path.parent)))
            for p in dyn.runpath]
