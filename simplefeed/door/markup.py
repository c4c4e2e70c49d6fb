"""Which markup and URLs the door lets into a document, so that no script reaches a reader.

The door refuses content; it never sanitises it. A producer's content comes back byte for byte
(issue #13). So markup that a sanitiser would change is refused (422) with what was found. It
is never rewritten.

The sanitiser nh3 (ammonia) sets what HTML and XHTML content may hold. This module is its only
user. Its tags are allowed if the W3C Feed Validator accepts them, less ruby
(:data:`ALLOWED_TAGS`). Its attributes are allowed per tag, and ``lang`` and ``title`` on any
tag. Its URL schemes are allowed too.

Archived pages are kept forever. The validator parses HTML content with html5lib in strict
mode. So :func:`html_problem` refuses what an HTML parser reads with an error. Each check runs
in linear time.

It refuses a '<' that begins no tag. Write ``&lt;`` instead.

It refuses an '&' that begins no complete character reference. A reference needs a known name
or an allowed code point. Write ``&amp;`` instead. A bare '&' before whitespace is text.
Content may hold at most :data:`MAX_BARE_AMPERSANDS` of them.

It refuses a tag whose syntax is not HTML's. Such a tag may lack whitespace between its
attributes. Or an unquoted value holds quotes, or an end tag carries attributes. Or a non-void
element ends in ``/>``, or a void element has an end tag. Or an attribute comes twice.

It refuses comments, declarations and processing instructions.

Then it checks each tag, attribute and URL as Python's HTML tokenizer reads them. So the
refusal names the culprit. It checks the tree the tags make too (:func:`_tree`). Elements nest
at most :data:`MAX_NESTING` deep. Each element is closed where it ends. Only ``p``, ``li``,
``dt``, ``dd`` and table parts may be closed by HTML's implied end tags. No heading may sit in
a heading, and no ``a`` in an ``a``.

Last, nh3 parses the content as browsers do (html5ever). It must build the same tree, with the
same tags, attributes and text at the same depths. So markup that a browser reads differently
from Python cannot slip through. XHTML content is held to the same tree. It is written as HTML,
as feed readers pass it on (:func:`written_tree_problem`).

XML content covers SVG and other XML media types. It may not hold ``script`` or ``handler``
elements, nor ``on*`` attributes. Its URL attributes may use only http, https or mailto. No
attribute may hold a ``javascript:``, ``vbscript:`` or ``data:`` URL.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from html.entities import html5 as _NAMED_REFERENCES
from html.parser import HTMLParser

import nh3

#: The tags of nh3 that are not allowed. First come those the W3C Feed Validator refuses. Its
#: list is ``HTMLValidator.acceptable_elements``. It is in feedvalidator/validators.py, beside
#: the judge script. ``bdo`` draws "content should not contain bdo tag". ``rtc`` draws "Non-html
#: tag". Next come ruby annotations. The sanitiser of feedparser drops them but keeps their
#: text. So ``<ruby>漢<rt>kan</rt></ruby>`` reads back as "漢kan" in feedparser-based readers.
#: Last come the other tags its sanitiser drops while keeping their text. Its
#: ``acceptable_elements`` lacks them. A ``<summary>`` would run into the body of its
#: ``<details>``. A ``<bdi>`` would no longer isolate right-to-left text. A ``<mark>`` would
#: no longer mark, and a ``<wbr>`` no longer break. Feedparser-based readers show each of these.
EXCLUDED_TAGS = frozenset(
    {"bdo", "rtc"} | {"ruby", "rt", "rp"} | {"bdi", "data", "hgroup", "mark", "summary", "wbr"}
)
#: The tags of nh3, less :data:`EXCLUDED_TAGS`. So these are its tags that both the validator
#: and feedparser accept, ruby aside.
ALLOWED_TAGS: frozenset[str] = frozenset(nh3.ALLOWED_TAGS) - EXCLUDED_TAGS
#: The attributes of nh3 per allowed tag. The generic ones, ammonia's default, go on any tag.
ALLOWED_ATTRIBUTES: dict[str, frozenset[str]] = {
    tag: frozenset(names) for tag, names in nh3.ALLOWED_ATTRIBUTES.items() if tag in ALLOWED_TAGS
}
GENERIC_ATTRIBUTES = frozenset({"lang", "title"})
#: URL schemes allowed in HTML and XHTML content. These are nh3's schemes that the sanitiser
#: of feedparser keeps (its ``ACCEPTABLE_URI_SCHEMES``). It writes a ``tel:``, ``xmpp:``,
#: ``geo:`` or ``webcal:`` link as ``href=""``. That is a link to nothing in every
#: feedparser-based reader.
HTML_URL_SCHEMES: frozenset[str] = frozenset(nh3.ALLOWED_URL_SCHEMES) & frozenset(
    {"ftp", "http", "https", "irc", "ircs", "magnet", "mailto", "mms", "news", "nntp", "sip"}
    | {"ssh"}
)
#: URL schemes allowed in the event's URLs: links, author URIs and category schemes. These
#: are nh3's schemes that the W3C Feed Validator knows as registered. Identifiers add ``urn``
#: and ``tag``. The other schemes of nh3 (``magnet``, ``webcal``, ``irc``, ``geo``, ``sms``)
#: draw "URI scheme not IANA registered". The warning would stay on every page that carries
#: them, for good.
EVENT_URL_SCHEMES: frozenset[str] = frozenset(
    {"ftp", "http", "https", "im", "mailto", "news", "nntp", "openpgp4fpr", "sip", "tel"}
    | {"xmpp", "urn", "tag"}
)
XML_URL_SCHEMES = frozenset({"http", "https", "mailto"})
#: Schemes that run code or carry a document of their own, wherever they appear.
SCRIPT_SCHEMES = ("javascript", "vbscript", "data")
#: Attributes that hold a URL. They are HTML's and SVG's, with or without the XLink namespace.
URL_ATTRIBUTES = frozenset(
    {
        "action", "archive", "background", "cite", "classid", "codebase", "data", "dynsrc",
        "formaction", "href", "icon", "longdesc", "lowsrc", "manifest", "ping", "poster",
        "profile", "src", "srcset", "usemap",
    }
)  # fmt: skip
#: The ``style`` element styles the whole page a reader puts the content in, not the content.
XML_SCRIPT_ELEMENTS = frozenset({"script", "handler", "style"})

_CLEANER = nh3.Cleaner(
    tags=set(ALLOWED_TAGS),
    attributes={"*": set(GENERIC_ATTRIBUTES), **{t: set(a) for t, a in ALLOWED_ATTRIBUTES.items()}},
    url_schemes=set(HTML_URL_SCHEMES),
    link_rel=None,  # Else nh3 adds rel="noopener noreferrer", a change and not a removal.
    strip_comments=True,
)
# What browsers strip from a URL before they read its scheme, by the URL Standard. They strip
# C0 controls and spaces at either end, and tabs and newlines anywhere.
_URL_STRIP = re.compile(r"[\t\n\r]")
_C0_AND_SPACE = "".join(map(chr, range(0x21)))
#: A URL's scheme (RFC 3986 3.1) and its colon, at the start of a string.
SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_SCRIPT_URL = re.compile("|".join(f"{s}:" for s in SCRIPT_SCHEMES))
# Each '<' of a text, with the start tag it begins, if any, up to its '>'. Quoted values are
# skipped whole, because a '<' in one is no markup. The pattern never backtracks (it is
# possessive), so a scan is linear. What follows a bare '<' says what it is. A '/' and a
# letter begin an end tag. A '!--' begins a comment. A '!' begins a declaration, such as a
# doctype or a CDATA section. A '?' begins a processing instruction. Anything else begins
# nothing, so the '<' is text, which HTML's parser reads as an error.
_MARKUP = re.compile(r"""<(?:[A-Za-z][^>"']*+(?:(?:"[^"]*+"|'[^']*+')[^>"']*+)*+>?)?""")
_END_TAG_START = re.compile(r"</[A-Za-z]")


def _as_browsers_read(value: str) -> str:
    """Return ``value`` as a browser reads a URL.

    A browser drops tabs and line breaks, and C0 controls and spaces around the URL.
    """
    return _URL_STRIP.sub("", value).strip(_C0_AND_SPACE)


def url_scheme(value: str) -> str | None:
    """The scheme a browser reads in ``value`` (lower case), or None for a relative URL."""
    match = SCHEME.match(_as_browsers_read(value))
    return match.group(1).lower() if match else None


#: How a relative URL in content may begin. It may begin at the root (``/x``, ``//host/x``),
#: because that is the same from every document. In SVG it may also be ``#id``. That names an
#: element of the SVG itself (``<use>``).
FROM_THE_ROOT = ("/",)
FROM_THE_ROOT_OR_WITHIN = ("/", "#")


def url_problem(
    value: str, schemes: frozenset[str], relative: tuple[str, ...] = FROM_THE_ROOT
) -> str | None:
    """Why ``value`` may not be a URL in content, or None.

    A relative reference (no scheme) must begin with one of ``relative``. Readers resolve it
    against the document they read the entry in. That is the recent document first, and then
    its page. So ``x``, ``../x``, ``?q`` or an empty one would lead to two places. So would
    ``#x``, because feedparser resolves HTML's links. On an archived page that lasts for good.
    """
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

# HTML's tag syntax, as its tokenizer reads it without error. Each attribute of a start tag
# comes after whitespace. A value is quoted, or holds no whitespace, quotes, '=', '<', '>' or
# backquote. A '/>' comes at the end only, and only on a void element. An end tag has nothing but
# whitespace after its name. Python's tokenizer takes more, such as ``<a href="x"title="y">``
# and ``</b foo="1">``.
_WS = "[\t\n\f\r ]"
_VALUE = "(?:\"[^\"]*\"|'[^']*'|[^\t\n\f\r \"'=<>`]+)"
_START_TAG = re.compile(
    rf"<[A-Za-z][A-Za-z0-9]*(?:{_WS}+[^\t\n\f\r />\"'<=]+(?:{_WS}*={_WS}*{_VALUE})?)*{_WS}*/?>"
)
_END_TAG = re.compile(rf"</[A-Za-z][A-Za-z0-9]*{_WS}*>")
_TAG_SYNTAX = "write each attribute after a space, its value in quotes, and an end tag as </name>"


class _Tokens(HTMLParser):
    """Start tags with their attributes, text, and anything else, in document order.

    Text comes in chunks, and a '<' that begins no tag is a chunk of its own. The chunks are
    gathered in a list and joined once, at the next token or the end. So N chunks cost N, not
    N squared.
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
    """Return the tokens of ``text``, and the first tag HTML's tokenizer reads with an error."""
    parser = _Tokens()
    parser.feed(text)
    parser.close()
    return parser.tokens, parser.problem


