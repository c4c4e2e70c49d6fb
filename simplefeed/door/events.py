"""Turn a producer's JSON into :class:`~simplefeed.model.Event` objects, or refuse it.

The module is pure. Bytes and limits go in. Events or a :class:`~simplefeed.errors.RequestError`
come out. The library pydantic checks the shape: types, required fields and unknown fields.
This module checks the rules Atom adds. They cover the characters XML can carry, IRIs,
well-formed XML content and sizes. So whatever passes renders to a valid document. And no
field can add an element or attribute to a page.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import unicodedata
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    SkipValidation,
    StrictInt,
    StrictStr,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from simplefeed import jsontext
from simplefeed.door import markup, uris
from simplefeed.door.languages import PRIMARY_LANGUAGES
from simplefeed.door.xml import check_inline_xml
from simplefeed.errors import InvalidEvent, MalformedRequest, PayloadTooLarge
from simplefeed.model import (
    Author,
    Category,
    Event,
    Link,
    content_mode,
    datetime_to_us,
    text_problem,
)
from simplefeed.settings import Limits

#: An IRI (RFC 3987), checked loosely. It has a scheme. After it come no spaces, no controls,
#: and no delimiters that are never allowed unescaped.
_IRI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:[^\s<>\"{}|\\^`\x00-\x1f\x7f]*\Z")
_MEDIA_TYPE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}\Z"
)
_LANG = re.compile(r"^[A-Za-z]{1,8}(-[A-Za-z0-9]{1,8})*\Z")
#: An RFC 3339 date-time (section 5.6). Its note allows a space for the T. Seconds and an
#: offset are required, in ASCII digits only.
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?"
    r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)

#: How far a producer's ``updated`` may lie in the future. Later entries are never dated before
#: earlier ones. So a far-future date would drag every later entry's ``updated`` with it.
MAX_FUTURE_SKEW_US = 5 * 60 * 1_000_000

ATOM_MEDIA_TYPE = "application/atom+xml"

#: The largest link ``length``. It is the largest signed 64-bit integer, which readers that
#: parse into int64 hold. The Simplefeed consumer reads at most 19 digits.
MAX_LINK_LENGTH = 2**63 - 1

#: The link relations of RFC 4287 (4.2.7.2) that an entry may name. Others are named by an
#: absolute IRI. That is an extension relation (RFC 4287 4.2.7.2 and RFC 8288 2.1.2).
LINK_RELS = frozenset({"alternate", "enclosure", "related", "self", "via"})
#: The prefix that makes a registered relation's name an IRI naming the same relation.
IANA_RELATIONS = "http://www.iana.org/assignments/relation/"
#: The registered relations that an entry may name by an IRI under :data:`IANA_RELATIONS`,
#: besides :data:`LINK_RELS`. They are those the W3C Feed Validator knows as registered (its
#: ``link.py``). RFC 5005's are left out, because they name feed documents, not entries. Any
#: other name under that prefix draws "Unregistered link relationship". Examples are ``bogus``,
#: ``Alternate`` and none at all. The warning would stay on a page kept for good.
IANA_ENTRY_RELS = frozenset(
    {"describedby", "edit", "edit-media", "hub", "license", "payment", "replies", "search"}
    | {"service", "up"}
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class AuthorIn(_Strict):
    name: StrictStr = Field(min_length=1)
    email: StrictStr | None = None
    uri: StrictStr | None = None


class CategoryIn(_Strict):
    term: StrictStr = Field(min_length=1)
    scheme: StrictStr | None = None
    label: StrictStr | None = None


class LinkIn(_Strict):
    href: StrictStr = Field(min_length=1)
    rel: Annotated[
        StrictStr,
        Field(
            description="alternate, enclosure, related, self or via (RFC 4287), or an absolute"
            " IRI naming an extension relation",
            examples=["related", "https://example.com/rels/invoice"],
        ),
    ] = "alternate"
    type: StrictStr | None = None
    hreflang: StrictStr | None = None
    title: StrictStr | None = None
    length: Annotated[StrictInt, Field(ge=0, le=MAX_LINK_LENGTH)] | None = None


#: The names pydantic puts in an error's location for a union's object branch.
_MODEL_NAMES = frozenset(model.__name__ for model in (AuthorIn, CategoryIn, LinkIn))


def _rfc3339_text(value: Any) -> Any:
    """Pass ``updated`` on only as RFC 3339 text.

    The datetime parser it goes to next reads more. It reads numbers and digit strings as Unix
    times, "20261231" as 1970-08-23. It reads ISO 8601 forms that RFC 3339 lacks, such as no
    seconds, or "+0000".
    """
    if not isinstance(value, str) or _RFC3339.fullmatch(value) is None:
        raise PydanticCustomError(
            "rfc3339", "must be RFC 3339 text with seconds and an offset, e.g. 2026-11-21T10:00:00Z"
        )
    if value[17:19] == "60":
        raise PydanticCustomError(
            "rfc3339",
            "is a leap second (:60), which RFC 3339 allows but date parsers of feed readers"
            " (JavaScript's Date among them) refuse: send :59, or the next second's :00",
        )
    return value


class EventIn(_Strict):
    title: StrictStr
    #: As :func:`strict_json` decoded it, not validated again. The JsonValue of pydantic would
    #: make each number a plain ``float``. The content check must see :class:`InexactNumber`.
    content: SkipValidation[JsonValue] = None
    content_type: StrictStr | None = None
    summary: StrictStr | None = None
    author: StrictStr | AuthorIn | None = None
    categories: list[StrictStr | CategoryIn] = Field(default_factory=list)
    links: list[LinkIn] = Field(default_factory=list)
    id: StrictStr | None = None
    # RFC 3339 text. Strict mode would refuse strings. So this one field is lax, once its text
    # is checked.
    updated: (
        Annotated[AwareDatetime, BeforeValidator(_rfc3339_text), Field(strict=False)] | None
    ) = None


def read_body(body: bytes) -> Any:
    """Decode a request body as strict UTF-8, then JSON.

    Raises :class:`MalformedRequest`.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedRequest(
            f"body is not valid UTF-8: {exc.reason} at byte {exc.start}"
        ) from None
    try:
        return strict_json(text)
    except json.JSONDecodeError as exc:
        raise MalformedRequest(
            f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except NotStrictJson as exc:
        raise MalformedRequest(f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise MalformedRequest("body is not usable JSON: nested too deeply") from None


class NotStrictJson(ValueError):
    """JSON that Python's parser takes, but RFC 8259 and I-JSON (RFC 7493) do not."""


def _no_constant(name: str) -> Any:
    raise NotStrictJson(f"{name} is not a JSON number (RFC 8259 section 6)")


class InexactNumber(float):
    """A JSON number that a double does not hold as written.

    It may have more digits than a double keeps, as ``0.1000000000000000055511151231257827``
    has. Or it may be under a double's smallest, as ``1e-400`` is. It holds the nearest double
    and the text as sent. The content check names the text (:func:`_json_value_problem`).
    """

    __slots__ = ("text",)
    text: str


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise NotStrictJson(f"the number {text[:40]} overflows a double (RFC 7493 2.2)")
    # A double holds the number as written when its shortest decimal is the same number.
    # That is what a reader gives back when it reads numbers as doubles and writes them
    # out again (JSON.parse, JSON.stringify).
    if repr(value) != text and not _same_number(value, text):
        inexact = InexactNumber(value)
        inexact.text = text
        return inexact
    return value


def _same_number(value: float, text: str) -> bool:
    """Tell whether the double ``value`` is the number that ``text`` writes in JSON."""
    try:
        return Decimal(repr(value)) == Decimal(text)
    except InvalidOperation:
        # The exponent is past what Decimal holds, 10^18 digits' worth or more. If the digits
        # are all zeros, the number is zero, and the double 0.0 holds it exactly. Else it is
        # far from any double.
        mantissa = text.lstrip("-").partition("e")[0].partition("E")[0]
        return value == 0.0 and not mantissa.replace(".", "").strip("0")


def _finite_int(text: str) -> int:
    if len(text) < 300:  # under 10^300: a double holds its magnitude
        return int(text)
    if math.isinf(float(text)):
        raise NotStrictJson(f"the number {text[:40]}... overflows a double (RFC 7493 2.2)")
    return int(text)


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise NotStrictJson(f"the name {name[:40]!r} appears twice in an object (RFC 7493)")
            seen.add(name)
    return obj


def strict_json(text: str) -> Any:
    """Run ``json.loads`` as strictly as the strictest JSON reader.

    It refuses NaN and Infinity, a number a double cannot hold, and a name twice in an object.
    Raises :class:`json.JSONDecodeError` or :class:`NotStrictJson`.
    """
    if text.startswith("\ufeff"):  # As json.loads says it: JSON text has no byte order mark.
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _STRICT_JSON.decode(text)


#: One strict decoder for every body, because ``json.loads`` with options builds one per call.
_STRICT_JSON = json.JSONDecoder(
    parse_constant=_no_constant,
    parse_float=_finite_float,
    parse_int=_finite_int,
    object_pairs_hook=_unique_names,
)
#: One encoder for every JSON content value, for the same reason.
_CONTENT_JSON = jsontext.writer(ensure_ascii=False, allow_nan=False)


def parse_events(payload: Any, limits: Limits, now_us: int) -> tuple[list[Event], bool]:
    """Validate a decoded body, one event object or a batch (a non-empty array of them).

    Returns the events and whether the body was a batch.
    """
    if isinstance(payload, dict):
        return [parse_event(payload, limits, now_us, None)], False
    if isinstance(payload, list):
        if not payload:
            raise InvalidEvent("a batch must hold at least one event")
        if len(payload) > limits.max_batch:
            raise PayloadTooLarge(
                f"a batch may hold at most {limits.max_batch} events, got {len(payload)}"
            )
        return [parse_event(item, limits, now_us, i) for i, item in enumerate(payload)], True
    raise InvalidEvent("body must be a JSON object (one event) or an array of them (a batch)")


def _where(index: int | None, field: str) -> str:
    return field if index is None else f"[{index}].{field}"


def parse_event(raw: Any, limits: Limits, now_us: int, index: int | None) -> Event:
    if not isinstance(raw, dict):
        raise InvalidEvent("an event must be a JSON object", index=index)
    try:
        ev = EventIn.model_validate(raw)
    except ValidationError as exc:
        # A union has branches, a string or an object. Report the branch the input took,
        # which is the error that went deepest. So an author object without a name reports
        # "author.name: Field required". It does not report "author: Input should be a valid
        # string".
        err = max(
            exc.errors(include_url=False),
            key=lambda e: (e["type"] != "model_type", len(e["loc"])),
        )
        field = ".".join(
            str(p)
            for p in err["loc"]
            if not str(p).startswith(("str", "function")) and p not in _MODEL_NAMES
        )
        field = re.sub(r"\.(\d+)", r"[\1]", field)
        raise InvalidEvent(
            f"{_where(index, field or 'event')}: {err['msg']}", index=index, field=field or None
        ) from None
    return _to_event(ev, limits, now_us, index)


#: Unicode categories that show nothing by themselves. They are spaces, line and paragraph
#: separators, and controls. They include format characters, such as U+200B ZERO WIDTH SPACE,
#: U+2060 WORD JOINER and bidi marks. They include combining marks with no letter to sit on.
_INVISIBLE = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf", "Mn", "Me"})
#: Letters and symbols that show nothing. They are the Hangul fillers, which Unicode makes
#: default-ignorable, and the blank Braille pattern. A reader shows a title of each as blank.
_BLANK_GLYPHS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


#: Format characters drawn as glyphs, so a title of one shows it. Unicode names them
#: Prepended_Concatenation_Mark. Among them are the Arabic number sign and the end of ayah.
_VISIBLE_FORMAT = frozenset(
    "\u0600\u0601\u0602\u0603\u0604\u0605\u06dd\u070f\u0890\u0891\u08e2\U000110bd\U000110cd"
)


#: A printable ASCII character other than the space: something every reader shows.
_SHOWN_ASCII = re.compile("[!-~]")


def _blank(value: str) -> bool:
    """Tell whether a reader would show nothing of ``value``.

    A title of U+200B, say, passes as text but shows nothing.
    """
    if _SHOWN_ASCII.search(value):  # the common case, without a look at each character
        return False
    return all(
        ch in _BLANK_GLYPHS
        or (unicodedata.category(ch) in _INVISIBLE and ch not in _VISIBLE_FORMAT)
        for ch in value
    )


class _Checker:
    def __init__(self, index: int | None) -> None:
        self.index = index

    def fail(self, field: str, message: str) -> InvalidEvent:
        return InvalidEvent(
            f"{_where(self.index, field)}: {message}", index=self.index, field=field
        )

    def text(self, field: str, value: str | None, max_chars: int | None = None) -> str | None:
        """Check a text field (:func:`text_problem`)."""
        if value is None:
            return None
        problem = text_problem(value, max_chars)
        if problem is not None:
            raise self.fail(field, problem)
        return value

    def optional(self, field: str, value: str | None, max_chars: int) -> str | None:
        """Check an optional text field.

        It is absent, or holds something a reader shows. An empty one would read back as
        absent, or the W3C validator calls it blank. Readers strip one of only spaces to
        nothing.
        """
        if value == "":
            raise self.fail(field, "must not be empty (leave it out instead)")
        if value is not None and _blank(value):
            raise self.fail(
                field, "must not be only spaces and invisible characters (leave it out instead)"
            )
        return self.text(field, value, max_chars)

    def iri(self, field: str, value: str | None, max_chars: int) -> str | None:
        """Check an absolute IRI with a scheme that readers may follow.

        The schemes are :data:`markup.EVENT_URL_SCHEMES`, so ``javascript:`` is refused.
        Relative references are refused too. The same entry appears in the recent document
        and in its page, and their base URIs differ. So a relative one would resolve twice.
        """
        if value is None:
            return None
        self.text(field, value, max_chars)
        if not _IRI.match(value):
            raise self.fail(
                field, "must be an absolute IRI (scheme:...) without spaces or control characters"
            )
        problem = markup.url_problem(value, markup.EVENT_URL_SCHEMES)
        if problem:
            raise self.fail(field, f"is {problem}")
        problem = uris.iri_problem(value)
        if problem:
            raise self.fail(field, problem)
        return value


def _media_type_problem(content_type: str) -> str:
    """Say what is wrong with a ``content_type`` that is not text, html, xhtml or a media type.

    A media type here is a bare one. One with parameters (``text/html; charset=latin1``) is
    told that none are taken. It is told which value would be taken, too. Only "must be ... a
    media type (type/subtype)" would mislead, since the value does read as one. A charset has
    nothing to name. Content is a JSON string, always Unicode, and the feed is written in UTF-8.
    """
    bare, semicolon, _ = content_type.partition(";")
    bare = bare.rstrip()
    if semicolon and (bare in ("text", "html", "xhtml") or _MEDIA_TYPE.match(bare)):
        return (
            "takes no parameters, not even a charset (content is a JSON string and the feed is"
            f" UTF-8): send {bare!r} alone"
        )
    return "must be text, html, xhtml or a media type (type/subtype) without parameters"


def _to_event(ev: EventIn, limits: Limits, now_us: int, index: int | None) -> Event:
    c = _Checker(index)
    title = c.text("title", ev.title, limits.max_title_chars)
    assert title is not None
    if _blank(title):
        raise c.fail("title", "must not be empty (nor only spaces and invisible characters)")
    summary = c.optional("summary", ev.summary, limits.max_summary_chars)
    entry_id = _entry_id(c, ev.id, limits.max_id_bytes)
    content_type = _content_type(c, ev.content_type)
    content = _content(c, ev.content, content_type, limits)
    if content is None and content_type is not None:
        # It would be kept, because a replay without it would differ. Yet it would say
        # nothing, because the entry is written without content.
        raise c.fail(
            "content_type",
            'is given without content (a JSON null is content only as JSON text: "null")',
        )
    if content is not None and content_type is None and not isinstance(ev.content, str):
        content_type = "application/json"
    author = _author(c, ev.author)
    categories = _categories(c, ev.categories, limits)
    links = _links(c, ev.links, limits)
    updated_us: int | None = None
    if ev.updated is not None:
        updated_us = _timestamp(c, ev.updated)
        if updated_us > now_us + MAX_FUTURE_SKEW_US:
            raise c.fail("updated", "is more than 5 minutes in the future")
    return Event(
        title=title,
        content=content,
        content_type=content_type,
        summary=summary,
        author=author,
        categories=categories,
        links=links,
        id=entry_id,
        updated_us=updated_us,
    )


def _content_type(c: _Checker, content_type: str | None) -> str | None:
    """Return the content type as carried, in lower case, since media types ignore case.

    RFC 2045 says media types ignore case.
    """
    if content_type is None:
        return None
    content_type = content_type.strip().lower()
    if content_type not in ("text", "html", "xhtml") and not _MEDIA_TYPE.match(content_type):
        raise c.fail("content_type", _media_type_problem(content_type))
    if content_type.startswith(("multipart/", "message/")):
        raise c.fail("content_type", "must not be a composite type (RFC 4287 4.1.3.1)")
    if content_type.endswith("/html") and content_type != "text/html":
        # It would be carried as Base64. Feed validators and readers decode that and read it as
        # HTML. So it would escape the HTML checks.
        raise c.fail("content_type", f"{content_type}: send HTML as html (or text/html)")
    if content_type == "application/xhtml+xml":
        # A reader takes it for a whole XHTML document, which XML content may not be.
        raise c.fail("content_type", f"{content_type}: send XHTML as xhtml (the content of a div)")
    return content_type


def _author(c: _Checker, author: str | AuthorIn | None) -> Author | None:
    if isinstance(author, str):
        named = Author(name=c.text("author", author, 256) or "")
        if _blank(named.name):
            raise c.fail("author", "must not be empty (nor only spaces and invisible characters)")
        return named
    if author is None:
        return None
    email = c.text("author.email", author.email, 256)
    problem = uris.email_problem(email) if email is not None else None
    if problem:
        raise c.fail("author.email", problem)
    found = Author(
        name=c.text("author.name", author.name, 256) or "",
        email=email,
        uri=c.iri("author.uri", author.uri, max_chars=2048),
    )
    if _blank(found.name):
        raise c.fail("author.name", "must not be empty (nor only spaces and invisible characters)")
    return found


def _categories(
    c: _Checker, given: Sequence[str | CategoryIn], limits: Limits
) -> tuple[Category, ...]:
    if len(given) > limits.max_categories:
        raise c.fail("categories", f"at most {limits.max_categories} categories are allowed")
    categories: list[Category] = []
    for i, cat in enumerate(given):
        where = f"categories[{i}]"
        if isinstance(cat, str):
            categories.append(Category(term=c.text(where, cat, 256) or ""))
        else:
            categories.append(
                Category(
                    term=c.text(f"{where}.term", cat.term, 256) or "",
                    scheme=c.iri(f"{where}.scheme", cat.scheme, max_chars=2048),
                    label=c.optional(f"{where}.label", cat.label, 256),
                )
            )
        if _blank(categories[-1].term):
            raise c.fail(where, "term must not be empty (nor only spaces and invisible characters)")
    return tuple(categories)


def _links(c: _Checker, given: Sequence[LinkIn], limits: Limits) -> tuple[Link, ...]:
    if len(given) > limits.max_links:
        raise c.fail("links", f"at most {limits.max_links} links are allowed")
    links: list[Link] = []
    alternates: set[tuple[str | None, str | None]] = set()
    for i, link in enumerate(given):
        where = f"links[{i}]"
        _check_link_type(c, where, link)
        _check_rel(c, where, link)
        if link.rel == "alternate":
            # Media types and language tags are compared without regard to case.
            key = (link.type and link.type.lower(), link.hreflang and link.hreflang.lower())
            if key in alternates:
                raise c.fail(
                    f"{where}.rel",
                    "two alternate links with the same type and hreflang (RFC 4287 4.1.1)",
                )
            alternates.add(key)
        links.append(
            Link(
                href=c.iri(f"{where}.href", link.href, max_chars=2048) or "",
                rel=link.rel,
                type=link.type,
                hreflang=link.hreflang,
                title=c.optional(f"{where}.title", link.title, 1024),
                length=link.length,
            )
        )
    return tuple(links)


def _check_link_type(c: _Checker, where: str, link: LinkIn) -> None:
    """Check that a link's type is a media type, and its hreflang a tag validators know."""
    if link.type is not None and not _MEDIA_TYPE.match(link.type):
        raise c.fail(f"{where}.type", "must be a media type (type/subtype)")
    if link.hreflang is not None:
        if not _LANG.match(link.hreflang):
            raise c.fail(f"{where}.hreflang", "must be a language tag (RFC 3066)")
        primary = link.hreflang.split("-", 1)[0]
        if primary.lower() not in PRIMARY_LANGUAGES:
            raise c.fail(
                f"{where}.hreflang",
                f"must begin with an ISO 639 language code (en, fr-CA, zh-Hant), not"
                f" {primary!r}: feed validators flag any other",
            )


def _check_rel(c: _Checker, where: str, link: LinkIn) -> None:
    """Check that a link's relation is Atom's, registered for entries, or an IRI of its own."""
    if link.rel.lower().startswith(IANA_RELATIONS):
        name = link.rel[len(IANA_RELATIONS) :]
        if name in LINK_RELS:
            # By RFC 4287 4.2.7.2, this is the same relation as the name. The rules below check
            # names.
            raise c.fail(f"{where}.rel", f"{link.rel} is the relation {name}: write {name!r}")
        if name not in IANA_ENTRY_RELS:
            raise c.fail(
                f"{where}.rel",
                f"{link.rel} names no registered relation an entry may have that feed"
                f" validators know ({', '.join(sorted(IANA_ENTRY_RELS))}); name a relation"
                " of your own with an IRI of yours (https://example.com/rels/invoice)",
            )
    if link.rel not in LINK_RELS:
        c.text(f"{where}.rel", link.rel, 2048)
        if not _IRI.match(link.rel):
            raise c.fail(
                f"{where}.rel",
                f"must be one of {', '.join(sorted(LINK_RELS))}, or an absolute IRI naming"
                " an extension relation (https://example.com/rels/invoice)",
            )
        c.iri(f"{where}.rel", link.rel, max_chars=2048)
    if link.rel == "self" and link.type not in (None, ATOM_MEDIA_TYPE):
        raise c.fail(
            f"{where}.type",
            f"a self link names the entry's own Atom document: {ATOM_MEDIA_TYPE} or no type "
            "(use rel alternate or related for other representations)",
        )


def _timestamp(c: _Checker, value: datetime) -> int:
    try:
        us = datetime_to_us(value)
    except OverflowError:
        raise c.fail("updated", f"is outside {UPDATED_RANGE}") from None
    if us < 0:
        raise c.fail("updated", f"must not be before 1970 ({UPDATED_RANGE})")
    return us


#: What ``updated`` may say, in UTC. The upper bound is the server's clock plus the skew.
UPDATED_RANGE = "the accepted range, 1970-01-01T00:00:00Z to 5 minutes after the server's clock"


def _entry_id(c: _Checker, value: str | None, max_bytes: int) -> str | None:
    """Check a producer's entry id.

    It holds at most ``max_bytes`` of UTF-8. It is a URI in canonical form, of one of
    :data:`simplefeed.door.uris.ID_SCHEMES`. See :mod:`simplefeed.door.uris`.
    """
    if value is None:
        return None
    c.text("id", value)
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise c.fail("id", f"is {size} bytes of UTF-8; at most {max_bytes} are allowed")
    problem = uris.id_problem(value, max_bytes)
    if problem:
        raise c.fail("id", problem)
    return value


#: The largest integer a double holds exactly (I-JSON, RFC 7493 2.2). Some readers read JSON
#: numbers as doubles, JavaScript's ``JSON.parse`` among them. They read a larger one as another
#: number, without a word.
MAX_EXACT_INTEGER = 2**53 - 1


_LONE_SURROGATE = "escapes a lone surrogate, which strict JSON refuses"


def _lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _json_value_problem(value: Any, max_depth: int) -> str | None:
    """Say what in a JSON content value some reader would not read as sent, or None.

    It finds nesting deeper than ``max_depth``. It finds a string that escapes a lone
    surrogate. RFC 8259 8.2 leaves such a string unpredictable, and strict parsers refuse it.
    It finds an integer past :data:`MAX_EXACT_INTEGER`. It finds a number a double does not
    hold as written (:class:`InexactNumber`). It walks the value once and stops at the first.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return f"is nested deeper than {max_depth} levels"
        if isinstance(item, str):
            if not item.isascii() and _lone_surrogate(item):
                return _LONE_SURROGATE
        elif isinstance(item, dict):
            # Names sit at their object's depth; an ASCII name is checked at C speed.
            for name in item:
                if not name.isascii() and _lone_surrogate(name):
                    return _LONE_SURROGATE
            stack.extend(zip(item.values(), itertools.repeat(depth + 1)))
        elif isinstance(item, list):
            stack.extend(zip(item, itertools.repeat(depth + 1)))
        elif type(item) is InexactNumber:
            shown = item.text if len(item.text) <= 40 else f"{item.text[:40]}..."
            return (
                f"holds the number {shown}, which a double does not hold: readers that read"
                f" numbers as doubles (JavaScript's JSON.parse among them) would read {item!r}"
                " (RFC 7493 2.2); send it as a string"
            )
        elif type(item) is int and abs(item) > MAX_EXACT_INTEGER:
            digits = str(item)
            shown = digits if len(digits) <= 40 else f"{digits[:40]}..."
            return (
                f"holds the integer {shown}, past 2^53 - 1: readers that read numbers as"
                " doubles (JavaScript's JSON.parse among them) would read another number"
                " (RFC 7493 2.2); send it as a string"
            )
    return None


def _content(c: _Checker, raw: Any, content_type: str | None, limits: Limits) -> str | None:
    if raw is None:
        return None
    if raw == "":
        # It would be written as no content at all, and read back as absent. An empty
        # <content/> is "blank" to the W3C validator.
        raise c.fail("content", "must not be empty (leave it out for an entry without content)")
    mode = content_mode(
        content_type if content_type else (None if isinstance(raw, str) else "application/json")
    )
    if mode in ("text", "html", "xhtml", "textual") and isinstance(raw, str) and _blank(raw):
        # Readers strip it to nothing. They read the entry as having no content, or none.
        raise c.fail(
            "content",
            "must not be only spaces and invisible characters (leave it out for an entry"
            " without content)",
        )
    if not isinstance(raw, str):
        if mode != "json":
            raise c.fail("content", "a JSON value (not a string) needs a JSON content_type")
        problem = _json_value_problem(raw, limits.max_json_depth)
        if problem is not None:
            raise c.fail("content", problem)
        try:
            text = _CONTENT_JSON(raw)
        except ValueError:
            raise c.fail("content", "holds NaN or Infinity, which JSON cannot carry") from None
    else:
        text = raw
        if mode in ("base64", "json"):
            _check_encodable(c, text)
            if mode == "json":
                try:
                    parsed = strict_json(text)
                except (json.JSONDecodeError, RecursionError):
                    raise c.fail("content", f"is not valid JSON for {content_type}") from None
                except NotStrictJson as exc:
                    raise c.fail("content", f"is not strict JSON ({content_type}): {exc}") from None
                problem = _json_value_problem(parsed, limits.max_json_depth)
                if problem is not None:
                    raise c.fail("content", problem)
        else:
            c.text("content", text)
    if len(text) > limits.max_content_chars:
        raise c.fail("content", f"is longer than {limits.max_content_chars} characters")
    if mode in ("xml", "xhtml"):
        problem = check_inline_xml(text, xhtml=mode == "xhtml")
        if problem:
            raise c.fail("content", f"is not usable as inline XML: {problem}")
    elif mode == "html":
        problem = markup.html_problem(text)
        if problem:
            raise c.fail("content", f"is not allowed as HTML: {problem}")
    return text


def _check_encodable(c: _Checker, text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise c.fail("content", "contains a lone surrogate, which UTF-8 cannot encode") from None


def event_json_schemas(ref_template: str) -> dict[str, Any]:
    """Return JSON Schemas of the event object and its parts, for the OpenAPI document."""
    schema = EventIn.model_json_schema(ref_template=ref_template)
    defs: dict[str, Any] = schema.pop("$defs", {})
    defs["Event"] = schema
    return defs
