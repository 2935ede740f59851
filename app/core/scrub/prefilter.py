"""The scrubber's gate: one Hyperscan pass (`OnePass`) over byte patterns that match wherever a rule's regex may.

Scrubbing runs a rule's Python pattern only where the rule could match; one Hyperscan pass over a text's UTF-8 bytes
says so for every rule at once. The byte pattern must never miss a text the Python one (Unicode, str) matches, so it
is built from Python's own parse of the pattern and widened wherever bytes and characters differ: every position
that can take a character takes any one non-ASCII character too (1-4 bytes of 0x80-0xFF), case-insensitive letters
take their other case and the non-ASCII letters Python folds onto them (KELVIN SIGN, LONG S, dotted and dotless I,
found by asking Python's own matcher), and what a byte pattern
cannot say (word boundaries, anchors, lookarounds) is dropped, which only widens it. The Python pattern still
decides every match: a prefilter hit only lets it run. A gate's lower-case literal is looked for in the text as it is
(`lowered_literal`), not in a lower-cased copy.
"""
from __future__ import annotations

import functools
import re
import re._constants as C  # noqa: N812 - the parser's opcode names
import re._parser as P  # noqa: N812
import threading
from typing import Any

import hyperscan

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


# The non-ASCII characters whose str.lower() holds an ASCII character (Python 3.11's Unicode database; the test
# test_one_pass.py asks every character again): a gate that looks for a literal in a text's lower() finds it there
LOWER_TO_ASCII = {"\u0130": "i\u0307", "\u212a": "k"}


def lowered_literal(literal: str) -> str:
    """The Hyperscan pattern (bytes) that matches a text's UTF-8 wherever `literal` (ASCII, lower case) is in the
    text's lower(): each letter in either case, or a character that lowers onto it (KELVIN SIGN for k; a dotted
    capital I lowers to i and a combining dot, so it can only end the literal)."""
    out = []
    for j, char in enumerate(literal):
        options = [re.escape(c) for c in dict.fromkeys((char, char.upper()))]
        for other, lowered in LOWER_TO_ASCII.items():
            if lowered == char or (j == len(literal) - 1 and lowered.startswith(char)) \
                    or (j == 0 and lowered.endswith(char)) or (len(literal) == 1 and char in lowered):
                options.append(_bytes(other))
        out.append(options[0] if len(options) == 1 else f"(?:{'|'.join(options)})")
    return "".join(out)


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