#: How many bare ampersands HTML content may hold. A bare ``&`` begins no character reference.
#: The time html5ever takes grows with the square of their number. It takes 1.5 s for 500,000
#: of them, while ``&amp;`` is cheap.
MAX_BARE_AMPERSANDS = 4096
# A character reference as HTML writes it in full. A number has at most 8 digits, leading
# zeros aside. No larger number is a code point, and Python's int() of a long one is slow. The
# second pattern finds an '&' that begins neither a reference nor text. HTML's tokenizer reads
# an '&' as text before whitespace, '<', '&' or the end. Anything else begins a reference.
_WRITTEN_REFERENCE = r"#[xX]0*[0-9A-Fa-f]{1,8};|#0*[0-9]{1,8};|[A-Za-z][A-Za-z0-9]{0,40};"
_REFERENCE = re.compile(rf"&({_WRITTEN_REFERENCE})")
_NOT_REFERENCE = re.compile(rf"&(?![\t\n\f\r <&]|$|{_WRITTEN_REFERENCE})")


def _reference_allowed(reference: str) -> bool:
    """Tell whether HTML's parser reads ``reference`` without error.

    A reference is ``amp;``, ``#169;`` or ``#xA9;``, say. It must be a name HTML5 knows, or a
    number for a code point. That code point may not be NUL, CR, a control, a surrogate or a
    noncharacter. Nor may it be past U+10FFFF. The list is html5lib's, which the judge uses.
    """
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
    """Find an '&' that begins a reference HTML's parser reads with an error.

    Such a reference lacks its ';', names what HTML does not know, or gives a code point that
    HTML refuses. Examples are ``AT&T``, ``&copy 2026`` and ``&#128;``. It also finds more
    than :data:`MAX_BARE_AMPERSANDS` bare ones. The search runs in linear time.
    """
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


