"""HTML content at the door, as a strict judge reads it: the W3C Feed Validator parses ``html``
content with html5lib in strict mode, so any HTML parse error is "Invalid HTML", for good on an
archived page. What a browser's parser reads with an error, or reads otherwise than it is
written, is refused (422, naming the problem) before anything is stored; ordinary HTML is still
accepted, and the documents that carry it pass the judge. Posted through the real app, as
``tests/test_door.py`` does."""

from __future__ import annotations

import time

import falcon.testing
import pytest

from simplefeed import markup
from simplefeed.core import Simplefeed
from tests.test_conformance import judge_ready
from tests.test_door import refused

__all__ = ["judge_ready"]  # a fixture, used by name

Client = falcon.testing.TestClient


def refused_html(client: Client, core: Simplefeed, html: str, *words: str) -> None:
    refused(client, core, {"title": "t", "content_type": "html", "content": html}, "content",
            words=words)  # fmt: skip


# -- F2: a '<' that begins no tag --------------------------------------------------------------


@pytest.mark.parametrize(
    "html", ["x < y", "x<3", "a <= b", "1 <> 2", "</ p>", "</>", "a </3", "<", "x <\n>"]
)
def test_a_less_than_that_begins_no_tag_is_refused(
    client: Client, core: Simplefeed, html: str
) -> None:
    refused_html(client, core, html, "write a '<' that is text as &lt;")


def test_a_flood_of_less_thans_is_refused_in_linear_time(client: Client, core: Simplefeed) -> None:
    """A reviewer's trial: 512 Ki of '<' was accepted after 2.1 s of CPU (each its own text
    chunk, joined to all before it)."""
    flood = "<" * 524_288
    start = time.process_time()
    assert markup.html_problem(flood) is not None
    assert time.process_time() - start < 0.2
    refused_html(client, core, flood, "a '<' that begins no tag")


def test_text_in_many_chunks_is_joined_once() -> None:
    """The tokenizer's text chunks are gathered and joined, not copied onto each other."""
    tokens = markup._tokens("a&amp;b" * 3 + "<p>" + "c" * 5)
    assert [t for t in tokens if t[0] == "text"] == [("text", "a&b" * 3, ()), ("text", "ccccc", ())]
