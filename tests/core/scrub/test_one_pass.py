"""The one-pass gate (Hyperscan) scrubs exactly as the per-pattern scan did: planted secrets, Unicode edge cases,
fuzzed fragments and every real-world fixture transcript give the same text and the same counts."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from app.core.scrub.prefilter import LOWER_TO_ASCII, RULE_KEY, byte_superset, lowered_literal
from app.core.scrub.scrubber import Scrubber, _rules
from tests.conftest import SHARED
from tests.core.capture.test_scrub import PLANTED

HOT = re.compile(rb"(?i)secret|password|api_?key|bearer|token\W*[:=]|://[^/\s]*@|BEGIN [A-Z ]*PRIVATE|AKIA|sk-|ghp_|eyJ")
REAL = [SHARED / "fixtures" / "real-world", SHARED / "fixtures" / "real-world-2"]
# Pieces of every rule's gate and pattern, and the characters where Python's str regexes and a byte search differ:
# KELVIN SIGN and LONG S fold onto k and s, dotted/dotless I onto i, Arabic-Indic digits are \d, EM SPACE and
# U+001C are \s, é is a word character.
FRAGMENTS = ["sk-ant-", "sk-", "proj-", "AIza", "ghp_", "github_pat_", "aws_secret_access_key", "AWS_SECRET_ACCESS_KEY",
             "aws_key", "Bearer ", "bearer\t", "https://", "://", "user", ":", "@", "=", " = ", '"', "'", "TOKEN", "token",
             "Secret", "client_secret", "PASSWORD", "API_KEY", "apikey", "Credentials", "AKIA", "A3T", "ASIA", "xoxb-",
             "hooks.slack.com/services/T", "/B", "eyJ", "-us", "SG.", "AccountKey=", "glpat-", "gldt-", "_authToken=",
             "//registry.npmjs.org/:", "npm_", "T3BlbkFJ", "sq0csp-", "pypi-AgENdGVzdC5weXBpLm9yZw", "k_live_", "AKC",
             "AP", "APE", "AC", "SK", "MTI", ".", "-", "_", "/", "+", "0123456789", "12345678", "abcdefghij",
             "ABCDEFGHIJ", "abcdef0123456789abcdef0123456789", "Zm9vYmFyYmF6cXV4cXV1eHh5enp5", "\n", " ",
             "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "\u212a", "\u017f", "\u0130",
             "\u0131", "\u0663\u0664\u0665", "\u2003", "\x1c", "\u00e9", "\U0001f600", "\ud800", "<SECRET:jwt>", "~"]


def both(text: str) -> tuple[str, dict, str, dict]:
    new, old = Scrubber(home="/home/alice"), Scrubber(home="/home/alice")
    return new.text(text), new.report.counts, old.text_per_pattern(text), old.report.counts


@pytest.mark.parametrize("kind", sorted(PLANTED))
def test_planted_secrets_are_found_exactly_as_before(kind):
    new, new_counts, old, old_counts = both(PLANTED[kind] + " and again: " + PLANTED[kind])
    assert (new, new_counts) == (old, old_counts)
    assert new_counts.get(kind) == 2, f"{kind} is no longer replaced: {new!r}"


@pytest.mark.parametrize("text", [
    "aws_secret_access_\u212aey = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",  # KELVIN SIGN in a (?i) rule's name
    "BEARER abcdef0123456789\u017fbcdef0123",  # LONG S is no Bearer-token character: the match stops there
    "b\u0130arer " + "x" * 20, "client_secret: '\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9'",
    "MTI\u0663" + "a" * 21 + "." + "b" * 6 + "." + "c" * 27, ":" + "\u0663" * 35,
    "xoxb-\u0663\u0664-abc", "AWS_KEY = '" + "\u0663" * 40 + "'", "password\u2003=\u2003hunter2hunter2",
])
def test_unicode_edges_match_the_per_pattern_scan(text):
    new, new_counts, old, old_counts = both(text)
    assert (new, new_counts) == (old, old_counts)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=40))
def test_fuzzed_fragments_match_the_per_pattern_scan(pieces):
    new, new_counts, old, old_counts = both("".join(pieces))
    assert (new, new_counts) == (old, old_counts)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=30))
def test_each_rule_prefilter_opens_wherever_its_pattern_matches(pieces):
    """The byte superset never misses a text the Python pattern matches (the rule would be skipped)."""
    text = "".join(pieces)
    rules, one_pass = _rules()
    found = one_pass.found(text)
    for index, (kind, pattern, _group, _gate) in enumerate(rules):
        if pattern.search(text):
            assert one_pass.may_match(index, found), f"{kind} {pattern.pattern!r} matches but its prefilter is shut"


def test_every_rule_has_a_prefilter():
    """A rule without one still runs (only slower); today every rule's pattern has a byte superset."""
    rules, one_pass = _rules()
    assert sorted(one_pass.rules) == list(range(len(rules)))
    assert all(RULE_KEY % i in one_pass.keys for i in one_pass.rules)
    assert byte_superset(re.compile(r"(?i)k")) == r"(?:[\x4b\x6b]|\xe2\x84\xaa)"  # KELVIN SIGN folds onto k


