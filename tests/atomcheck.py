"""A strict Atom checker for the tests.

It checks RFC 4287: its RELAX NG schema, and the rules of its section 4 that the schema cannot
express. It checks the RFC 5005 archive rules, and what feedparser makes of the document.

``check_atom(body, kind=...)`` returns a list of problems. An empty list means the document is
valid. It plays the part of the W3C feed validator, which is not installable here. It is
stricter where Simplefeed promises more than RFC 4287 asks.

* Every entry carries exactly one ``sf:seq``, in our namespace, with a positive integer.
* The entries are ordered newest first. ``sf:seq`` is contiguous and strictly decreasing.
  ``updated`` is strictly decreasing, so no two entries share an ``updated`` value.
* The feed's ``updated`` is the newest entry's.
* Every ``atom:link`` href is an absolute IRI. A relative one would resolve differently in
  the recent document and in the archived page that carry the same entry.
* ``kind`` (``"archive"``, ``"recent"``, ``"working"``) adds the link rules of RFC 5005 and
  DESIGN.md.

The schema is ``tests/data/atom.rng``, which is RFC 4287 Appendix B in RELAX NG XML syntax.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime
from functools import cache
from pathlib import Path

import feedparser
from lxml import etree

ATOM_NS = "http://www.w3.org/2005/Atom"
XHTML_NS = "http://www.w3.org/1999/xhtml"
FH_NS = "http://purl.org/syndication/history/1.0"
SF_NS = "https://simplefeed.dev/ns/1.0"

SCHEMA_PATH = Path(__file__).parent / "data" / "atom.rng"

KINDS = ("archive", "recent", "working")
#: Relations a document may carry at most once. RFC 4287 4.1.1 says so for self, and RFC 5005
#: for the rest.
SINGLE_RELS = ("self", "via", "current", "prev-archive", "next-archive")

_A = f"{{{ATOM_NS}}}"

# RFC 3987: a scheme, then characters an IRI may hold. Those exclude spaces, controls and the
# delimiters that are never allowed unescaped. "%" stands only at the start of an octet.
_IRI_CHARS = r"(?:[^\s<>\"{}|\\^`%\x00-\x1f\x7f-\x9f]|%[0-9A-Fa-f]{2})"
_ABSOLUTE_IRI = re.compile(rf"^[A-Za-z][A-Za-z0-9+.\-]*:{_IRI_CHARS}*$")
_IRI_REFERENCE = re.compile(rf"^{_IRI_CHARS}*$")
_URN_UUID = re.compile(
    r"^urn:uuid:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
# RFC 3339 date-time, with the uppercase "T" and "Z" RFC 4287 section 3.3 demands.
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$"
)
# A MIME media type (RFC 2045 tokens), parameters allowed.
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_MEDIA_TYPE = re.compile(rf"^{_TOKEN}/{_TOKEN}(\s*;\s*{_TOKEN}=({_TOKEN}|\"[^\"]*\"))*$")
_POSITIVE_INT = re.compile(r"^[1-9][0-9]*$")
_NON_NEGATIVE_INT = re.compile(r"^(0|[1-9][0-9]*)$")
_NCNAME_REL = re.compile(r"^[^\s:]+$")

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)


@cache
def _schema() -> etree.RelaxNG:
    return etree.RelaxNG(etree.parse(str(SCHEMA_PATH)))


def check_atom(body: bytes, *, kind: str | None = None) -> list[str]:
    """Return every problem a strict validator finds in ``body``, or ``[]`` when it is valid."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS} or None, got {kind!r}")
    problems: list[str] = []
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        problems.append(f"document is not UTF-8: {exc}")
    try:
        root = etree.fromstring(body, _PARSER)
    except etree.XMLSyntaxError as exc:
        problems.append(f"not well-formed XML: {exc}")
        problems += _feedparser_problems(body, None)
        return problems
    if root.getroottree().docinfo.doctype:  # type: ignore[union-attr]
        problems.append("document has a DOCTYPE declaration")

    schema = _schema()
    if not schema.validate(root):
        for error in schema.error_log:
            problems.append(f"RELAX NG (RFC 4287 appendix B): line {error.line}: {error.message}")
    if root.tag != f"{_A}feed":
        problems.append(f"root element is {root.tag}, not atom:feed")
        return problems

    _check_feed(root, problems)
    if kind is not None:
        _check_history(root, kind, problems)
    problems += _feedparser_problems(body, root)
    return problems


# -- RFC 4287 section 4 and our own promises ---------------------------------------------------


