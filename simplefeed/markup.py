"""No script reaches a reader: which markup and URLs the door lets into a document.

Refused, not sanitised: a producer's content comes back byte for byte (issue #13), so markup
that a sanitiser would change is refused (422) with what was found, never rewritten. What is
allowed in HTML and XHTML is the policy of the sanitiser nh3 (ammonia), the only nh3 user:
its tags (:data:`ALLOWED_TAGS`), attributes per tag plus ``lang`` and ``title`` on any tag, and
URL schemes. :func:`html_problem` checks HTML twice: each tag, attribute and URL as Python's
HTML tokenizer reads them (so the refusal names the culprit), then that nh3, which parses as
browsers do (html5ever), would keep exactly the same tags, attributes and text, so markup that
a browser reads differently from Python cannot slip through. XML content (SVG and other XML
media types) may not hold ``script`` or ``handler`` elements, ``on*`` attributes, URL
attributes with a scheme other than http, https or mailto, or a ``javascript:``, ``vbscript:``
or ``data:`` URL in any attribute.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from html.entities import html5 as _NAMED_REFERENCES
from html.parser import HTMLParser

import nh3

#: nh3's tags that are not allowed: those the W3C Feed Validator does not accept (its
#: ``HTMLValidator.acceptable_elements``, feedvalidator/validators.py beside the judge script:
#: ``bdo`` draws "content should not contain bdo tag", ``rtc`` "Non-html tag"); and ruby
#: annotations, which feedparser's sanitiser drops while keeping their text, so that
#: ``<ruby>漢<rt>kan</rt></ruby>`` reads back as "漢kan" in feedparser-based readers.
EXCLUDED_TAGS = frozenset({"bdo", "rtc"} | {"ruby", "rt", "rp"})
#: nh3's tags, less :data:`EXCLUDED_TAGS`: nh3's tags that are in the validator's acceptable
#: elements, but for ruby.
ALLOWED_TAGS: frozenset[str] = frozenset(nh3.ALLOWED_TAGS) - EXCLUDED_TAGS
#: nh3's attributes per allowed tag, and (ammonia's default generic attributes) on every tag.
ALLOWED_ATTRIBUTES: dict[str, frozenset[str]] = {
    tag: frozenset(names) for tag, names in nh3.ALLOWED_ATTRIBUTES.items() if tag in ALLOWED_TAGS
}
GENERIC_ATTRIBUTES = frozenset({"lang", "title"})
#: URL schemes allowed in HTML and XHTML content (nh3's).
HTML_URL_SCHEMES: frozenset[str] = frozenset(nh3.ALLOWED_URL_SCHEMES)
#: URL schemes allowed in the event's URLs (links, author URIs, category schemes): nh3's that
#: the W3C Feed Validator knows as registered, and identifiers' ``urn`` and ``tag``. Its
#: others (``magnet``, ``webcal``, ``irc``, ``geo``, ``sms``, ...) draw "URI scheme not IANA
#: registered" on every page that carries them, for good (a producer's trial).
EVENT_URL_SCHEMES: frozenset[str] = frozenset(
    {"ftp", "http", "https", "im", "mailto", "news", "nntp", "openpgp4fpr", "sip", "tel"}
    | {"xmpp", "urn", "tag"}
)
XML_URL_SCHEMES = frozenset({"http", "https", "mailto"})
#: Schemes that run code or carry a document of their own, wherever they appear.
SCRIPT_SCHEMES = ("javascript", "vbscript", "data")
#: Attributes that hold a URL (HTML's and SVG's, with or without the XLink namespace).
URL_ATTRIBUTES = frozenset(
    {
        "action", "archive", "background", "cite", "classid", "codebase", "data", "dynsrc",
        "formaction", "href", "icon", "longdesc", "lowsrc", "manifest", "ping", "poster",
        "profile", "src", "srcset", "usemap",
    }
)  # fmt: skip
XML_SCRIPT_ELEMENTS = frozenset({"script", "handler"})

_CLEANER = nh3.Cleaner(
    tags=set(ALLOWED_TAGS),
    attributes={"*": set(GENERIC_ATTRIBUTES), **{t: set(a) for t, a in ALLOWED_ATTRIBUTES.items()}},
    url_schemes=set(HTML_URL_SCHEMES),
    link_rel=None,  # nh3 would add rel="noopener noreferrer": a change, not a removal
    strip_comments=True,
)
# What browsers strip from a URL before reading its scheme (the URL Standard): leading and
# trailing C0 controls and spaces, and tabs and newlines anywhere.
_URL_STRIP = re.compile(r"[\t\n\r]")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_SCRIPT_URL = re.compile("|".join(f"{s}:" for s in SCRIPT_SCHEMES))
# What Python's HTML tokenizer begins a tag with, and what it begins a comment, a declaration
# (a doctype, a CDATA section) or a processing instruction with: none of those is content.
_TAG_START = re.compile(r"<[A-Za-z/]")
_NOT_CONTENT = re.compile(r"<(?:(!--)|(!)|(\?))")
# A '<' that begins no tag (HTML's tokenizer: one not followed by an ASCII letter, or by '/' and
# one): a parse error in HTML ("x < y", "x<3"), and each one a text chunk of its own to Python's.
_LONE_LESS_THAN = re.compile(r"<(?![A-Za-z]|/[A-Za-z])")


def url_scheme(value: str) -> str | None:
    """The scheme a browser reads in ``value`` (lower case), or None for a relative URL."""
    cleaned = _URL_STRIP.sub("", value).strip("".join(map(chr, range(0x21))))
    match = _SCHEME.match(cleaned)
    return match.group(1).lower() if match else None


def url_problem(value: str, schemes: frozenset[str]) -> str | None:
    """Why ``value`` may not be a URL here, or None (a relative reference has no scheme)."""
    scheme = url_scheme(value)
    if scheme is not None and scheme not in schemes:
        return f"a {scheme}: URL, and only {', '.join(sorted(schemes))} URLs are allowed"
    return None


def attribute_problem(tag: str, name: str, value: str) -> str | None:
    """Why an HTML (or XHTML) element ``tag`` may not carry the attribute, or None."""
    if name not in GENERIC_ATTRIBUTES and name not in ALLOWED_ATTRIBUTES.get(tag, ()):
        return f"the attribute {name!r} of <{tag}> is not allowed"
    if name in URL_ATTRIBUTES:
        problem = url_problem(value, HTML_URL_SCHEMES)
        if problem:
            return f"the {name} of <{tag}> is {problem}"
    return None


def element_problem(tag: str) -> str | None:
    if tag not in ALLOWED_TAGS:
        return (
            f"<{tag}> is not allowed (allowed: the tags of the sanitiser nh3 that feed"
            " validators and readers accept)"
        )
    return None


Token = tuple[str, str, tuple[tuple[str, str], ...]]


class _Tokens(HTMLParser):
    """Start tags with their attributes, text, and anything else, in document order.

    Text comes in chunks (a '<' that begins no tag is one of its own): they are gathered in a
    list and joined once, at the next token or the end, so N chunks cost N, not N squared.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tokens: list[Token] = []
        self._text: list[str] = []

    def _flush(self) -> None:
        if self._text:
            self.tokens.append(("text", "".join(self._text), ()))
            self._text.clear()

    def _token(self, token: Token) -> None:
        self._flush()
        self.tokens.append(token)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._token(("start", tag, tuple((k, v or "") for k, v in attrs)))

    handle_startendtag = handle_starttag

    def handle_endtag(self, tag: str) -> None:
        self._token(("end", tag, ()))

    def handle_data(self, data: str) -> None:
        self._text.append(data)

    def handle_comment(self, data: str) -> None:
        self._token(("comment", data, ()))

    def handle_decl(self, decl: str) -> None:
        self._token(("declaration", decl, ()))

    def handle_pi(self, data: str) -> None:
        self._token(("processing instruction", data, ()))

    def unknown_decl(self, data: str) -> None:
        self._token(("declaration", data, ()))

    def close(self) -> None:
        super().close()
        self._flush()


