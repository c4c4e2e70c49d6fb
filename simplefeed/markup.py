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
from collections.abc import Iterable
from html.parser import HTMLParser

import nh3

ALLOWED_TAGS: frozenset[str] = frozenset(nh3.ALLOWED_TAGS)
#: nh3's attributes per tag, and (ammonia's default generic attributes) on every tag.
ALLOWED_ATTRIBUTES: dict[str, frozenset[str]] = {
    tag: frozenset(names) for tag, names in nh3.ALLOWED_ATTRIBUTES.items()
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
        return f"<{tag}> is not allowed (allowed: the tags of the sanitiser nh3)"
    return None


Token = tuple[str, str, tuple[tuple[str, str], ...]]


class _Tokens(HTMLParser):
    """Start tags with their attributes, text, and anything else, in document order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tokens: list[Token] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tokens.append(("start", tag, tuple((k, v or "") for k, v in attrs)))

    handle_startendtag = handle_starttag

    def handle_data(self, data: str) -> None:
        if self.tokens and self.tokens[-1][0] == "text":
            data = self.tokens.pop()[1] + data
        self.tokens.append(("text", data, ()))

    def handle_comment(self, data: str) -> None:
        self.tokens.append(("comment", data, ()))

    def handle_decl(self, decl: str) -> None:
        self.tokens.append(("declaration", decl, ()))

    def handle_pi(self, data: str) -> None:
        self.tokens.append(("processing instruction", data, ()))

    def unknown_decl(self, data: str) -> None:
        self.tokens.append(("declaration", data, ()))


def _tokens(text: str) -> list[Token]:
    parser = _Tokens()
    parser.feed(text)
    parser.close()
    return parser.tokens


def _comparable(tokens: list[Token]) -> list[Token]:
    """Start tags (attributes sorted) and text, as two HTML parsers should agree on them:
    line ends as HTML reads them, the ``tbody`` HTML implies in a table left out."""
    out: list[Token] = []
    for kind, value, attrs in tokens:
        if kind == "start" and value == "tbody" and not attrs:
            continue
        if kind == "text":
            value = value.replace("\r\n", "\n").replace("\r", "\n")
            if out and out[-1][0] == "text":
                value = out.pop()[1] + value
        out.append((kind, value, tuple(sorted(attrs))))
    return out


def html_problem(text: str) -> str | None:
    """Why ``text`` may not be HTML content, or None. See the module's docstring."""
    tokens = _tokens(text)
    for kind, value, attrs in tokens:
        if kind == "start":
            problem = element_problem(value)
            for name, attr_value in attrs:
                problem = problem or attribute_problem(value, name, attr_value)
            if problem:
                return problem
        elif kind != "text":
            return f"a {kind} ({value[:40]!r}) is not allowed"
    if _comparable(_tokens(_CLEANER.clean(text))) != _comparable(tokens):
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
