"""Scrubbing: planted secrets in text, thinking, tool inputs and outputs become typed placeholders; home is `~`."""
from __future__ import annotations

import json

import pytest

from app.core.capture.session import Message, Part, Session
from app.core.scrub.scrubber import Scrubber

PLANTED = {
    "aws_access_key": 'aws_key = "AKIAIOSFODNN7EXAMPLE"',
    "github_token": "token ghp_1234567890abcdefghijklmnopqrstuvwxyzAB here",
    "bearer_token": 'curl -H "Authorization: Bearer abcdef0123456789abcdef0123456789" https://api.example.com',
    "url_password": "git clone https://deploy:Sup3rS3cretPw@github.com/org/repo.git",
    "env_value": "STRIPE_API_KEY=live_0123456789abcdef\nDEBUG=true",
    "secret_value": '{"client_secret": "f00dbabe12345678"}',
    "anthropic_key": "ANTHROPIC_API_KEY is sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789",
    "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
    "aws_secret_key": "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "google_api_key": "key=AIzaSyA1234567890abcdefghijklmnopqrstuv",
}
SECRET_VALUES = ["AKIAIOSFODNN7EXAMPLE", "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB", "abcdef0123456789abcdef0123456789",
                 "Sup3rS3cretPw", "live_0123456789abcdef", "f00dbabe12345678", "sk-ant-api03-abcdefghijklmnop",
                 "b3BlbnNzaC1rZXktdjEAAAAA", "wJalrXUtnFEMI/K7MDENG", "AIzaSyA1234567890abcdefghij"]


@pytest.mark.parametrize("kind", sorted(PLANTED))
def test_each_kind_becomes_its_placeholder(kind):
    scrubber = Scrubber(home="/home/alice")
    out = scrubber.text(PLANTED[kind])
    assert f"<SECRET:{kind}>" in out, out
    assert not any(v in out for v in SECRET_VALUES)
    assert scrubber.report.counts.get(kind) == 1


def test_ordinary_text_is_left_alone():
    text = "Let me read the token handling code; passwords are hashed with bcrypt. See docs/secrets.md."
    scrubber = Scrubber(home="/home/alice")
    assert scrubber.text(text) == text and scrubber.report.total == 0


def test_home_path_is_normalised_but_not_a_longer_name():
    scrubber = Scrubber(home="/home/alice")
    assert scrubber.text("/home/alice/src/app.py and /home/alicebob/x") == "~/src/app.py and /home/alicebob/x"


def test_a_whole_session_is_scrubbed_everywhere():
    secrets = list(PLANTED.values())
    msg_user = Message("user", [Part("text", secrets[0])])
    msg_asst = Message("assistant", [Part("thinking", secrets[1]),
                                     Part("tool_call", tool_name="Bash", call_id="c1",
                                          tool_input={"command": secrets[3], "env": [{"k": secrets[2]}]})])
    msg_tool = Message("tool", [Part("tool_result", secrets[4] + "\n" + secrets[7], call_id="c1")])
    branch = [Message("user", [Part("text", secrets[5])])]
    sub = Session("claude-code", "sub", "/home/alice/.claude/x.jsonl",
                  messages=[Message("assistant", [Part("text", secrets[6])])])
    session = Session("claude-code", "s1", "/home/alice/.claude/projects/p/s1.jsonl", cwd="/home/alice/proj",
                      messages=[msg_user, msg_asst, msg_tool], abandoned=[branch], subagents=[sub])
    scrubber = Scrubber(home="/home/alice")
    scrubber.session(session)
    dumped = json.dumps([[p.__dict__ for m in b for p in m.parts]
                         for b in [session.messages, *session.abandoned, sub.messages]])
    assert not any(v in dumped for v in SECRET_VALUES), dumped
    assert session.cwd == "~/proj" and session.source_path.startswith("~/.claude")
    assert scrubber.report.total >= 8


def test_reader_strips_a_byte_order_mark_and_waits_for_a_half_written_line(tmp_path):
    from app.core.base.lines import read_jsonl

    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\r\n{"b": "\xff"}\n{"c":')
    first = read_jsonl(path)
    assert [r.data for r in first.records] == [{"a": 1}, {"b": "\ufffd"}] and not first.problems
    with path.open("ab") as fh:
        fh.write(b' 3}\n')
    more = read_jsonl(path, first.end_offset, first.lines + 1)
    assert [(r.line, r.data) for r in more.records] == [(3, {"c": 3})]


def test_batched_scrubbing_never_merges_strings_and_counts_each_secret_once():
    scrubber = Scrubber(home="/home/me")
    # a key block split over two strings: one pass over the joined text would swallow the separator
    values = ["-----BEGIN RSA PRIVATE KEY-----\nMIIE", "abc\n-----END RSA PRIVATE KEY-----", "ok ghp_" + "a" * 36]
    out = scrubber.texts(values)
    assert len(out) == 3 and out[0].startswith("-----BEGIN") and out[2] == "ok <SECRET:github_token>"
    assert scrubber.report.counts == {"github_token": 1}
    assert scrubber.texts(["/home/me/x", "AKIAIOSFODNN7EXAMPLE"]) == ["~/x", "<SECRET:aws_access_key>"]