def _where(el: etree._Element) -> str:
    """Return a short name for an element in messages: its tag and line, and its entry's id."""
    local = etree.QName(el).localname
    entry = el if local == "entry" else next(el.iterancestors(f"{_A}entry"), None)
    if entry is not None:
        ident = entry.findtext(f"{_A}id")
        return f"entry {ident!r} (line {entry.sourceline})" + ("" if entry is el else f" {local}")
    return f"feed {local} (line {el.sourceline})" if local != "feed" else "feed"


def _parse_time(el: etree._Element, problems: list[str]) -> datetime | None:
    text = el.text or ""
    m = _RFC3339.match(text)
    if not m:
        problems.append(f"{_where(el)}: {text!r} is not an RFC 3339 date-time")
        return None
    try:
        # Python < 3.11 fromisoformat rejects "Z", so normalise the offset spelling first.
        return datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError as exc:
        problems.append(f"{_where(el)}: {text!r} is not a real date-time: {exc}")
        return None


def _check_iri(el: etree._Element, value: str | None, what: str, problems: list[str]) -> None:
    if value is None:
        return
    if not _ABSOLUTE_IRI.match(value):
        problems.append(f"{_where(el)}: {what} {value!r} is not an absolute IRI")
    elif value.lower().startswith("urn:uuid:") and not _URN_UUID.match(value):
        problems.append(f"{_where(el)}: {what} {value!r} is not a valid urn:uuid")


def _check_feed(feed: etree._Element, problems: list[str]) -> None:
    for el in feed.iter(f"{_A}updated", f"{_A}published"):
        _parse_time(el, problems)
    for el in feed.iter(f"{_A}id"):
        _check_iri(el, el.text or "", "atom:id", problems)
    for el in feed.iter(f"{_A}uri"):
        if not _IRI_REFERENCE.match(el.text or ""):
            problems.append(f"{_where(el)}: atom:uri {el.text!r} is not an IRI reference")
    for el in feed.iter(f"{_A}category"):
        scheme = el.get("scheme")
        if scheme is not None and not _IRI_REFERENCE.match(scheme):
            problems.append(f"{_where(el)}: category scheme {scheme!r} is not an IRI")
        if not (el.get("term") or "").strip():
            problems.append(f"{_where(el)}: category term is empty")
    for el in feed.iter(f"{_A}generator"):
        uri = el.get("uri")
        if uri is not None and not _IRI_REFERENCE.match(uri):
            problems.append(f"{_where(el)}: generator uri {uri!r} is not an IRI")

    _check_links(feed, problems)
    for el in feed.iter(f"{_A}title", f"{_A}summary", f"{_A}subtitle", f"{_A}rights"):
        if el.get("type") in (None, "text", "html") and len(el):
            problems.append(f"{_where(el)}: a {el.get('type') or 'text'} construct has elements")

    entries = feed.findall(f"{_A}entry")
    feed_has_author = feed.find(f"{_A}author") is not None
    for extra in feed.findall(f"{{{SF_NS}}}seq"):
        problems.append(f"{_where(extra)}: sf:seq at feed level")

    ids: dict[str, int] = {}
    previous: tuple[int, datetime | None] | None = None
    for entry in entries:
        where = _where(entry)
        ident = entry.findtext(f"{_A}id")
        if ident is not None:
            if ident in ids:
                problems.append(f"{where}: duplicate atom:id (also at line {ids[ident]})")
            ids.setdefault(ident, getattr(entry, "sourceline", 0) or 0)
        if not (
            feed_has_author
            or entry.find(f"{_A}author") is not None
            or entry.find(f"{_A}source/{_A}author") is not None
        ):
            problems.append(f"{where}: no atom:author in the entry nor in the feed")
        _check_content(entry, problems)

        seqs = entry.findall(f"{{{SF_NS}}}seq")
        seq: int | None = None
        if len(seqs) != 1:
            problems.append(f"{where}: has {len(seqs)} sf:seq elements, not exactly one")
        elif len(seqs[0]) or seqs[0].attrib or not _POSITIVE_INT.match(seqs[0].text or ""):
            problems.append(f"{where}: sf:seq {seqs[0].text!r} is not a positive integer")
        else:
            seq = int(seqs[0].text or "")
        updated_el = entry.find(f"{_A}updated")
        updated = _parse_time(updated_el, []) if updated_el is not None else None

        if previous is not None:
            prev_seq, prev_updated = previous
            if seq is not None and prev_seq:
                if seq >= prev_seq:
                    problems.append(
                        f"{where}: sf:seq {seq} is not lower than the entry before it "
                        f"({prev_seq}): entries must be newest first"
                    )
                elif seq != prev_seq - 1:
                    problems.append(f"{where}: sf:seq {seq} after {prev_seq}: a gap")
            if updated is not None and prev_updated is not None:
                if updated == prev_updated:
                    problems.append(f"{where}: atom:updated equal to the entry before it")
                elif updated > prev_updated:
                    problems.append(
                        f"{where}: atom:updated later than the entry before it: "
                        "entries must be newest first"
                    )
        previous = (seq or 0, updated)

    all_updated = [_parse_time(u, []) for e in entries if (u := e.find(f"{_A}updated")) is not None]
    if len({u for u in all_updated if u is not None}) != len(
        [u for u in all_updated if u is not None]
    ):
        problems.append("two entries share an identical atom:updated instant")

    feed_updated_el = feed.find(f"{_A}updated")
    if entries and feed_updated_el is not None:
        feed_updated = _parse_time(feed_updated_el, [])
        newest = [u for u in all_updated if u is not None]
        if feed_updated is not None and newest and feed_updated != max(newest):
            problems.append(
                f"feed updated {feed_updated_el.text!r} is not the newest entry's updated"
            )