#: An open start tag up to the first character of an attribute value. That character is the
#: value's quote, or its own first character when unquoted. The pattern is what
#: :func:`_ends_value` matches backwards.
_OPEN_VALUE = re.compile(
    rf"<[A-Za-z][A-Za-z0-9]*(?:{_WS}+[^\t\n\f\r />\"'<=]+(?:{_WS}*={_WS}*{_VALUE})?)*"
    rf"{_WS}+[^\t\n\f\r />\"'<=]+{_WS}*={_WS}*(?P<open>\"[^\"]*|'[^']*|[^\t\n\f\r \"'=<>`]+)"
)
#: How far back from an '&' :func:`_ends_value` looks for its tag's '<'. Past that, the '&'
#: counts as text. It is then refused, like any '&' before a quote or '>' in text.
OPEN_TAG_REACH = 4096


def _ends_value(text: str, at: int) -> bool:
    """Tell whether the '&' at ``at`` is the last character of an attribute value.

    It then sits right before the quote that closes the value, or the '>' after an unquoted
    one. HTML's tokenizer reads such an '&' as text without error (``<a href="/?a=1&">``). It
    reads an '&' before a space the same way.
    """
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
    """Find what Python's tokenizer must not be given, in linear time, or return None.

    The tokenizer reads an unclosed comment, declaration or tag to the end of the text. Then it
    takes only its '<' as text. So N of them cost N times the text, which is quadratic. It
    takes 2.8 s of CPU for 24 KB of ``<a ``, and 0.7 s for 80 KB of ``<!--<p>``. This is
    CVE-2025-6069, fixed in CPython 3.12.11 and 3.13.5. The tokenizer also raises
    AssertionError on some '<![' (``<![<![``).

    Comments, declarations and processing instructions are refused anyway. Here they are
    refused before the tokenizer reads them. A '<' that begins no tag is an error to HTML's
    parser (write ``&lt;``). A tag ends at a '>', so it must have one after it.
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


#: How deep elements may nest in HTML content. The time html5ever (nh3) takes grows with the
#: square of the depth. Nesting 60,000 ``<div>`` (300 KB) takes 4.7 s.
MAX_NESTING = 100
#: Void elements, which never hold others.
VOID_ELEMENTS = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "wbr"})
#: The open elements a start tag closes while one of them is the element open last. Every
#: browser's parser closes them so, by HTML's optional end tags. A list item closes the one
#: before. A row closes the last cell and the row before. A block closes the paragraph it
#: follows.
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
    # A cell or row ends the p, li, dt or dd left open in the cell before it.
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
    """Tell whether HTML's parser ends ``parent``, open last, at a ``child`` start tag in it.

    HTML lets one leave out such an end tag. A paragraph ends at a block, and a list item at
    the next one.
    """
    return parent in _CLOSES.get(child, _CLOSES_NOTHING)


#: HTML's formatting elements. When one is left open, a browser opens it again in each block
#: after it. So 800 ``<b>`` left open before 800 paragraphs (17 KB) make nh3 write 12 MB in
#: 4.9 s.
_FORMATTING = frozenset(
    {"a", "b", "big", "code", "em", "font", "i", "nobr", "s", "small", "strike", "strong"}
    | {"tt", "u"}
)


#: Elements HTML lets a text end in, or an end tag close, without their own end tag.
_OPTIONAL_END = frozenset({"p", "li", "dt", "dd"})
#: An end tag of one of these may close the table parts open in it.
_TABLES = frozenset({"table", "thead", "tbody", "tfoot", "tr"})
_TABLE_PARTS = frozenset({"thead", "tbody", "tfoot", "tr", "td", "th", "colgroup"})
#: The table parts HTML adds itself, around rows and around ``col`` elements.
_IMPLIED = frozenset({"tbody", "colgroup"})
_CLOSES_NOTHING: frozenset[str] = frozenset()
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_BEGINS_WITH_NEWLINE = frozenset({"pre", "listing", "textarea"})
#: A start tag or text, and its depth in the tree. The depth counts the open elements it is in.
Placed = tuple[int, str, str, tuple[tuple[str, str], ...]]


def _tree(tokens: list[Token]) -> tuple[list[Placed], str | None]:
    """Return the tokens' tree, and what in them HTML's parser reads with an error or slowly.

    The tree is each start tag and text with its depth, in document order. The open elements
    are kept as a browser keeps them. But they are never closed by fewer tags than a browser
    closes them with. A start tag closes only elements open last (:data:`_CLOSES`). An end tag
    closes the elements open since its own, if HTML lets one leave out their end tags. HTML
    adds ``tbody`` and ``colgroup`` itself. So they are not counted in the depth, and one
    without attributes is left out. Attribute values and text are as HTML reads them. That
    covers line ends, and the newline that may begin a ``pre``. The time is linear in the
    tokens.

    It refuses elements nested deeper than :data:`MAX_NESTING`. A ``<rt>`` outside ``<ruby>``
    nests, and is counted so. It refuses an end tag that closes no open element. It refuses an
    end tag that leaves open an element whose end tag may not be left out. It refuses an end
    tag of a void element. It refuses a formatting element not closed where it ends. It refuses
    a heading in a heading, and an ``a`` in an ``a``. Last, it refuses anything left open at
    the end but a ``p``, ``li``, ``dt`` or ``dd``.
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
        self.implied = 0  # Open tbody and colgroup elements, not counted in the depth.
        self.texts: list[str] = []  # Text not yet placed. A run at one depth is one text.
        self.text_depth = 0
        self.begins_pre = False

    def text(self, value: str) -> None:
        chunk = value.replace("\r\n", "\n").replace("\r", "\n")
        if self.begins_pre:
            # HTML drops the newline that begins a pre. So nh3 writes "\n\nx" back as "\nx",
            # a newline less. The check is not about that.
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
            if any("\r" in v for _, v in attrs):  # Line ends as HTML reads them.
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
        """Say why a start tag makes HTML's parser work hard or err where it is, or None."""
        last = self.open[-1]
        if last in _FORMATTING:
            below = next((t for t in reversed(self.open) if t not in _FORMATTING), None)
            if below in closes:
                # A browser would close it. It would then open the formatting elements above
                # it again in every block after. So 97 <b> then 20,000 <li> (395 KB) take 22.8 s.
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
        if open_ and open_[-1] == tag:  # Most end tags close the element open last.
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
        """Say what the tokens leave open at their end, or None."""
        if self.texts:
            self._place_text()
        if self.formatting:
            return f"a <{self.formatting[-1]}> left open: close each element where it ends"
        left = next((t for t in reversed(self.open) if t not in _OPTIONAL_END), None)
        if left is not None:
            return f"a <{left}> left open at the end: close each element where it ends"
        return None