def _tokens(text: str) -> list[Token]:
    parser = _Tokens()
    parser.feed(text)
    parser.close()
    return parser.tokens


#: How many ampersands HTML content may hold that begin no character reference (a bare ``&``):
#: html5ever's time grows with their square (500,000 took 1.5 s; ``&amp;`` is cheap).
MAX_BARE_AMPERSANDS = 4096
# A character reference as HTML writes it in full (leading zeros aside, at most 8 digits: no
# larger number is a code point, and Python's int() of a long one is slow), and an '&' that
# begins neither one nor nothing: HTML's tokenizer reads an '&' followed by whitespace, '<',
# '&' or the end as text, and anything else as the start of a reference.
_REFERENCE = re.compile(r"&(#[xX]0*[0-9A-Fa-f]{1,8};|#0*[0-9]{1,8};|[A-Za-z][A-Za-z0-9]{0,40};)")
_NOT_REFERENCE = re.compile(
    r"&(?![\t\n\f\r <&]|$|#[xX]0*[0-9A-Fa-f]{1,8};|#0*[0-9]{1,8};|[A-Za-z][A-Za-z0-9]{0,40};)"
)


def _reference_allowed(reference: str) -> bool:
    """Whether ``reference`` (``amp;``, ``#169;``, ``#xA9;``) is one HTML's parser reads
    without error: a name HTML5 knows, or a number for a code point that is not NUL, CR, a
    control, a surrogate or a noncharacter, nor past U+10FFFF (html5lib's list, the judge's)."""
    if reference[0] != "#":
        return reference in _NAMED_REFERENCES
    code = int(reference[2:-1], 16) if reference[1] in "xX" else int(reference[1:-1])
    return not (
        code in (0x0B, 0x0D)
        or code <= 0x08
        or 0x0E <= code <= 0x1F
        or 0x7F <= code <= 0x9F
        or 0xD800 <= code <= 0xDFFF
        or 0xFDD0 <= code <= 0xFDEF
        or code & 0xFFFE == 0xFFFE
        or code > 0x10FFFF
    )