def _check_links(feed: etree._Element, problems: list[str]) -> None:
    for owner in [feed, *feed.findall(f"{_A}entry")]:
        alternates: set[tuple[str | None, str | None]] = set()
        for link in owner.findall(f"{_A}link"):
            href = link.get("href")
            where = _where(link)
            if href is None:
                continue  # The schema reports it.
            if not _ABSOLUTE_IRI.match(href):
                problems.append(f"{where}: href {href!r} is not an absolute IRI")
            rel = link.get("rel")
            if rel is not None and not (_NCNAME_REL.match(rel) or _ABSOLUTE_IRI.match(rel)):
                problems.append(f"{where}: rel {rel!r} is neither a name nor an IRI")
            if rel in (None, "alternate"):
                key = (link.get("type"), (link.get("hreflang") or "").lower() or None)
                if key in alternates:
                    problems.append(
                        f"{where}: a second alternate link with type={key[0]!r} hreflang={key[1]!r}"
                    )
                alternates.add(key)
            mtype = link.get("type")
            if mtype is not None and not _MEDIA_TYPE.match(mtype):
                problems.append(f"{where}: type {mtype!r} is not a media type")
            length = link.get("length")
            if length is not None and not _NON_NEGATIVE_INT.match(length):
                problems.append(f"{where}: length {length!r} is not a number of octets")


def _content_kind(ctype: str | None) -> str:
    if ctype is None or ctype in ("text", "html"):
        return "text"
    if ctype == "xhtml":
        return "xhtml"
    media = ctype.split(";", 1)[0].strip().lower()
    if media.endswith("/xml") or media.endswith("+xml"):
        return "xml"
    if media.startswith("text/"):
        return "textual"
    return "base64"


def _check_content(entry: etree._Element, problems: list[str]) -> None:
    where = _where(entry)
    contents = entry.findall(f"{_A}content")
    has_alternate = any(
        link.get("rel") in (None, "alternate") for link in entry.findall(f"{_A}link")
    )
    if not contents and not has_alternate:
        problems.append(f"{where}: neither atom:content nor an alternate link")
    has_summary = entry.find(f"{_A}summary") is not None
    for content in contents:
        ctype = content.get("type")
        kind = _content_kind(ctype)
        text = "".join(str(t) for t in content.itertext()) if kind != "xhtml" else ""
        children = list(content)
        if ctype is not None and kind != "text" and kind != "xhtml":
            media = ctype.split(";", 1)[0].strip().lower()
            if not _MEDIA_TYPE.match(ctype):
                problems.append(f"{where}: content type {ctype!r} is not a media type")
            elif media.startswith(("multipart/", "message/")):
                problems.append(f"{where}: content type {ctype!r} is a composite type")
        if content.get("src") is not None:
            if ctype is None:
                problems.append(f"{where}: out-of-line content without a type")
            if children or (content.text or "").strip():
                problems.append(f"{where}: out-of-line content is not empty")
            if not has_summary:
                problems.append(f"{where}: out-of-line content without atom:summary")
            _check_iri(content, content.get("src"), "content src", problems)
            continue
        if kind in ("text", "textual") and children:
            problems.append(f"{where}: {ctype or 'text'} content has child elements")
        elif kind == "xml":
            elements = [c for c in children if isinstance(c.tag, str)]
            loose = (content.text or "") + "".join(c.tail or "" for c in children)
            if len(elements) != 1 or loose.strip():
                problems.append(
                    f"{where}: {ctype} content must be one XML element (found "
                    f"{len(elements)} elements and {len(loose.strip())} characters of text)"
                )
        elif kind == "base64":
            if children:
                problems.append(f"{where}: {ctype} content has child elements")
            compact = re.sub(r"\s+", "", text)
            try:
                base64.b64decode(compact, validate=True)
            except (binascii.Error, ValueError):
                problems.append(f"{where}: {ctype} content is not valid Base64")
            if not has_summary:
                problems.append(f"{where}: Base64 ({ctype}) content without atom:summary")


