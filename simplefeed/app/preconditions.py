"""Conditional requests (RFC 9110 section 13) for GET and HEAD: pure decisions, no I/O.

:func:`evaluate` takes the request's ``If-*`` headers (a WSGI environ) and what the server knows
of the selected representation. It says whether the answer is the representation (None), a 304
or a 412. The order is RFC 9110 13.2.2's. If-Match comes first, else If-Unmodified-Since, with
412 when false. Then If-None-Match, else If-Modified-Since, with 304 when false. Some date
headers are ignored (13.1.3, 13.1.4). Those are a value that does not parse as one of the three
HTTP date formats (5.6.7), and a list of dates among them.

Every route that serves a document answers through this one function, so they answer alike.
That covers the app's routes, and through it the shipped uWSGI and nginx configurations.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Mapping
from typing import Any

_MONTHS = {m: i for i, m in enumerate(calendar.month_abbr) if m}
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_LONG_DAY = r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_MONTH = r"(?P<month>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TIME = r"(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)"
# IMF-fixdate, RFC 850 and asctime (RFC 9110 5.6.7), each the whole value. With re.ASCII, DIGIT
# is 0-9 (RFC 5234), not every script's digits, as \d is for str patterns.
_IMF = re.compile(rf"{_DAY}, (?P<day>\d\d) {_MONTH} (?P<year>\d{{4}}) {_TIME} GMT", re.ASCII)
_RFC850 = re.compile(rf"{_LONG_DAY}, (?P<day>\d\d)-{_MONTH}-(?P<yy>\d\d) {_TIME} GMT", re.ASCII)
_ASCTIME = re.compile(rf"{_DAY} {_MONTH} (?P<day>[ \d]\d) {_TIME} (?P<year>\d{{4}})", re.ASCII)

# An entity tag (RFC 9110 8.8.3): optional W/ and a quoted opaque part without '"'.
_ETAG = re.compile(r'\s*(W/)?"([\x21\x23-\x7e\x80-\xff]*)"\s*(?:,|$)')


def parse_http_date(value: str, now_s: int) -> int | None:
    """Seconds since the epoch for an HTTP date in any of its three formats; None if invalid.

    A two-digit RFC 850 year might be more than 50 years after ``now_s``. It is then taken as
    the most recent past year with those digits (RFC 9110 5.6.7).
    """
    value = value.strip(" \t")
    match = _IMF.fullmatch(value) or _ASCTIME.fullmatch(value)
    if match is not None:
        year = int(match["year"])
    else:
        match = _RFC850.fullmatch(value)
        if match is None:
            return None
        this_year = time.gmtime(now_s).tm_year
        year = this_year - this_year % 100 + int(match["yy"])
        if year > this_year + 50:
            year -= 100
    day, hour, minute, second = (int(match[k]) for k in ("day", "h", "m", "s"))
    month = _MONTHS[match["month"]]
    if not (
        1 <= day <= calendar.monthrange(year, month)[1]
        and hour < 24
        and minute < 60
        and second < 61
    ):
        return None
    return calendar.timegm((year, month, day, hour, minute, min(second, 59)))


def entity_tags(header: str) -> list[tuple[bool, str]] | None:
    """The (weak, opaque-tag) pairs of an If-Match/If-None-Match list; None if it is not one."""
    tags: list[tuple[bool, str]] = []
    pos = 0
    while pos < len(header):
        if header[pos] in " \t,":
            pos += 1
            continue
        match = _ETAG.match(header, pos)
        if match is None:
            return None
        tags.append((match[1] is not None, match[2]))
        pos = match.end()
    return tags


def _opaque(etag: str) -> tuple[bool, str]:
    weak = etag.startswith("W/")
    return weak, etag.removeprefix("W/").strip('"')


def _if_match(header: str, etag: str) -> bool:
    """Strong comparison (RFC 9110 13.1.1): a weak tag never matches."""
    if header.strip() == "*":
        return True
    tags = entity_tags(header)
    weak, opaque = _opaque(etag)
    return tags is not None and not weak and any(not w and t == opaque for w, t in tags)


def _if_none_match(header: str, etag: str) -> bool:
    """True if the client's copy is current: weak comparison (13.1.2), or ``*``."""
    if header == etag or header.strip() == "*":
        return True
    tags = entity_tags(header)
    opaque = _opaque(etag)[1]
    return tags is not None and any(t == opaque for _, t in tags)


def evaluate(
    env: Mapping[str, Any],
    etag: str,
    modified_s: int,
    *,
    settled: bool,
    now_s: int,
) -> int | None:
    """304, 412, or None (send the representation) for a GET or HEAD.

    ``modified_s`` is the representation's modification time in whole seconds. ``settled`` is
    False while that second is still running. The Last-Modified header is not sent then, and
    If-Modified-Since cannot say "not modified".
    """
    if_match = env.get("HTTP_IF_MATCH")
    if if_match is not None:
        if not _if_match(if_match, etag):
            return 412
    else:
        header = env.get("HTTP_IF_UNMODIFIED_SINCE")
        since = parse_http_date(header, now_s) if header is not None else None
        # Unsettled, a change may still follow within `since`'s own second.
        if since is not None and not (modified_s <= since if settled else modified_s < since):
            return 412
    if_none_match = env.get("HTTP_IF_NONE_MATCH")
    if if_none_match is not None:
        return 304 if _if_none_match(if_none_match, etag) else None
    header = env.get("HTTP_IF_MODIFIED_SINCE")
    if header is not None and settled:
        since = parse_http_date(header, now_s)
        if since is not None and modified_s <= since:
            return 304
    return None


# A delta-seconds value (RFC 9111 1.2.2 / RFC 7240 4.3), bare or quoted.
_SECONDS = re.compile(r'"?([0-9]+)"?')
#: Digits past which a delta-seconds is more than any wait. RFC 9111 1.2.2 counts a value too
#: large to represent as 2^31, and any cap is below that.
_MAX_DIGITS = 9


def preferred_wait(header: str, cap: int) -> int | None:
    """The seconds of a ``Prefer`` header's ``wait`` preference (RFC 7240 4.3), at most ``cap``.

    None if it has none, or an invalid one, because preferences not understood are ignored
    (RFC 7240 2). None too if it or ``cap`` is 0. The first ``wait`` counts.
    """
    for preference in header.split(","):
        name, _, value = preference.partition(";")[0].partition("=")
        if name.strip().lower() != "wait":
            continue
        match = _SECONDS.fullmatch(value.strip())
        if match is None:
            return None
        digits = match[1].lstrip("0")
        seconds = cap if len(digits) > _MAX_DIGITS else min(int(digits or "0"), cap)
        return seconds or None
    return None