def _ampersand_problem(text: str) -> str | None:
    """An '&' that begins a character reference HTML's parser reads with an error (not ended by
    ';', a name it does not know, a number for a code point it refuses: ``AT&T``, ``&copy
    2026``, ``&#128;``), or more than :data:`MAX_BARE_AMPERSANDS` bare ones; found in linear
    time."""
    if "&" not in text:
        return None
    total = text.count("&")
    if total > MAX_BARE_AMPERSANDS:
        references = Counter(_REFERENCE.findall(text))
        bare = total - sum(n for r, n in references.items() if _reference_allowed(r))
        if bare > MAX_BARE_AMPERSANDS:
            return (
                f"{bare} ampersands that begin no character reference (at most"
                f" {MAX_BARE_AMPERSANDS}): write each as &amp;"
            )
    found = _NOT_REFERENCE.search(text)
    at = found.start() if found is not None else -1
    if at < 0:
        wrong = [r for r in set(_REFERENCE.findall(text)) if not _reference_allowed(r)]
        if wrong:
            at = min(text.find("&" + r) for r in wrong)
    if at < 0:
        return None
    return (
        f"an '&' that begins no character reference HTML reads without error"
        f" ({text[at:][:20]!r}): write a '&' that is text as &amp;, and end each reference"
        " with ';'"
    )