def test_real_world_fixtures_scrub_exactly_as_before():
    """Every real transcript's raw text (JSON escapes and all: its start, middle and end, 24 KB each, and every line
    that holds a secret-shaped name, so the test stays fast) gives the same scrubbed text and counts."""
    files = sorted(f for base in REAL for f in base.rglob("*") if f.suffix in (".jsonl", ".json"))
    if not files:
        pytest.skip(f"the shared real-world fixtures are not in {SHARED / 'fixtures'}")
    new, old = Scrubber(home="/home/alice"), Scrubber(home="/home/alice")
    window = 24 * 1024
    for path in files:
        data = path.read_bytes()
        middle = len(data) // 2
        hot = [line[:window] for line in data.splitlines() if HOT.search(line)]
        for chunk in (data[:window], data[middle:middle + window], data[-window:], *hot):
            text = chunk.decode("utf-8", errors="surrogateescape")
            assert new.text(text) == old.text_per_pattern(text), f"{path} scrubs differently with the one-pass gate"
    assert new.report.counts == old.report.counts
    assert new.report.total > 0  # the fixtures do hold secret-shaped strings: the comparison saw replacements


def test_the_case_fold_table_is_what_python_folds_and_costs_nothing_at_import():
    """The non-ASCII characters Python's case-blind matcher takes for ASCII letters (KELVIN SIGN, LONG S, dotted and
    dotless I), found on first use: importing the scrubber once cost every process 40 s computing it."""
    import subprocess
    import sys

    from app.core.scrub.prefilter import folds

    found = {chr(c): t for c, t in folds().items() if t}
    assert found == {"I": {"\u0130", "\u0131"}, "K": {"\u212a"}, "S": {"\u017f"},
                     "i": {"\u0130", "\u0131"}, "k": {"\u212a"}, "s": {"\u017f"}}
    fresh = subprocess.run([sys.executable, "-c", "from app.core.scrub import scrubber, prefilter; "
                            "print(prefilter.folds.cache_info().currsize)"], capture_output=True, text=True, check=True)
    assert fresh.stdout.strip() == "0"


def test_the_characters_that_lower_onto_ascii_are_the_ones_the_gate_knows():
    """A lower-case gate literal is looked for in the text itself (prefilter.lowered_literal): every character whose
    lower() holds an ASCII one must be in LOWER_TO_ASCII, with what it lowers to."""
    lowered = ((c, c.lower()) for c in map(chr, range(128, 0x110000)))
    assert {c: low for c, low in lowered if any(x.isascii() for x in low)} == LOWER_TO_ASCII
    assert all(c.lower() in (c, c.swapcase()) for c in map(chr, range(128)))  # ASCII lowers within ASCII


@pytest.mark.parametrize("literal", ["bearer", "token", "aws", "api_key", "credential"])
def test_a_lower_case_literal_is_found_where_lower_finds_it(literal):
    """prefilter.lowered_literal on the bytes opens exactly where `literal in text.lower()` does."""
    import hyperscan

    database = hyperscan.Database()
    database.compile(expressions=[lowered_literal(literal).encode()], ids=[0], elements=1,
                     flags=[hyperscan.HS_FLAG_SINGLEMATCH])
    spellings = [literal, literal.upper(), literal.title(), literal.replace("k", "\u212a"),
                 literal.replace("i", "\u0130"), literal[:-1] + "\u0130", "x" + literal.upper() + "\u0307y",
                 literal.replace("s", "\u017f"), literal[:2] + "\u0131" + literal[3:], literal[:-1]]
    for text in spellings:
        hits = []
        database.scan(text.encode("utf-8", "surrogatepass"), match_event_handler=lambda *_a: hits.append(1))
        assert bool(hits) == (literal in text.lower()), (literal, text)