#: Noncharacters that XML carries but HTML's parser reads with an error. The error is "Invalid
#: codepoint in stream". They are U+FDD0-U+FDEF, and the last two of each plane. XML refuses
#: U+FFFE and U+FFFF too.
_NONCHARACTER = re.compile(
    "[\ufdd0-\ufdef"
    + "".join(f"{chr(plane << 16 | 0xFFFE)}{chr(plane << 16 | 0xFFFF)}" for plane in range(17))
    + "]"
)


def html_problem(text: str) -> str | None:
    """Say why ``text`` may not be HTML content, or None.

    The module's docstring lists the checks.
    """
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
    """Say why HTML's parser reads ``text`` as another tree or with an error, or None.

    ``text`` is HTML written from the tree of ``tokens``. That is XHTML content as feed readers
    pass it on (:func:`simplefeed.door.xml.html_reading`). The tags and attributes are the
    tree's, and were checked there.
    """
    if "\r" in text:  # Only &#13; makes one in XML, as in HTML, which refuses it.
        return "holds a carriage return (&#13;), which HTML reads as a line feed"
    return _noncharacter_problem(text) or _tree_problem(tokens, text)


def _noncharacter_problem(text: str) -> str | None:
    found = _NONCHARACTER.search(text)
    if found is None:
        return None
    return f"holds U+{ord(found[0]):04X}, a noncharacter, which HTML's parser reads as an error"