def _untokenizable_problem(text: str) -> str | None:
    """What Python's tokenizer must not be given, found in linear time, or None.

    It reads a comment, declaration or tag that nothing closes to the end of the text and then
    takes only its '<' as text, so N of them cost N times the text (quadratic: 24 KB of ``<a ``
    took 2.8 s of CPU, 80 KB of ``<!--<p>`` 0.7 s; CVE-2025-6069, fixed in CPython 3.12.11 and
    3.13.5), and it raises AssertionError on some '<![' (``<![<![``). Comments, declarations and
    processing instructions are refused anyway: here, before it reads them; a '<' that begins
    no tag is an error to HTML's parser (write ``&lt;``); and a tag, since it ends at a '>',
    must have one after it.
    """
    found = _NOT_CONTENT.search(text)
    if found is not None:
        kind = "comment" if found[1] else "declaration" if found[2] else "processing instruction"
        return (
            f"a {kind} ({text[found.start() :][:40]!r}) is not allowed (write a '<' that is"
            " text as &lt;)"
        )
    tail = text[text.rfind(">") + 1 :]
    found = _TAG_START.search(tail)
    if found is not None:
        return (
            f"a tag left open at the end ({tail[found.start() :][:40]!r}): close it with '>',"
            " or write a '<' that is text as &lt;"
        )
    found = _LONE_LESS_THAN.search(text)
    if found is not None:
        return (
            f"a '<' that begins no tag ({text[found.start() :][:40]!r}): write a '<' that is"
            " text as &lt;"
        )
    return None


def _comparable(tokens: list[Token]) -> list[Token]:
    """Start tags (attributes sorted) and text, as two HTML parsers should agree on them:
    line ends as HTML reads them, the newlines that begin a ``pre`` left out, the ``tbody``
    HTML implies in a table left out."""
    out: list[Token] = []
    opened = ""
    for kind, value, attrs in tokens:
        begins_pre, opened = (
            opened in ("pre", "listing", "textarea"),
            value if kind == "start" else "",
        )
        if kind == "end" or (kind == "start" and value == "tbody" and not attrs):
            continue
        if kind == "text":
            value = value.replace("\r\n", "\n").replace("\r", "\n")
            if begins_pre:
                # HTML drops the newline that begins a pre, and nh3 writes "\n\nx" back as
                # "\nx" (a newline less): not what the check is for.
                value = value.lstrip("\n")
                if not value:
                    continue
            if out and out[-1][0] == "text":
                value = out.pop()[1] + value
        out.append((kind, value, tuple(sorted(attrs))))
    return out


#: How deep elements may nest in HTML content: html5ever (nh3) takes time that grows with the
#: square of the depth (60,000 ``<div>``, 300 KB, took 4.7 s).
MAX_NESTING = 100
#: Void elements: they never hold others.
_VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "wbr"})
#: The open elements a start tag closes while one of them is the element open last, as every
#: browser's parser closes them (HTML's optional end tags): a list item the one before, a row
#: its last cell and itself, a block the paragraph it follows.
_BLOCKS = (
    "address", "article", "aside", "blockquote", "center", "details", "dir", "div", "dl",
    "fieldset", "figcaption", "figure", "footer", "h1", "h2", "h3", "h4", "h5", "h6", "header",
    "hgroup", "hr", "main", "menu", "nav", "ol", "pre", "section", "summary", "table", "ul",
)  # fmt: skip
_CLOSES: dict[str, frozenset[str]] = {
    **{block: frozenset({"p"}) for block in _BLOCKS},
    "p": frozenset({"p"}),
    "li": frozenset({"li", "p"}),
    "dt": frozenset({"dt", "dd", "p"}),
    "dd": frozenset({"dt", "dd", "p"}),
    "td": frozenset({"td", "th"}),
    "th": frozenset({"td", "th"}),
    "tr": frozenset({"tr", "td", "th"}),
    **{
        part: frozenset({"thead", "tbody", "tfoot", "tr", "td", "th"})
        for part in ("thead", "tbody", "tfoot")
    },
    "option": frozenset({"option"}),
    "optgroup": frozenset({"option", "optgroup"}),
}
#: HTML's formatting elements: one left open is opened again by a browser in each block after
#: it (800 ``<b>`` left open before 800 paragraphs, 17 KB, made nh3 write 12 MB in 4.9 s).
_FORMATTING = frozenset(
    {"a", "b", "big", "code", "em", "font", "i", "nobr", "s", "small", "strike", "strong"}
    | {"tt", "u"}
)


