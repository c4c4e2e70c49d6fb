"""No script reaches a reader: which markup and URLs the door lets into a document.

Refused, not sanitised: a producer's content comes back byte for byte (issue #13), so markup
that a sanitiser would change is refused (422) with what was found, never rewritten. What is
allowed in HTML and XHTML is the policy of the sanitiser nh3 (ammonia), the only nh3 user:
its tags that the W3C Feed Validator accepts, less ruby (:data:`ALLOWED_TAGS`), attributes per
tag plus ``lang`` and ``title`` on any tag, and URL schemes. Since archived pages are kept
forever and the validator parses HTML content with html5lib in strict mode, :func:`html_problem`
refuses what an HTML parser reads with an error, all in linear time: a '<' that begins no tag
(write ``&lt;``); an '&' that begins no complete character reference of a known name or an
allowed code point (write ``&amp;``; a bare '&' before whitespace is text, at most
:data:`MAX_BARE_AMPERSANDS`); a tag whose syntax is not HTML's (attributes not separated by
whitespace, quotes in an unquoted value, attributes on an end tag, ``/>`` on a non-void element,
an end tag of a void element, an attribute twice); comments, declarations and processing
instructions. It then checks each tag, attribute and URL as Python's HTML tokenizer reads them
(so the refusal names the culprit), and the tree the tags make (:func:`_tree`): nested at most
:data:`MAX_NESTING` deep, each element closed where it ends (only ``p``, ``li``, ``dt``, ``dd``
and table parts may be closed by HTML's implied end tags), no heading in a heading, no ``a`` in
an ``a``. Last, that nh3, which parses as browsers do (html5ever), builds the same tree, with
the same tags, attributes and text at the same depths, so markup that a browser reads
differently from Python cannot slip through. XHTML content is held to the same tree, written
as HTML as feed readers pass it on (:func:`written_tree_problem`). XML content (SVG and other
XML media types) may not hold ``script`` or ``handler`` elements, ``on*`` attributes, URL
attributes with a scheme other than http, https or mailto, or a ``javascript:``,
``vbscript:`` or ``data:`` URL in any attribute.
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
#: ``<ruby>漢<rt>kan</rt></ruby>`` reads back as "漢kan" in feedparser-based readers; and the
#: others its sanitiser drops (not in its ``acceptable_elements``), keeping their text: a
#: ``<summary>`` would run into the body of its ``<details>``, a ``<bdi>`` no longer isolate
#: right-to-left text, a ``<mark>`` no longer mark, a ``<wbr>`` no longer break (a reader's
#: trial of what feedparser-based readers show).
EXCLUDED_TAGS = frozenset(
    {"bdo", "rtc"} | {"ruby", "rt", "rp"} | {"bdi", "data", "hgroup", "mark", "summary", "wbr"}
)
#: nh3's tags, less :data:`EXCLUDED_TAGS`: nh3's tags that are in the validator's acceptable
#: elements and in feedparser's, but for ruby.
ALLOWED_TAGS: frozenset[str] = frozenset(nh3.ALLOWED_TAGS) - EXCLUDED_TAGS
#: nh3's attributes per allowed tag, and (ammonia's default generic attributes) on every tag.
ALLOWED_ATTRIBUTES: dict[str, frozenset[str]] = {
    tag: frozenset(names) for tag, names in nh3.ALLOWED_ATTRIBUTES.items() if tag in ALLOWED_TAGS
}
GENERIC_ATTRIBUTES = frozenset({"lang", "title"})
#: URL schemes allowed in HTML and XHTML content: nh3's that feedparser's sanitiser keeps (its
#: ``ACCEPTABLE_URI_SCHEMES``): it writes a ``tel:``, ``xmpp:``, ``geo:``, ``webcal:`` link as
#: ``href=""``, a link to nothing in every feedparser-based reader (a producer's trial).
HTML_URL_SCHEMES: frozenset[str] = frozenset(nh3.ALLOWED_URL_SCHEMES) & frozenset(
    {"ftp", "http", "https", "irc", "ircs", "magnet", "mailto", "mms", "news", "nntp", "sip"}
    | {"ssh"}
)
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
#: ``style`` styles the whole page a reader puts the content in, not the content alone.
XML_SCRIPT_ELEMENTS = frozenset({"script", "handler", "style"})

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
_C0_AND_SPACE = "".join(map(chr, range(0x21)))
#: A URL's scheme (RFC 3986 3.1) and its colon, at the start of a string.
SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_SCRIPT_URL = re.compile("|".join(f"{s}:" for s in SCRIPT_SCHEMES))
# Each '<' of a text, with the start tag it begins if it begins one (up to its '>', quoted
# values skipped whole: a '<' in one is no markup), never backtracking (possessive), so that a
# scan is linear. What follows a bare '<' says what it is: '/' and a letter an end tag, '!--'
# a comment, '!' a declaration (a doctype, a CDATA section), '?' a processing instruction, and
# anything else nothing (a '<' that is text: an error to HTML's parser).
_MARKUP = re.compile(r"""<(?:[A-Za-z][^>"']*+(?:(?:"[^"]*+"|'[^']*+')[^>"']*+)*+>?)?""")
_END_TAG_START = re.compile(r"</[A-Za-z]")


def _as_browsers_read(value: str) -> str:
    """``value`` as a browser reads a URL: without tabs and line breaks, nor C0 controls and
    spaces around it."""
    return _URL_STRIP.sub("", value).strip(_C0_AND_SPACE)


def url_scheme(value: str) -> str | None:
    """The scheme a browser reads in ``value`` (lower case), or None for a relative URL."""
    match = SCHEME.match(_as_browsers_read(value))
    return match.group(1).lower() if match else None


#: How a relative URL in content may begin: from the root (``/x``, ``//host/x``), the same
#: from every document; in SVG, ``#id`` too, an element of the SVG itself (``<use>``).
FROM_THE_ROOT = ("/",)
FROM_THE_ROOT_OR_WITHIN = ("/", "#")


def url_problem(
    value: str, schemes: frozenset[str], relative: tuple[str, ...] = FROM_THE_ROOT
) -> str | None:
    """Why ``value`` may not be a URL in content, or None.

    A relative reference (no scheme) must begin with one of ``relative``: readers resolve it
    against the document they read the entry in, the recent document and then its page, so
    ``x``, ``../x``, ``?q``, an empty one or (feedparser resolves HTML's links) ``#x`` would
    lead to two places, on an archived page for good."""
    read = _as_browsers_read(value)
    match = SCHEME.match(read)
    if match is None:
        if not read.startswith(relative):
            return (
                f"the relative URL {value[:60]!r}, which readers resolve against the document"
                " they read it in (the recent document, then its page): write it absolute, or"
                " from the root ('/...')"
            )
        return None
    scheme = match.group(1).lower()
    if scheme not in schemes:
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

# HTML's tag syntax, as its tokenizer reads it without error: a start tag's attributes each
# after whitespace, a value quoted or without whitespace, quotes, '=', '<', '>' or '`'; '/>' at
# the end only (and only on a void element); an end tag with nothing but whitespace after its
# name. (Python's tokenizer takes more: ``<a href="x"title="y">``, ``</b foo="1">``.)
_WS = "[\t\n\f\r ]"
_VALUE = "(?:\"[^\"]*\"|'[^']*'|[^\t\n\f\r \"'=<>`]+)"
_START_TAG = re.compile(
    rf"<[A-Za-z][A-Za-z0-9]*(?:{_WS}+[^\t\n\f\r />\"'<=]+(?:{_WS}*={_WS}*{_VALUE})?)*{_WS}*/?>"
)
_END_TAG = re.compile(rf"</[A-Za-z][A-Za-z0-9]*{_WS}*>")
_TAG_SYNTAX = "write each attribute after a space, its value in quotes, and an end tag as </name>"


class _Tokens(HTMLParser):
    """Start tags with their attributes, text, and anything else, in document order.

    Text comes in chunks (a '<' that begins no tag is one of its own): they are gathered in a
    list and joined once, at the next token or the end, so N chunks cost N, not N squared.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tokens: list[Token] = []
        self._text: list[str] = []
        #: The first tag that HTML's tokenizer reads with an error, if any.
        self.problem: str | None = None

    def _flush(self) -> None:
        self.tokens.append(("text", "".join(self._text), ()))
        self._text.clear()

    def _token(self, token: Token) -> None:
        if self._text:
            self._flush()
        self.tokens.append(token)

    def _problem(self, problem: str) -> None:
        if self.problem is None:
            self.problem = problem

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        raw = self.get_starttag_text() or ""
        # (a tag with no attributes, "<p>", needs no look)
        if len(raw) != len(tag) + 2 and not _START_TAG.fullmatch(raw):
            self._problem(f"a start tag HTML reads with an error ({raw[:60]!r}): {_TAG_SYNTAX}")
        if len(attrs) > 1 and len({name for name, _ in attrs}) != len(attrs):
            self._problem(f"an attribute given twice ({raw[:60]!r})")
        self._token(("start", tag, tuple((k, v or "") for k, v in attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in VOID_ELEMENTS:
            raw = self.get_starttag_text() or ""
            self._problem(
                f"'/>' ends a <{tag}> ({raw[:60]!r}), and only a void element (br, img, ...) may"
                " end so: HTML reads it as a start tag"
            )
        self.handle_starttag(tag, attrs)

    def parse_endtag(self, i: int) -> int:
        j = super().parse_endtag(i)
        if j > i and not _END_TAG.fullmatch(self.rawdata, i, j):
            raw = self.rawdata[i:j]
            self._problem(f"an end tag HTML reads with an error ({raw[:60]!r}): {_TAG_SYNTAX}")
        return j

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
        if self._text:
            self._flush()


def _tokens(text: str) -> tuple[list[Token], str | None]:
    """The tokens of ``text``, and the first tag in it HTML's tokenizer reads with an error."""
    parser = _Tokens()
    parser.feed(text)
    parser.close()
    return parser.tokens, parser.problem


#: How many ampersands HTML content may hold that begin no character reference (a bare ``&``):
#: html5ever's time grows with their square (500,000 took 1.5 s; ``&amp;`` is cheap).
MAX_BARE_AMPERSANDS = 4096
# A character reference as HTML writes it in full (leading zeros aside, at most 8 digits: no
# larger number is a code point, and Python's int() of a long one is slow), and an '&' that
# begins neither one nor nothing: HTML's tokenizer reads an '&' followed by whitespace, '<',
# '&' or the end as text, and anything else as the start of a reference.
_WRITTEN_REFERENCE = r"#[xX]0*[0-9A-Fa-f]{1,8};|#0*[0-9]{1,8};|[A-Za-z][A-Za-z0-9]{0,40};"
_REFERENCE = re.compile(rf"&({_WRITTEN_REFERENCE})")
_NOT_REFERENCE = re.compile(rf"&(?![\t\n\f\r <&]|$|{_WRITTEN_REFERENCE})")


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
    while found is not None and _ends_value(text, found.start()):
        found = _NOT_REFERENCE.search(text, found.end())
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


#: An open start tag up to the first character of an attribute value (its quote, or the
#: value's own first character when unquoted): what :func:`_ends_value` matches backwards.
_OPEN_VALUE = re.compile(
    rf"<[A-Za-z][A-Za-z0-9]*(?:{_WS}+[^\t\n\f\r />\"'<=]+(?:{_WS}*={_WS}*{_VALUE})?)*"
    rf"{_WS}+[^\t\n\f\r />\"'<=]+{_WS}*={_WS}*(?P<open>\"[^\"]*|'[^']*|[^\t\n\f\r \"'=<>`]+)"
)
#: How far back from an '&' :func:`_ends_value` looks for its tag's '<' (past it, the '&' is
#: taken as text: refused, as an '&' before a quote or '>' in text is).
OPEN_TAG_REACH = 4096


def _ends_value(text: str, at: int) -> bool:
    """Whether the '&' at ``at`` is the last character of an attribute value, right before the
    quote that closes it (or the '>' after an unquoted one): HTML's tokenizer reads such an
    '&' as text without error (``<a href="/?a=1&">``), as it reads an '&' before a space."""
    after = text[at + 1 : at + 2]
    if after not in ('"', "'", ">"):
        return False
    start = text.rfind("<", max(0, at - OPEN_TAG_REACH), at)
    if start < 0:
        return False
    found = _OPEN_VALUE.fullmatch(text, start, at + 1)
    if found is None:
        return False
    opening = found["open"][0]
    return opening == after if opening in "\"'" else after == ">"


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
    for found in _MARKUP.finditer(text):
        at = found.start()
        if len(found[0]) > 1:
            if found[0][-1] != ">":
                return (
                    f"a tag left open or with a stray quote ({text[at:][:40]!r}): quote values"
                    " whole, close the tag with '>', and write a '<' that is text as &lt;"
                )
            continue
        if _END_TAG_START.match(text, at):
            continue
        if text.startswith("<!--", at):
            kind = "a comment"
        elif text.startswith("<!", at):
            kind = "a declaration"
        elif text.startswith("<?", at):
            kind = "a processing instruction"
        else:
            return (
                f"a '<' that begins no tag ({text[at:][:40]!r}): write a '<' that is text as &lt;"
            )
        return f"{kind} ({text[at:][:40]!r}) is not allowed (write a '<' that is text as &lt;)"
    if text.rfind("</") > text.rfind(">"):
        return (
            f"a tag left open at the end ({text[text.rfind('</') :][:40]!r}): close it with"
            " '>', or write a '<' that is text as &lt;"
        )
    return None


#: How deep elements may nest in HTML content: html5ever (nh3) takes time that grows with the
#: square of the depth (60,000 ``<div>``, 300 KB, took 4.7 s).
MAX_NESTING = 100
#: Void elements: they never hold others.
VOID_ELEMENTS = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "wbr"})
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
    # (a cell or row ends the p, li, dt or dd left open in the cell before it)
    "td": frozenset({"td", "th", "p", "li", "dt", "dd"}),
    "th": frozenset({"td", "th", "p", "li", "dt", "dd"}),
    "tr": frozenset({"tr", "td", "th", "colgroup", "p", "li", "dt", "dd"}),
    **{
        part: frozenset({"thead", "tbody", "tfoot", "tr", "td", "th", "colgroup"})
        | {"p", "li", "dt", "dd"}
        for part in ("thead", "tbody", "tfoot")
    },
    "option": frozenset({"option"}),
    "optgroup": frozenset({"option", "optgroup"}),
}


def ends_at(parent: str, child: str) -> bool:
    """Whether HTML's parser ends a ``parent`` element, open last, at a ``child`` start tag in
    it (an end tag HTML lets one leave out: a paragraph at a block, a list item at the next)."""
    return parent in _CLOSES.get(child, _CLOSES_NOTHING)


#: HTML's formatting elements: one left open is opened again by a browser in each block after
#: it (800 ``<b>`` left open before 800 paragraphs, 17 KB, made nh3 write 12 MB in 4.9 s).
_FORMATTING = frozenset(
    {"a", "b", "big", "code", "em", "font", "i", "nobr", "s", "small", "strike", "strong"}
    | {"tt", "u"}
)


#: Elements HTML lets a text end in, or an end tag close, without their own end tag.
_OPTIONAL_END = frozenset({"p", "li", "dt", "dd"})
#: An end tag of one of these may close the table parts open in it.
_TABLES = frozenset({"table", "thead", "tbody", "tfoot", "tr"})
_TABLE_PARTS = frozenset({"thead", "tbody", "tfoot", "tr", "td", "th", "colgroup"})
#: The table parts HTML adds itself (around rows, around ``col`` elements).
_IMPLIED = frozenset({"tbody", "colgroup"})
_CLOSES_NOTHING: frozenset[str] = frozenset()
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_BEGINS_WITH_NEWLINE = frozenset({"pre", "listing", "textarea"})
#: A start tag or text, and its depth in the tree (the open elements it is in).
Placed = tuple[int, str, str, tuple[tuple[str, str], ...]]


def _tree(tokens: list[Token]) -> tuple[list[Placed], str | None]:
    """The tree the tokens make, and what in them HTML's parser reads with an error or slowly.

    The tree is each start tag and text with its depth, in document order. The open elements
    are kept as a browser keeps them, but never closed by fewer tags than a browser closes
    them with: a start tag closes only elements open last (:data:`_CLOSES`), and an end tag
    the elements open since its own, whose end tags HTML lets one leave out. A ``tbody`` or
    ``colgroup`` is not counted in the depth, and one without attributes is left out, because
    HTML adds them itself. Attribute values and text are as HTML reads them (line ends; no
    newline beginning a ``pre``). Linear in the tokens.

    Refused: elements nested deeper than :data:`MAX_NESTING` (a ``<rt>`` outside ``<ruby>``
    nests, and is counted so); an end tag that closes no open element, or one that leaves open
    an element whose end tag may not be left out; an end tag of a void element; a formatting
    element not closed where it ends; a heading in a heading, an ``a`` in an ``a``; anything
    but a ``p``, ``li``, ``dt`` or ``dd`` left open at the end.
    """
    tree = _Tree()
    for kind, value, attrs in tokens:
        if kind == "text":
            tree.text(value)
            continue
        tree.begins_pre = False
        if kind == "start":
            problem = tree.start(value, attrs)
        elif kind == "end":
            problem = tree.end(value)
        else:
            continue
        if problem is not None:
            return tree.placed, problem
    return tree.placed, tree.finish()


class _Tree:
    """The tree of :func:`_tree` as it is built, token by token."""

    __slots__ = ("begins_pre", "formatting", "implied", "open", "placed", "text_depth", "texts")

    def __init__(self) -> None:
        self.placed: list[Placed] = []
        self.open: list[str] = []
        self.formatting: list[str] = []
        self.implied = 0  # open tbody and colgroup elements: not counted in the depth
        self.texts: list[str] = []  # text not yet placed: a run at one depth is one text
        self.text_depth = 0
        self.begins_pre = False

    def text(self, value: str) -> None:
        chunk = value.replace("\r\n", "\n").replace("\r", "\n")
        if self.begins_pre:
            # HTML drops the newline that begins a pre, and nh3 writes "\n\nx" back as "\nx"
            # (a newline less): not what the check is for.
            chunk = chunk.lstrip("\n")
        if chunk:
            depth = len(self.open) - self.implied
            if self.texts and depth != self.text_depth:
                self._place_text()
            self.texts.append(chunk)
            self.text_depth = depth
            self.begins_pre = False

    def _place_text(self) -> None:
        self.placed.append((self.text_depth, "text", "".join(self.texts), ()))
        self.texts.clear()

    def start(self, tag: str, attrs: tuple[tuple[str, str], ...]) -> str | None:
        if self.texts:
            self._place_text()
        open_ = self.open
        closes = _CLOSES.get(tag, _CLOSES_NOTHING)
        if open_:
            problem = self._start_problem(tag, closes)
            if problem is not None:
                return problem
        while open_ and open_[-1] in closes:
            self.implied -= open_.pop() in _IMPLIED
        if tag in _FORMATTING:
            self.formatting.append(tag)
        if tag not in _IMPLIED or attrs:
            if any("\r" in v for _, v in attrs):  # line ends as HTML reads them
                attrs = tuple((k, v.replace("\r\n", "\n").replace("\r", "\n")) for k, v in attrs)
            attrs = tuple(sorted(attrs)) if len(attrs) > 1 else attrs
            self.placed.append((len(open_) - self.implied, "start", tag, attrs))
        if tag not in VOID_ELEMENTS:
            open_.append(tag)
            self.implied += tag in _IMPLIED
            if len(open_) > MAX_NESTING:
                return f"elements nested more than {MAX_NESTING} deep"
            self.begins_pre = tag in _BEGINS_WITH_NEWLINE
        return None

    def _start_problem(self, tag: str, closes: frozenset[str]) -> str | None:
        """Why a start tag makes HTML's parser work hard or err where it is, or None."""
        last = self.open[-1]
        if last in _FORMATTING:
            below = next((t for t in reversed(self.open) if t not in _FORMATTING), None)
            if below in closes:
                # A browser would close it, and open the formatting elements above it again
                # in every block after (97 <b> then 20,000 <li>, 395 KB: 22.8 s).
                return f"a <{tag}> while <{last}> is open in the <{below}> it ends"
        if tag in _HEADINGS and last in _HEADINGS:
            return f"a <{tag}> in a <{last}>: close the heading first"
        if tag == "a" and "a" in self.formatting:
            return "an <a> in an <a>: close the first one first"
        return None

    def end(self, tag: str) -> str | None:
        open_, formatting = self.open, self.formatting
        if tag in _FORMATTING:
            if not formatting or formatting[-1] != tag:
                open_last = f"<{formatting[-1]}>" if formatting else "no element"
                return f"a </{tag}> where {open_last} is the formatting element open last"
            formatting.pop()
        if tag in VOID_ELEMENTS:
            return f"an end tag </{tag}>: <{tag}> is a void element, written without one"
        if open_ and open_[-1] == tag:  # (most end tags: the element open last)
            self.implied -= open_.pop() in _IMPLIED
            return None
        if tag not in open_:
            return f"a </{tag}> that closes no open element"
        at = len(open_) - 1 - open_[::-1].index(tag)
        for inner in open_[at + 1 :]:
            if not (
                inner in _OPTIONAL_END
                or inner in _FORMATTING
                or (tag in _TABLES and inner in _TABLE_PARTS)
            ):
                return f"a </{tag}> while <{inner}> is open in it: close that first"
        self.implied -= sum(t in _IMPLIED for t in open_[at:])
        del open_[at:]
        return None

    def finish(self) -> str | None:
        """What the tokens leave open at their end, or None."""
        if self.texts:
            self._place_text()
        if self.formatting:
            return f"a <{self.formatting[-1]}> left open: close each element where it ends"
        left = next((t for t in reversed(self.open) if t not in _OPTIONAL_END), None)
        if left is not None:
            return f"a <{left}> left open at the end: close each element where it ends"
        return None


#: Noncharacters XML carries but HTML's parser reads with an error ("Invalid codepoint in
#: stream": U+FDD0-U+FDEF, and the last two of each plane; U+FFFE and U+FFFF XML refuses too).
_NONCHARACTER = re.compile(
    "[\ufdd0-\ufdef"
    + "".join(f"{chr(plane << 16 | 0xFFFE)}{chr(plane << 16 | 0xFFFF)}" for plane in range(17))
    + "]"
)


def html_problem(text: str) -> str | None:
    """Why ``text`` may not be HTML content, or None. See the module's docstring."""
    problem = (
        _noncharacter_problem(text) or _untokenizable_problem(text) or _ampersand_problem(text)
    )
    if problem is not None:
        return problem
    tokens, problem = _tokens(text)
    for kind, value, attrs in tokens:
        if kind == "start":
            problem_here = element_problem(value)
            for name, attr_value in attrs:
                problem_here = problem_here or attribute_problem(value, name, attr_value)
            if problem_here:
                return problem_here
        elif kind not in ("text", "end"):
            return f"a {kind} ({value[:40]!r}) is not allowed"
    if problem is not None:
        return problem
    return _tree_problem(tokens, text)


def written_tree_problem(tokens: list[Token], text: str) -> str | None:
    """Why ``text``, HTML written from a tree as ``tokens`` (XHTML content as feed readers pass
    it on: :func:`simplefeed.door.xml.html_reading`), is read as another tree or with an error by
    HTML's parser, or None. The tags and attributes are the tree's, checked there."""
    if "\r" in text:  # (only &#13; makes one in XML, as in HTML, which refuses it)
        return "holds a carriage return (&#13;), which HTML reads as a line feed"
    return _noncharacter_problem(text) or _tree_problem(tokens, text)


def _noncharacter_problem(text: str) -> str | None:
    found = _NONCHARACTER.search(text)
    if found is None:
        return None
    return f"holds U+{ord(found[0]):04X}, a noncharacter, which HTML's parser reads as an error"


def _tree_problem(tokens: list[Token], text: str) -> str | None:
    """The tree ``tokens`` make (:func:`_tree`), and nh3's of ``text``: the same, or why not."""
    tree, problem = _tree(tokens)
    if problem is not None:
        return problem
    cleaned = _CLEANER.clean(text)
    if cleaned == text:  # (nh3 wrote back what it read: the same tree)
        return None
    # What nh3 writes is never much longer than what it read (escaping a bare '&' or '<' adds
    # at most four characters each), unless it built elements of its own.
    if len(cleaned) > 5 * len(text) + 1024 or _tree(_tokens(cleaned)[0])[0] != tree:
        return (
            "markup that an HTML parser reads otherwise than it is written (the sanitiser nh3 "
            "would build another tree): send well-formed HTML, each element closed where it ends"
        )
    return None


def xml_script_problem(
    tag: str, attributes: Iterable[tuple[str, str]], *, rendered: bool
) -> str | None:
    """Why an element of inline XML content (``tag`` and attributes by local name) could run
    script in a reader that renders it (SVG, say), or None. ``rendered``: a vocabulary
    browsers render (SVG, MathML), whose URL attributes they resolve; elsewhere an
    ``action`` or ``data`` is a value, held only to the schemes."""
    if tag.lower() in XML_SCRIPT_ELEMENTS:
        return f"<{tag}> elements are not allowed (they run script or style the reader's page)"
    for name, value in attributes:
        lower = name.lower()
        if lower.startswith("on"):
            return f"the event handler attribute {name!r} of <{tag}> is not allowed"
        if lower in URL_ATTRIBUTES and (rendered or url_scheme(value) is not None):
            problem = url_problem(value, XML_URL_SCHEMES, FROM_THE_ROOT_OR_WITHIN)
            if problem:
                return f"the {name} of <{tag}> is {problem}"
        squeezed = _URL_STRIP.sub("", value).replace(" ", "").lower()
        found = _SCRIPT_URL.search(squeezed)
        if found:
            return f"the attribute {name!r} of <{tag}> holds a {found.group()} URL"
    return None