# -- RFC 5005 -----------------------------------------------------------------------------------


def _check_history(feed: etree._Element, kind: str, problems: list[str]) -> None:
    links: dict[str, list[str]] = {}
    for link in feed.findall(f"{_A}link"):
        links.setdefault(link.get("rel") or "alternate", []).append(link.get("href") or "")
    for rel in SINGLE_RELS:
        if len(links.get(rel, [])) > 1:
            problems.append(f"feed has {len(links[rel])} {rel} links; at most one is allowed")
    archives = feed.findall(f"{{{FH_NS}}}archive")
    if feed.findall(f"{{{FH_NS}}}complete"):
        problems.append("feed carries fh:complete: an archived feed is never complete")

    def one(rel: str) -> str | None:
        hrefs = links.get(rel, [])
        if not hrefs:
            problems.append(f"{kind} document has no {rel} link")
            return None
        return hrefs[0]

    def none(rel: str) -> None:
        if rel in links:
            problems.append(f"{kind} document must not have a {rel} link")

    if kind == "archive":
        if len(archives) != 1:
            problems.append(f"archive document has {len(archives)} fh:archive elements, not 1")
        for el in archives:
            if len(el) or (el.text or "").strip():
                problems.append("fh:archive is not empty")
        self_href = one("self")
        one("current")
        one("next-archive")
        first = self_href is not None and self_href.endswith("/pages/1")
    else:
        if archives:
            problems.append(f"{kind} document carries fh:archive")
        none("next-archive")
        if kind == "recent":
            self_href = one("self")
            if self_href is not None and not self_href.endswith("/recent"):
                problems.append(f"recent document's self link {self_href!r} is not .../recent")
            via = one("via")
            first = via is not None and via.endswith("/pages/1")
        else:
            self_href = one("self")
            one("current")
            first = self_href is not None and self_href.endswith("/pages/1")
    if first:
        none("prev-archive")
    else:
        one("prev-archive")


# -- feedparser ---------------------------------------------------------------------------------


def _feedparser_problems(body: bytes, root: etree._Element | None) -> list[str]:
    problems: list[str] = []
    parsed = feedparser.parse(body)
    if parsed.get("bozo"):
        problems.append(f"feedparser: bozo ({parsed.get('bozo_exception')!r})")
    if root is None:
        return problems
    seen = {(link.get("rel"), link.get("href")) for link in parsed.feed.get("links", [])}
    for link in root.findall(f"{_A}link"):
        pair = (link.get("rel") or "alternate", link.get("href"))
        if pair not in seen:
            problems.append(f"feedparser does not see the feed link rel={pair[0]!r} {pair[1]!r}")
    by_id = {e.get("id"): e for e in parsed.entries}
    for entry in root.findall(f"{_A}entry"):
        ident = entry.findtext(f"{_A}id")
        parsed_entry = by_id.get(ident)
        if parsed_entry is None:
            problems.append(f"feedparser does not see entry {ident!r}")
            continue
        seen = {(link.get("rel"), link.get("href")) for link in parsed_entry.get("links", [])}
        present = {
            (link.get("rel") or "alternate", link.get("href"))
            for link in entry.findall(f"{_A}link")
        }
        for rel, href in sorted(present - seen, key=str):
            problems.append(f"feedparser does not see entry {ident!r} link rel={rel!r} {href!r}")
        for rel, href in sorted(seen - present, key=str):
            problems.append(
                f"feedparser sees a link the entry {ident!r} does not have: rel={rel!r} {href!r}"
            )
    if len(parsed.entries) != len(root.findall(f"{_A}entry")):
        problems.append(
            f"feedparser sees {len(parsed.entries)} entries, the document has "
            f"{len(root.findall(f'{_A}entry'))}"
        )
    return problems
