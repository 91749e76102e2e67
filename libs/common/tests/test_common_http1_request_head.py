"""RequestLineCheck and split_target: the head checks httptools leaves to the server."""

from __future__ import annotations

import pytest

from flexinfer_common.http1.request_head import RejectedError, RequestLineCheck, split_target


@pytest.mark.parametrize(
    "line",
    [
        b"GET / HTTP/1.1\r\n",
        b"\r\n\r\nPOST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\n",
        b"GET http://a/b HTTP/1.0\r\n",
    ],
)
def test_well_formed_lines_pass(line: bytes) -> None:
    """One space between parts, visible target, optional empty lines before."""
    check = RequestLineCheck()
    check.feed(line)
    assert not check.wanted()


@pytest.mark.parametrize(
    "line",
    [
        b"GET  / HTTP/1.1\r\n",
        b"GET / HTTP/1.1 \r\n",
        b"GET /\t HTTP/1.1\r\n",
        b"G(T / HTTP/1.1\r\n",
        b"GET / HTTP/11\r\n",
        b"GET /\x7f HTTP/1.1\r\n",
    ],
)
def test_malformed_lines_are_refused(line: bytes) -> None:
    """What llhttp would read leniently is a 400 here."""
    with pytest.raises(RejectedError) as info:
        RequestLineCheck().feed(line)
    assert info.value.status == 400


def test_a_line_split_across_reads_is_checked_whole() -> None:
    """Bytes without CRLF wait for the rest; the whole line is then checked."""
    check = RequestLineCheck()
    check.feed(b"GET /a")
    assert check.wanted()
    with pytest.raises(RejectedError):
        check.feed(b"  HTTP/1.1\r\n")


def test_the_next_request_is_checked_once_between_is_set() -> None:
    """After a request the server sets ``between``; the next read is checked again."""
    check = RequestLineCheck()
    check.feed(b"GET / HTTP/1.1\r\n")
    assert not check.wanted()
    check.between = True
    with pytest.raises(RejectedError):
        check.feed(b"GET /  HTTP/1.1\r\n")


def test_split_target_decodes_the_path_only() -> None:
    """The raw path and query stay bytes; a non-ASCII target is a 400."""
    assert split_target(b"/v1/models?x=%20") == ("/v1/models", b"/v1/models", b"x=%20")
    with pytest.raises(RejectedError):
        split_target(b"/\xff")
