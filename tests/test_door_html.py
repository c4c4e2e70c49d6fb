"""The door takes HTML content only as a strict judge reads it.

The W3C Feed Validator parses ``html`` content with html5lib in strict mode. So any HTML parse
error is "Invalid HTML", and for good on an archived page. The door refuses what a browser's
parser reads with an error, or reads otherwise than it is written. The refusal is a 422 that
names the problem, before anything is stored. Ordinary HTML is still accepted, and the
documents that carry it pass the judge. Events are posted through the real app, as
``tests/test_door.py`` does.
"""

from __future__ import annotations

import time
from pathlib import Path

import falcon.testing
import pytest

from simplefeed.door import markup
from simplefeed.service import Simplefeed
from tests.conftest import FakeClock
from tests.test_conformance import BASE, START_US, documents, judge, judge_ready, unexplained
from tests.test_door import JUDGES, accepted, refused

__all__ = ["judge_ready"]  # A fixture, used by name.

Client = falcon.testing.TestClient


def refused_html(client: Client, core: Simplefeed, html: str, *words: str) -> None:
    refused(client, core, {"title": "t", "content_type": "html", "content": html}, "content",
            words=words)  # fmt: skip


# -- a '<' that begins no tag --------------------------------------------------------------


@pytest.mark.parametrize(
    "html", ["x < y", "x<3", "a <= b", "1 <> 2", "</ p>", "</>", "a </3", "<", "x <\n>"]
)
def test_a_less_than_that_begins_no_tag_is_refused(
    client: Client, core: Simplefeed, html: str
) -> None:
    refused_html(client, core, html, "write a '<' that is text as &lt;")


def test_a_flood_of_less_thans_is_refused_in_linear_time(client: Client, core: Simplefeed) -> None:
    """A flood of '<' is refused in linear time.

    Each '<' is its own text chunk. Joining each chunk to all before it takes 2.1 s of CPU for
    512 Ki of them.
    """
    flood = "<" * 524_288
    start = time.process_time()
    assert markup.html_problem(flood) is not None
    assert time.process_time() - start < 0.2
    refused_html(client, core, flood, "a '<' that begins no tag")


def test_text_in_many_chunks_is_joined_once() -> None:
    """Text in many chunks is joined once.

    The tokenizer's text chunks are gathered and joined, not copied onto each other.
    """
    tokens = markup._tokens("a&amp;b" * 3 + "<p>" + "c" * 5)[0]
    assert [t for t in tokens if t[0] == "text"] == [("text", "a&b" * 3, ()), ("text", "ccccc", ())]


# -- tags the validator or feedparser does not take -----------------------------------------