class OnePass:
    """What ~60 substring scans and a regex search per rule used to find, in one Hyperscan pass over a text's UTF-8
    bytes: which gate literals occur (the lower-case ones as in the text's lower(), without making it:
    prefilter.lowered_literal), which probes and which rules may match (prefilter.byte_superset), each reported once
    however often it occurs."""

    def __init__(self, rules: list[tuple[str, re.Pattern, int, Any]]) -> None:  # (kind, pattern, group, Gate)
        gates = [gate for _kind, _pattern, _group, gate in rules]
        self.exact = sorted({k for g in gates for k in (*g.literals, *g.also)})
        self.probes = sorted({g.probe.pattern for g in gates if g.probe is not None})
        self.lower = sorted({k for g in gates for k in g.lower})
        if not all(k.isascii() for k in (*self.exact, *self.lower)):
            raise ValueError(f"gate literals {[k for k in (*self.exact, *self.lower) if not k.isascii()]} are not "
                             "ASCII: the one-pass gate searches UTF-8 bytes; write the gate with ASCII literals (or a "
                             "probe pattern)")
        self.rules: dict[int, str] = {}  # rule index -> its byte superset (rules without one always run)
        for index, (_kind, pattern, _group, _gate) in enumerate(rules):
            try:
                self.rules[index] = byte_superset(pattern)
            except Unsupported:
                continue
        lowered = [lowered_literal(k) for k in self.lower]  # the lower-case literals, found in the text itself
        self.keys = [*self.exact, *self.probes, *(RULE_KEY % i for i in self.rules),
                     *(LOWER_KEY + k for k in self.lower)]
        try:
            exact = _database(self.exact, self.probes, [*self.rules.values(), *lowered])
        except hyperscan.error:  # a superset Hyperscan refuses (matches empty, too large): that rule always runs
            self.rules = {i: e for i, e in self.rules.items() if _compiles(e)}
            self.keys = [*self.exact, *self.probes, *(RULE_KEY % i for i in self.rules),
                         *(LOWER_KEY + k for k in self.lower)]
            exact = _database(self.exact, self.probes, [*self.rules.values(), *lowered])
        self._compiled = hyperscan.dumpb(exact)
        self._databases = threading.local()  # a database's scratch space serves one scan at a time: one per thread

    def __getstate__(self) -> dict:
        """What a prepare worker is sent (capture/pool): the compiled database, not this process' loaded copies."""
        return {k: v for k, v in self.__dict__.items() if k != "_databases"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _databases=threading.local())

    def found(self, text: str) -> set[str]:
        """The exact literals in text, the probes (by their source), the rules (RULE_KEY) that may match it and the
        lower-case literals in its lower() (LOWER_KEY, prefilter.lowered_literal: no lower-cased copy is made)."""
        database = getattr(self._databases, "database", None)
        if database is None:
            database = self._databases.database = _loaded(self._compiled)
        hits: set[str] = set()
        keys = self.keys  # ASCII, so a key is in the UTF-8 bytes exactly where it is in the text
        database.scan(text.encode("utf-8", "surrogatepass"),
                      match_event_handler=lambda key, _start, _end, _flags, _context: hits.add(keys[key]))
        return hits

    @staticmethod
    def lowered(found: set[str]) -> set[str]:
        """The lower-case gate literals among what `found` found."""
        return {k[1:] for k in found if k[0] == LOWER_KEY}

    def may_match(self, index: int, found: set[str]) -> bool:
        return index not in self.rules or RULE_KEY % index in found


RULE_KEY = "\x00rule %d"  # a rule's prefilter among the keys (no literal holds a NUL)
LOWER_KEY = "\x01"  # before a lower-case literal among the keys


def _loaded(compiled: bytes | None) -> hyperscan.Database | None:
    """A compiled database for this thread, with its own scratch space."""
    if compiled is None:
        return None
    database = hyperscan.loadb(compiled, hyperscan.HS_MODE_BLOCK)
    database.scratch = hyperscan.Scratch(database)
    return database


def _compiles(expression: str) -> bool:
    try:
        _database([], [], [expression])
        return True
    except hyperscan.error:
        return False


def _database(keys: list[str], probes: list[str] = (), supersets: list[str] = ()) -> hyperscan.Database | None:
    expressions = [re.escape(k).encode() for k in keys] + [_bytes_superset(p).encode() for p in probes] + \
        [e.encode() for e in supersets]
    if not expressions:
        return None
    database = hyperscan.Database()
    database.compile(expressions=expressions, ids=list(range(len(expressions))), elements=len(expressions),
                     flags=[hyperscan.HS_FLAG_SINGLEMATCH] * len(expressions))
    return database


NON_ASCII_CHAR = r"[\xc0-\xff][\x80-\xbf]{1,3}"  # one non-ASCII character in UTF-8


def _bytes_superset(pattern: str) -> str:
    """A probe's pattern for a byte search that matches wherever Python's (Unicode) one does: a class holding `\\d`
    (Unicode digits in Python) also takes any non-ASCII character. Probes may use nothing else Unicode-aware."""
    out = re.sub(r"\[([^\]]*)\\d([^\]]*)\]", lambda m: f"(?:[{m[1]}0-9{m[2]}]|{NON_ASCII_CHAR})", pattern)
    if re.search(r"\\[dDwWsSbB]|\(\?i", out):
        raise ValueError(f"the probe {pattern!r} uses a Unicode-aware escape the byte search cannot mirror; write it "
                         "with explicit ASCII classes (\\d only inside [...])")
    return out