def _tree_problem(tokens: list[Token], text: str) -> str | None:
    """Compare the tree ``tokens`` make (:func:`_tree`) with nh3's tree of ``text``.

    Return None when they are the same, or why not.
    """
    tree, problem = _tree(tokens)
    if problem is not None:
        return problem
    cleaned = _CLEANER.clean(text)
    if cleaned == text:  # The same text back from nh3 means the same tree.
        return None
    # What nh3 writes is never much longer than what it read, unless it built elements of its
    # own. Escaping a bare '&' or '<' adds at most four characters each.
    if len(cleaned) > 5 * len(text) + 1024 or _tree(_tokens(cleaned)[0])[0] != tree:
        return (
            "markup that an HTML parser reads otherwise than it is written (the sanitiser nh3 "
            "would build another tree): send well-formed HTML, each element closed where it ends"
        )
    return None


def xml_script_problem(
    tag: str, attributes: Iterable[tuple[str, str]], *, rendered: bool
) -> str | None:
    """Say why an element of inline XML content could run script in a reader, or None.

    Such a reader renders the content, as with SVG. ``tag`` and the attributes go by local
    name. ``rendered`` marks a vocabulary that browsers render, such as SVG and MathML. Browsers
    resolve its URL attributes. Elsewhere an ``action`` or ``data`` is a value, held only to
    the schemes.
    """
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