@pytest.mark.parametrize(
    "html,tag",
    [
        ('<bdo dir="rtl">x</bdo>', "bdo"),  # "content should not contain bdo tag"
        ("<ruby>漢<rtc>kan</rtc></ruby>", "ruby"),  # rtc: "Non-html tag"
        ("<p>a<rtc>kan</rtc></p>", "rtc"),
        ("<ruby>漢<rt>kan</rt></ruby>", "ruby"),  # feedparser reads "漢kan".
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


def test_the_allowed_tags_are_nh3s_that_the_validator_and_feedparser_accept_less_ruby(
    judge_ready: None,
) -> None:
    """The allowed tags are nh3's that the validator and feedparser accept, less ruby.

    feedparser's sanitiser drops the tags it does not accept, and keeps their text. So a
    ``<summary>`` would run into its ``<details>``'s body in every feedparser-based reader.
    """
    import sys

    import nh3
    from feedparser.sanitizer import _HTMLSanitizer

    sys.path.insert(0, str(JUDGES))
    try:
        from feedvalidator.validators import HTMLValidator  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(JUDGES))
    acceptable = set(HTMLValidator.acceptable_elements) & set(HTMLValidator.htmltags)
    acceptable &= set(_HTMLSanitizer.acceptable_elements)
    assert (set(nh3.ALLOWED_TAGS) & acceptable) - {"ruby", "rt", "rp"} == markup.ALLOWED_TAGS
    # Nor does it drop an attribute the door allows.
    allowed = set().union(*markup.ALLOWED_ATTRIBUTES.values(), markup.GENERIC_ATTRIBUTES)
    assert allowed <= set(_HTMLSanitizer.acceptable_attributes)
    assert set(markup.ALLOWED_ATTRIBUTES) <= markup.ALLOWED_TAGS


# -- character references -------------------------------------------------------------------


@pytest.mark.parametrize(
    "html",
    [
        "&copy 2026",  # No ';'.
        "&foo;",  # A name HTML does not know.
        "&#x80;",  # C1 controls, NUL, CR, surrogates, noncharacters, past U+10FFFF.
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
        'a &" b',  # Before a quote or a '>' that ends no attribute value.
        "a &> b",
        '<abbr title="R&\'">r</abbr>',
        "<abbr title='R&\"'>r</abbr>",
        '<p title="x">a &"</p>',
    ],
)
def test_an_ampersand_that_begins_no_reference_html_reads_without_error_is_refused(
    client: Client, core: Simplefeed, html: str
) -> None:
    refused_html(client, core, html, "write a '&' that is text as &amp;")


def test_a_flood_of_bare_ampersands_is_still_counted(client: Client, core: Simplefeed) -> None:
    refused_html(client, core, "a & b " * 5_000, "5000 ampersands that begin no character")
    accepted(client, {"title": "t", "content_type": "html", "content": "a & b " * 4_000})


# -- tags HTML's tokenizer reads with an error -----------------------------------------------


@pytest.mark.parametrize(
    "html,words",
    [
        ("<p/>x", "'/>' ends a <p>"),  # Self-closing syntax on a non-void element.
        ('a<img src="http://x.example/i.png"></img>b', "</img>: <img> is a void element"),
        ("a<hr></hr>b", "</hr>: <hr> is a void element"),
        ("a</br>b", "</br>: <br> is a void element"),
        ('<b>x</b foo="1">', "an end tag HTML reads with an error"),
        ("<b>x</b/>", "an end tag HTML reads with an error"),
        ('<a href=http://x.example/a"b>x</a>', "a stray quote"),
        ('<a href="http://x.example/"title="y">x</a>', "a start tag HTML reads with an error"),
        ("<a title=`x`>y</a>", "a start tag HTML reads with an error"),
        ("<p title=>x</p>", "a start tag HTML reads with an error"),
        ('<a / href="/x">y</a>', "a start tag HTML reads with an error"),
        ('<a href="/x" href="/y">z</a>', "an attribute given twice"),
    ],
)
def test_a_tag_html_reads_with_an_error_is_refused(
    client: Client, core: Simplefeed, html: str, words: str
) -> None:
    refused_html(client, core, html, words)


# -- a tree a browser builds otherwise, or with an error -------------------------------------


@pytest.mark.parametrize(
    "html,words",
    [
        ('<a href="http://x.example/">1<a href="http://y.example/">2</a>3</a>', "an <a> in an <a>"),
        (
            '<a href="http://x.example/"><span><a href="http://y.example/">z</a></span></a>',
            "<a> in",
        ),
        ("<h1>a<h2>b</h2>c</h1>", "a <h2> in a <h1>"),
        ("<h1>a<h1>b</h1>", "a <h1> in a <h1>"),
        ("<p><span>a<li>b</li></span>", "reads otherwise than it is written"),
        ("<table><p>x</p></table>", "reads otherwise than it is written"),
        ("<table><td>1</td></table>", "reads otherwise than it is written"),
        ("<td>x</td>", "reads otherwise than it is written"),
        ("<div><span>a</div>", "a </div> while <span> is open in it"),
        ("<dl><dt><span>a<dd>b</dl>", "while <span> is open"),
        ("<div>x", "a <div> left open at the end"),
        ("<ul><li>x", "a <ul> left open at the end"),
        ("<table><tr><td>x", "left open at the end"),
    ],
)
def test_markup_a_browser_builds_otherwise_or_with_an_error_is_refused(
    client: Client, core: Simplefeed, html: str, words: str
) -> None:
    refused_html(client, core, html, words)


#: Ordinary HTML that an HTML parser reads without error. It is accepted and passes the judge.
VALID_HTML = [
    "<ul><li>one<li>two</ul>",  # Implied </li>.
    "<ol><li>a<li>b<ul><li>c<li>d</ul><li>e</ol>",  # Nested lists.
    "<ul><li><p>a<li><p>b</ul>",
    "<p>a<p>b<div>c</div>",  # Paragraphs closed by the next, and by a block.
    "<p>para<ul><li>x</ul><p>x<hr>y",
    "<div><p>a</div>",
    "<table><tr><td>1<td>2<tr><td>3<td>4</table>",  # Tables without tbody.
    "<table><tr><td>1</td><td>2</td></tr></table>",
    "<table>\n<tr><td>1</td></tr>\n</table>",
    '<table><thead><tr><th scope="col">h</th></tr></thead><tbody><tr><td colspan="2">1</td>'
    "</tr></tbody></table>",
    "<table><thead><tr><td>h<tbody><tr><td>1</table>",
    "<table><caption>c</caption><tr><td>1</table>",
    '<table><colgroup><col span="2"><tr><td>1</td></tr></table>',
    "<table><tr><th>h<tr><td><p>a<td><ul><li>x</ul></table>",
    "<pre>\nfirst line\n</pre><pre>\n\nafter a blank line</pre>",  # A pre's leading newline.
    "<pre><code>if (a &lt; b) {\r\n  return;\r\n}</code></pre>",
    "a<br>b<br/>c<br />d<hr/>",
    '<img src="https://example.com/a.png" alt="a" width="10" height="10">',
    "<img src=https://example.com/a.png alt=a>",
    "<p>a &amp; b &lt; c &gt; d &copy; &#169; &#xA9; &hellip; &nbsp; a & b</p>",
    '<a href="https://example.com/?a=1&amp;b=2">x</a>',
    "<dl><dt>a<dd>b<dt>c<dd><p>d</dl>",
    '<blockquote cite="https://example.com/"><p>q</p></blockquote>',
    "<b>bold <i>both</i></b> <em>e</em> <code>c</code> <b>bold <div>block</div></b>",
    '<h1>T</h1><h2>S <a href="/x">link</a></h2><p>x',
    "<P TITLE=\"x\">y</P><p title='x'>y</p><b >x</b >",
    "<details><p>d</p></details>",
    '<figure><img src="/a.png" alt=""><figcaption>c</figcaption></figure>',
    '<p>x<sub>2</sub> <sup>3</sup> <q>q</q> <abbr title="t">a</abbr> <span lang="en">e</span>',
    '<ol start="3"><li>x</ol><p>ab</p><del>x</del><ins>y</ins>',
    "plain text, 1 &lt; 2 &amp;&amp; 3 &gt; 2",
    # Ordinary HTML that a parser reads without error, and that a stricter check would refuse.
    '<p><abbr title="x < y">lt</abbr> <img src="/heart.png" alt="<3"></p>',  # '<' in a value
    '<p><span title="Hello <!-- there">x</span></p>',  # No comment, but a value.
    '<table><col span="2"><tr><td>a</td><td>b</td></tr></table>',  # HTML adds the colgroup.
    "<table><caption>x</caption><col><tr><td>a</td></tr></table>",
    '<p><span title="line1\r\nline2">x</span> <span title="a\rb">y</span></p>',  # CR in a value
    # An '&' that ends an attribute value, before its closing quote or '>', is text.
    "<a href=\"https://example.com/?a=1&\">x</a> <abbr title='R&'>r</abbr> <span lang=en&>y</span>",
]


def test_ordinary_html_is_accepted_and_passes_the_judge(
    judge_ready: None, client: Client, clock: FakeClock, tmp_path: Path
) -> None:
    clock.now = START_US  # In the judge's past.
    for i, html in enumerate(VALID_HTML):
        event = {"title": f"valid {i}", "content_type": "html", "content": html}
        clock.advance(1)
        accepted(client, event)
    docs = documents(client, f"{BASE}/recent")
    problems = unexplained(docs, judge(docs, tmp_path), {})
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("character", ["\ufdd0", "\ufdef", "\U0001fffe", "\U0010ffff"])
def test_a_noncharacter_is_refused(client: Client, core: Simplefeed, character: str) -> None:
    """A noncharacter is refused.

    XML carries noncharacters, so the text rule lets them in. But HTML's parser reads each as
    an error ("Invalid codepoint in stream"). An archived page that holds one would be
    "Invalid HTML" for good.
    """
    refused_html(client, core, f"<p>a {character} b</p>", "a noncharacter")


# -- XHTML, as readers pass it on ---------------------------------------------------------
# feedparser gives xhtml content as a string of HTML, which a reader puts in its page. A
# browser's DOMParser keeps the XML tree, but a reader that serializes it does the same. Each
# of these is well-formed XML that the judge accepts. But HTML builds another tree of it, so
# the door refuses it. XHTML follows the HTML policy (docs/reference/events.md).


@pytest.mark.parametrize(
    "xhtml,words",
    [
        ('<a href="http://x.example/">1<a href="http://y.example/">2</a></a>', "an <a> in an <a>"),
        ("<h1>a<h2>b</h2></h1>", "a <h2> in a <h1>"),
        ("<p>one<div>two</div></p>", "a <div> in a <p>: HTML ends the <p> at it"),
        ("<p>one<p>two</p></p>", "a <p> in a <p>"),
        ("<ul><li>one<li>two</li></li></ul>", "a <li> in a <li>"),
        ("<p>one<span><div>two</div></span></p>", "reads otherwise than it is written"),
        ("<table>text<tr><td>x</td></tr></table>", "reads otherwise than it is written"),
        ("<p>a<br>b</br></p>", "<br> is a void element"),
        pytest.param("<div>" * 101 + "x" + "</div>" * 101, "nested more than 100", id="deep"),
        ("<p>a \ufdd0</p>", "a noncharacter"),
        ("<p>x&#13;y</p>", "a carriage return"),
    ],
)
def test_xhtml_that_html_reads_otherwise_is_refused(
    client: Client, core: Simplefeed, xhtml: str, words: str
) -> None:
    event = {"title": "t", "content_type": "xhtml", "content": xhtml}
    refused(client, core, event, "content", words=(words, "feed readers pass XHTML on as HTML"))


#: Ordinary XHTML, which HTML reads as it is written. It is accepted and passes the judge.
VALID_XHTML = [
    "<p>a</p><p>b</p><div><p>c</p></div>",
    "<ul><li>one</li><li>two<ul><li>three</li></ul></li></ul>",
    "<p>a <em>b</em> <a href='http://x.example/'>c</a><br/>d<img src='http://x.example/a.png'"
    " alt='a'/></p>",
    "<table><tr><td>1</td></tr></table>",  # HTML adds the tbody, as in html content.
    "<table>\n<tbody><tr><th>h</th></tr></tbody>\n</table>",
    "<p/><span/><p>ab &amp; &lt;c&gt;</p>",
    "<p xml:lang='fr' title='\"q\" &amp; &apos;a&apos;'>bonjour</p>",
    "<pre>\nfirst line\n</pre>",
    "<dl><dt>a</dt><dd><p>b</p></dd></dl>",
    "<blockquote><p>q</p></blockquote><h2>T <a href='/x'>link</a></h2>",
]


def test_ordinary_xhtml_is_accepted_and_passes_the_judge(
    judge_ready: None, client: Client, clock: FakeClock, tmp_path: Path
) -> None:
    clock.now = START_US
    for i, xhtml in enumerate(VALID_XHTML):
        clock.advance(1)
        accepted(client, {"title": f"valid {i}", "content_type": "xhtml", "content": xhtml})
    docs = documents(client, f"{BASE}/recent")
    problems = unexplained(docs, judge(docs, tmp_path), {})
    assert problems == [], "\n".join(problems)


def test_the_html_reading_of_xhtml_is_what_feedparser_passes_on() -> None:
    """The HTML reading of XHTML is what feedparser passes on.

    The reading checked is the one a generic reader gets. feedparser's string of the content,
    parsed as HTML, gives the same tree.
    """
    import feedparser
    from lxml import etree

    from simplefeed.door.xml import html_reading
    from simplefeed.model import XHTML_NS

    xhtml = "<p title='&quot;x&quot;'>a<br/><span/>b &amp; &lt;<em>c</em>e</p>"
    div = etree.fromstring(f'<div xmlns="{XHTML_NS}">{xhtml}</div>')
    feed = (
        '<feed xmlns="http://www.w3.org/2005/Atom"><entry><content type="xhtml">'
        f"{etree.tostring(div, encoding='unicode')}</content></entry></feed>"
    )
    passed_on = feedparser.parse(feed, sanitize_html=False).entries[0].content[0].value
    tokens, text = html_reading(div)
    assert markup._tree(tokens) == markup._tree(markup._tokens(text)[0])
    assert markup._tree(tokens) == markup._tree(markup._tokens(passed_on)[0])


@pytest.mark.parametrize(
    "content,content_type,words",
    [
        # HTML ends a comment at <!--> and <!--->. A reader that puts the content in its page
        # would run the handler after it, as Chromium does.
        ("<p>1.0</p><!--><img src=x onerror=window.ran=1>-->", "xhtml", "a comment"),
        ("<p>a</p><!-- a note --><p>b</p>", "xhtml", "xhtml content holds none"),
        (
            '<svg xmlns="http://www.w3.org/2000/svg"><!--><img src=x onerror=alert(1)>--></svg>',
            "image/svg+xml",
            "HTML's parser ends it there",
        ),
        (
            '<svg xmlns="http://www.w3.org/2000/svg"><!---><b>x</b>--></svg>',
            "image/svg+xml",
            "<!---",
        ),
        # Page-wide, because a <style> in content styles the reader's page, not the content.
        (
            '<svg xmlns="http://www.w3.org/2000/svg"><style>body{display:none}</style></svg>',
            "image/svg+xml",
            "style the reader's page",
        ),
    ],
)
def test_comments_html_reads_otherwise_and_style_elements_are_refused_in_inline_content(
    client: Client, core: Simplefeed, content: str, content_type: str, words: str
) -> None:
    event = {"title": "t", "content": content, "content_type": content_type}
    refused(client, core, event, "content", words=(words,))
    svg = '<svg xmlns="http://www.w3.org/2000/svg"><!-- Generator: a tool --><g/></svg>'
    accepted(client, {"title": "t", "content": svg, "content_type": "image/svg+xml"})


@pytest.mark.parametrize("scheme", ["tel:+15551234567", "xmpp:a@example.com", "geo:1,2"])
def test_a_link_scheme_feedparser_blanks_is_refused_in_markup(
    client: Client, core: Simplefeed, scheme: str
) -> None:
    """A link scheme that feedparser blanks is refused in markup.

    feedparser's sanitiser writes ``<a href="tel:...">`` as ``<a href="">``. So nh3's schemes
    are taken in content only where feedparser keeps them.
    """
    for content_type in ("html", "xhtml"):
        event = {
            "title": "t",
            "content": f'<p><a href="{scheme}">x</a></p>',
            "content_type": content_type,
        }
        refused(client, core, event, "content", words=("URLs are allowed",))
    accepted(client, {"title": "t", "links": [{"href": "tel:+15551234567"}]})  # A link keeps it.


def test_the_html_url_schemes_are_nh3s_that_feedparser_keeps() -> None:
    import nh3
    from feedparser.urls import ACCEPTABLE_URI_SCHEMES

    assert set(nh3.ALLOWED_URL_SCHEMES) & set(ACCEPTABLE_URI_SCHEMES) == markup.HTML_URL_SCHEMES
