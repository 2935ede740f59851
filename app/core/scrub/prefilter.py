"""A Python regex as a Hyperscan byte pattern that matches wherever the original may (a superset), for one-pass gating.

Scrubbing runs a rule's Python pattern only where the rule could match; one Hyperscan pass over a text's UTF-8 bytes
says so for every rule at once. The byte pattern must never miss a text the Python one (Unicode, str) matches, so it
is built from Python's own parse of the pattern and widened wherever bytes and characters differ: every position
that can take a character takes any one non-ASCII character too (1-4 bytes of 0x80-0xFF), case-insensitive letters
take their other case and the non-ASCII letters Python folds onto them (KELVIN SIGN, LONG S, dotted and dotless I,
found by asking Python's own matcher), and what a byte pattern
cannot say (word boundaries, anchors, lookarounds) is dropped, which only widens it. The Python pattern still
decides every match: a prefilter hit only lets it run.
"""
from __future__ import annotations

import functools
import re
import re._constants as C  # noqa: N812 - the parser's opcode names
import re._parser as P  # noqa: N812

HIGH = set(range(128, 256))  # the bytes of non-ASCII characters in UTF-8 (all of them, lead and continuation)
ASCII = [chr(c) for c in range(128)]
CATEGORIES = {C.CATEGORY_DIGIT: r"\d", C.CATEGORY_NOT_DIGIT: r"\D", C.CATEGORY_SPACE: r"\s",
              C.CATEGORY_NOT_SPACE: r"\S", C.CATEGORY_WORD: r"\w", C.CATEGORY_NOT_WORD: r"\W"}


@functools.cache
def folds() -> dict[int, set[str]]:
    """{ord('k'): {'\u212a'}, ...}: the non-ASCII characters a case-blind ASCII letter matches, asked of Python's own
    matcher: one case-blind scan of every non-ASCII character for any ASCII letter (0.1 s; asking each character of
    each letter with re.fullmatch gave the same sets in 40 s, and every process that scrubs paid it at import), then
    each hit asked of each letter."""
    letters = [chr(c) for c in range(128) if chr(c).isalpha()]
    hits = set(re.findall("|".join(letters), "".join(map(chr, range(128, 0x110000))), re.IGNORECASE))
    return {ord(c): {h for h in hits if re.fullmatch(re.escape(c), h, re.IGNORECASE)} for c in letters}


class Unsupported(ValueError):
    """A construct with no byte superset here (a back-reference): the rule runs without a prefilter."""


def byte_superset(pattern: re.Pattern) -> str:
    """The Hyperscan pattern (bytes semantics) that matches every text `pattern` matches somewhere."""
    parsed = P.parse(pattern.pattern, pattern.flags)
    return _seq(list(parsed), parsed.state.flags)


def _seq(items: list, flags: int) -> str:
    return "".join(_item(op, av, flags) for op, av in items)


def _item(op, av, flags: int) -> str:
    if op in (C.AT, C.ASSERT, C.ASSERT_NOT):
        return ""  # dropped: only widens
    if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
        return _chars(*_unit(op, av, flags))
    if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
        low, high, sub = av
        sub = list(sub)
        unit = _unit(*sub[0], flags) if len(sub) == 1 and sub[0][0] in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN) \
            else None
        if unit is not None and unit[2]:  # one wide character repeated: one byte class, a non-ASCII character
            body = _class(unit[0] | HIGH)  # counted as its 2-4 bytes (so up to 4x as many)
            high = high if high == C.MAXREPEAT else 4 * high
        else:
            body = f"(?:{_seq(sub, flags)})"
        bound = ("*" if low == 0 else "+" if low == 1 else f"{{{low},}}") if high == C.MAXREPEAT \
            else f"{{{low},{high}}}"
        return body + bound
    if op is C.SUBPATTERN:
        _group, add, remove, sub = av
        return f"(?:{_seq(list(sub), (flags | add) & ~remove)})"
    if op is C.ATOMIC_GROUP:
        return f"(?:{_seq(list(av), flags)})"
    if op is C.BRANCH:
        return "(?:" + "|".join(_seq(list(alt), flags) for alt in av[1]) + ")"
    raise Unsupported(f"no byte superset for {op}")


def _unit(op, av, flags: int) -> tuple[set[int], set[str], bool]:
    """One character position: (ASCII codes, non-ASCII characters, whether any other non-ASCII character too)."""
    if op is C.LITERAL:
        return _literal(av, flags)
    if op is C.NOT_LITERAL:
        return set(range(128)) - _literal(av, flags)[0], set(), True
    if op is C.ANY:
        return set(range(128)) - (set() if flags & re.DOTALL else {10}), set(), True
    return _in(av, flags)


def _literal(code: int, flags: int) -> tuple[set[int], set[str], bool]:
    if code >= 128:
        return set(), {chr(code)}, bool(flags & re.IGNORECASE)
    return _folded({code}, flags)


def _folded(codes: set[int], flags: int) -> tuple[set[int], set[str], bool]:
    """ASCII codes and, case-blind, their other case and the non-ASCII letters that fold onto them."""
    if not flags & re.IGNORECASE:
        return codes, set(), False
    table = folds()
    letters = {c for c in codes if c in table}
    return codes | {ord(chr(c).swapcase()) for c in letters}, {u for c in letters for u in table[c]}, False


def _in(items: list, flags: int) -> tuple[set[int], set[str], bool]:
    negate = bool(items) and items[0][0] is C.NEGATE
    codes, extras, wide = set(), set(), False
    for op, av in items[1:] if negate else items:
        if op is C.LITERAL:
            more, more_extras, more_wide = _literal(av, flags)
        elif op is C.RANGE:
            low, high = av
            more, more_extras, more_wide = _folded(set(range(low, min(high, 127) + 1)), flags)
            more_wide = more_wide or high >= 128
        elif op is C.CATEGORY and av in CATEGORIES:
            escape = re.compile(CATEGORIES[av])
            more, more_extras, more_wide = {ord(c) for c in ASCII if escape.fullmatch(c)}, set(), True
        else:
            raise Unsupported(f"no byte superset for {op} {av} in a class")
        codes, extras, wide = codes | more, extras | more_extras, wide or more_wide
    if negate:
        return set(range(128)) - codes, set(), True  # a negated class takes non-ASCII characters it does not list
    return codes, extras, wide


def _chars(codes: set[int], extras: set[str], wide: bool) -> str:
    """One character: any of the ASCII codes, the listed non-ASCII ones, or (wide) any one non-ASCII character (a
    lead byte and up to three more: a few more byte strings than characters, never fewer)."""
    if wide:
        return _class(codes | HIGH) + "[\\x80-\\xff]{0,3}"
    parts = ([_class(codes)] if codes else []) + [_bytes(e) for e in sorted(extras)]
    if not parts:
        raise Unsupported("a character position that matches nothing")
    return parts[0] if len(parts) == 1 else f"(?:{'|'.join(parts)})"


def _bytes(char: str) -> str:
    return "".join(f"\\x{b:02x}" for b in char.encode())


def _class(codes: set[int]) -> str:
    """A byte class, written as ranges."""
    runs, ordered = [], sorted(codes)
    for code in ordered:
        if runs and code == runs[-1][1] + 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    return "[" + "".join(f"\\x{a:02x}" if a == b else f"\\x{a:02x}-\\x{b:02x}" for a, b in runs) + "]"