def _nesting_problem(tokens: list[Token]) -> str | None:
    """Elements nested deeper than :data:`MAX_NESTING`, an end tag that closes no open element,
    or a formatting element not closed where it ends, found on the tokens (linear) before nh3
    parses them as a browser would.

    The open elements are kept as a browser keeps them, but never closed by fewer tags than a
    browser closes them with: a start tag closes only elements open last (:data:`_CLOSES`), an
    end tag the elements open since its own. So the depth counted is a browser's but for the
    ``tbody`` it adds in a table, never less (a ``<rt>`` outside ``<ruby>`` nests, and is
    counted so; an end tag that closes nothing, which a browser ignores, is refused).
    """
    open_: list[str] = []
    formatting: list[str] = []
    for kind, tag, _ in tokens:
        if kind == "start":
            closes = _CLOSES.get(tag, frozenset())
            below = next((t for t in reversed(open_) if t not in _FORMATTING), None)
            if below in closes and open_[-1] in _FORMATTING:
                # A browser would close it, and open the formatting elements above it again
                # in every block after (97 <b> then 20,000 <li>, 395 KB: 22.8 s, 9.8 GB).
                return f"a <{tag}> while <{open_[-1]}> is open in the <{below}> it ends"
            while open_ and open_[-1] in closes:
                open_.pop()
            if tag in _FORMATTING:
                formatting.append(tag)
            if tag not in _VOID:
                open_.append(tag)
                if len(open_) > MAX_NESTING:
                    return f"elements nested more than {MAX_NESTING} deep"
        elif kind == "end":
            if tag in _FORMATTING:
                if not formatting or formatting[-1] != tag:
                    open_last = f"<{formatting[-1]}>" if formatting else "no element"
                    return f"a </{tag}> where {open_last} is the formatting element open last"
                formatting.pop()
            if tag in _VOID:
                continue
            if tag not in open_:
                return f"a </{tag}> that closes no open element"
            del open_[len(open_) - 1 - open_[::-1].index(tag) :]
    if formatting:
        return f"a <{formatting[-1]}> left open: close each element where it ends"
    return None


def html_problem(text: str) -> str | None:
    """Why ``text`` may not be HTML content, or None. See the module's docstring."""
    problem = _untokenizable_problem(text) or _ampersand_problem(text)
    if problem is not None:
        return problem
    tokens = _tokens(text)
    for kind, value, attrs in tokens:
        if kind == "start":
            problem = element_problem(value)
            for name, attr_value in attrs:
                problem = problem or attribute_problem(value, name, attr_value)
            if problem:
                return problem
        elif kind not in ("text", "end"):
            return f"a {kind} ({value[:40]!r}) is not allowed"
    problem = _nesting_problem(tokens)
    if problem is not None:
        return problem
    cleaned = _CLEANER.clean(text)
    # What nh3 writes is never much longer than what it read (escaping a bare '&' or '<' adds
    # at most four characters each), unless it built elements of its own.
    if len(cleaned) > 5 * len(text) + 1024 or _comparable(_tokens(cleaned)) != _comparable(tokens):
        return (
            "markup that an HTML parser reads otherwise than it is written (the sanitiser nh3 "
            "would change it): send well-formed HTML, each element closed where it ends"
        )
    return None


def xml_script_problem(tag: str, attributes: Iterable[tuple[str, str]]) -> str | None:
    """Why an element of inline XML content (``tag`` and attributes by local name) could run
    script in a reader that renders it (SVG, say), or None."""
    if tag.lower() in XML_SCRIPT_ELEMENTS:
        return f"<{tag}> elements are not allowed (they run script)"
    for name, value in attributes:
        lower = name.lower()
        if lower.startswith("on"):
            return f"the event handler attribute {name!r} of <{tag}> is not allowed"
        if lower in URL_ATTRIBUTES:
            problem = url_problem(value, XML_URL_SCHEMES)
            if problem:
                return f"the {name} of <{tag}> is {problem}"
        squeezed = _URL_STRIP.sub("", value).replace(" ", "").lower()
        found = _SCRIPT_URL.search(squeezed)
        if found:
            return f"the attribute {name!r} of <{tag}> holds a {found.group()} URL"
    return None
