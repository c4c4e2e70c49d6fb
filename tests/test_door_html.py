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
from tests.test_door import JUDGES, accepted, refused

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


# -- F4: tags the validator or feedparser does not take -----------------------------------------


@pytest.mark.parametrize(
    "html,tag",
    [
        ('<bdo dir="rtl">x</bdo>', "bdo"),  # "content should not contain bdo tag"
        ("<ruby>漢<rtc>kan</rtc></ruby>", "ruby"),  # rtc: "Non-html tag"
        ("<p>a<rtc>kan</rtc></p>", "rtc"),
        ("<ruby>漢<rt>kan</rt></ruby>", "ruby"),  # feedparser reads "漢kan"
        ("<p>漢<rp>(</rp></p>", "rp"),
        ("<p>漢<rt>kan</rt></p>", "rt"),
    ],
)
def test_tags_the_validator_or_feedparser_does_not_take_are_refused(
    client: Client, core: Simplefeed, html: str, tag: str
) -> None:
    refused_html(client, core, html, f"<{tag}> is not allowed")
    xhtml = {"title": "t", "content_type": "xhtml", "content": html}
    refused(client, core, xhtml, "content", words=(f"<{tag}> is not allowed",))


def test_the_allowed_tags_are_nh3s_that_the_validator_accepts_less_ruby() -> None:
    import sys

    import nh3

    sys.path.insert(0, str(JUDGES))
    try:
        from feedvalidator.validators import HTMLValidator  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(JUDGES))
    acceptable = set(HTMLValidator.acceptable_elements) & set(HTMLValidator.htmltags)
    assert (set(nh3.ALLOWED_TAGS) & acceptable) - {"ruby", "rt", "rp"} == markup.ALLOWED_TAGS
    assert set(markup.ALLOWED_ATTRIBUTES) <= markup.ALLOWED_TAGS


# -- F3: character references -------------------------------------------------------------------


@pytest.mark.parametrize(
    "html",
    [
        "&copy 2026",  # no ';'
        "&foo;",  # a name HTML does not know
        "&#x80;",  # C1 controls, NUL, CR, surrogates, noncharacters, past U+10FFFF
        "&#128;",
        "&#0;",
        "&#13;",
        "&#xD800;",
        "&#xFFFE;",
        "&#x110000;",
        "&#99999999999999999999;",
        "AT&T",
        "a&b c",
        "a &amp b",
        "x &. y",
        '<a href="http://x.example/?a=1&b=2">x</a>',
    ],
)
def test_an_ampersand_that_begins_no_reference_html_reads_without_error_is_refused(
    client: Client, core: Simplefeed, html: str
) -> None:
    refused_html(client, core, html, "write a '&' that is text as &amp;")


def test_a_flood_of_bare_ampersands_is_still_counted(client: Client, core: Simplefeed) -> None:
    refused_html(client, core, "a & b " * 5_000, "5000 ampersands that begin no character")
    accepted(client, {"title": "t", "content_type": "html", "content": "a & b " * 4_000})
