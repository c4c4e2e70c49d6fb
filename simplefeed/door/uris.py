"""What the door accepts as an entry id, an e-mail address and a URL, as pure rules.

Entry ids are compared character by character (RFC 4287 4.2.6). So one entry could be sent
under two spellings of one URI and become two entries. ``HTTP://Example.COM/a`` and
``http://example.com/a`` are such spellings. Ids must therefore arrive in canonical form.

The function :func:`canonical_uri` gives that form. It normalises as RFC 3986 sections 6.2.2
and 6.2.3 say, as the W3C Feed Validator computes it. It adds the case rules of the ``urn``,
``urn:uuid`` and ``tag`` schemes. The function :func:`id_problem` refuses anything else. It
says what the canonical form would be.

Only schemes that name things stably are taken. The validator must accept them without a
warning too. They are ``http``, ``https``, ``tag`` (RFC 4151) and ``urn`` (RFC 2141 syntax).
A ``urn:uuid`` must hold a UUID.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import unicodedata
from datetime import date
from urllib.parse import quote

from simplefeed.model import BAD_PERCENT

ID_SCHEMES = ("http", "https", "tag", "urn")

_SUB_DELIMS = "!$&'()*+,;="
_PCHAR = "-._~" + _SUB_DELIMS + ":@"
_RESERVED = ":/?#[]@" + _SUB_DELIMS
_DEFAULT_PORTS = {"http": "80", "https": "443"}
# RFC 3986 appendix B, anchored.
_URI_REFERENCE = re.compile(r"^(([^:/?#]+):)?(//([^/?#]*))?([^?#]*)(\?([^#]*))?(#(.*))?$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*\Z")
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
# RFC 1035 and 1123 host names. Labels of 1-63 letters, digits and inner hyphens, dot-separated.
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*\Z")
# RFC 2141, the W3C validator's grammar for URNs. The namespace id is in lower case.
_URN = re.compile(r"^urn:([a-z0-9][a-z0-9-]{1,31}):(?:[A-Za-z0-9()+,\-.:=@;$_!*']|%[0-9A-F]{2})+\Z")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
# A UUID URN in canonical form: lower case throughout.
_UUID_URN = re.compile(r"urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
# RFC 4151 reads tag:authorityName,date:specific[#fragment]. The characters are the
# validator's. The date is in ASCII digits, because the validator's \d takes other scripts' too.
_TAG = re.compile(
    rf"^tag:(?:([a-z0-9\-._]+)@)?({_LABEL}(?:\.{_LABEL})*),(\d{{4}})(?:-(\d{{2}})(?:-(\d{{2}}))?)?:"
    r"[0-9a-zA-Z;/?:@&=+$.\-_!~*'()%,]*(?:#[0-9a-zA-Z;/?:@&=+$.\-_!~*'()%,]*)?\Z",
    re.ASCII,
)
# RFC 5322 addr-spec, in dot-atom forms only, with a host name of at least two labels. Quoted
# local parts and domain literals are left out, because the W3C validator refuses them.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_ANY_CASE_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_ADDR_SPEC = re.compile(rf"^{_ATEXT}+(?:\.{_ATEXT}+)*@{_ANY_CASE_LABEL}(?:\.{_ANY_CASE_LABEL})+\Z")


class NotAUri(ValueError):
    pass


#: RFC 3986's unreserved characters besides letters and digits.
_UNRESERVED_MARKS = "-._~"


@functools.cache
def _plain(safe: str) -> re.Pattern[str]:
    """What :func:`_normalise` leaves as it is: unreserved characters and ``safe`` ones."""
    return re.compile(f"[A-Za-z0-9{re.escape(_UNRESERVED_MARKS + safe)}]*")


def _normalise(part: str, safe: str) -> str:
    """Normalise the percent-encoding of ``part``.

    Octets are decoded, unless they are delimiters kept encoded. Those are reserved characters
    outside ``safe``. The text is NFC-normalised. Then it is encoded again with upper-case hex.
    Unreserved characters and ``safe`` stay as they are.
    """
    if _plain(safe).fullmatch(part):
        # Only unreserved characters and ``safe`` ones, each of which stays as it is. Most ids
        # are such, and :func:`_recode` costs tens of microseconds.
        return part
    return _recode(part, safe)


def _recode(part: str, safe: str) -> str:
    """:func:`_normalise`, one character at a time."""
    out: list[str] = []
    pending = bytearray()

    def flush() -> None:
        try:
            text = pending.decode("utf-8")
        except UnicodeDecodeError:
            raise NotAUri("percent-encoded octets that are not UTF-8") from None
        out.append(quote(unicodedata.normalize("NFC", text), safe=safe))
        pending.clear()

    i = 0
    while i < len(part):
        ch = part[i]
        if ch == "%":
            if not _PERCENT.match(part, i):
                raise NotAUri("a '%' not followed by two hex digits")
            octet = int(part[i + 1 : i + 3], 16)
            token = part[i : i + 3].upper()
            i += 3
        else:
            octet = -1
            token = ch
            i += 1
        char = chr(octet) if octet >= 0 else ch
        if char in _RESERVED and char in safe:
            flush()
            out.append(token)  # A delimiter, literal or encoded, stays as it was sent.
        elif octet >= 0:
            pending.append(octet)
        else:
            pending += ch.encode("utf-8")
    flush()
    return "".join(out)


def _remove_dot_segments(path: str) -> str:
    segments = path.split("/")
    out: list[str] = []
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == ".":
            if last:
                out.append("")
        elif segment == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(segment)
    return "/".join(out) or "/"


def canonical_uri(value: str) -> str:
    """Return the canonical form of an absolute URI or IRI.

    Non-ASCII characters are percent-encoded as UTF-8. Raises :class:`NotAUri` when it has none.
    """
    match = _URI_REFERENCE.match(value)
    if match is None or match.group(2) is None or not _SCHEME.match(match.group(2)):
        raise NotAUri("not an absolute URI (scheme:...)")
    scheme = match.group(2).lower()
    authority, path = match.group(4), match.group(5)
    if authority is not None:
        userinfo, at, host = authority.rpartition("@")
        host, colon, port = host.partition(":") if not host.startswith("[") else (host, "", "")
        if colon and port and not port.isdigit():
            raise NotAUri("a port that is not a number")
        host = host.lower()
        if host.endswith(".") and "." in host[:-1]:
            host = host[:-1]
        if port == _DEFAULT_PORTS.get(scheme):
            port = ""
        canonical_authority = (
            (_normalise(userinfo, _SUB_DELIMS + ":") + "@" if at else "")
            + _normalise(host, _SUB_DELIMS)
            + (":" + port if port else "")
        )
        segments = _remove_dot_segments(path).split("/") if path else ["", ""]
        path = "/".join(_normalise(s, _PCHAR) for s in segments)
        rest = f"//{canonical_authority}{path}"
    else:
        rest = _normalise(path, _PCHAR + "/")
        if scheme == "urn":
            nid, colon, nss = rest.partition(":")
            rest = nid.lower() + colon + (nss.lower() if nid.lower() == "uuid" else nss)
        elif scheme == "tag":
            authority_name, comma, tail = rest.partition(",")
            rest = authority_name.lower() + comma + tail
    query, fragment = match.group(7), match.group(9)
    return (
        f"{scheme}:{rest}"
        + (f"?{_normalise(query, _PCHAR + '/?')}" if query is not None else "")
        + (f"#{_normalise(fragment, _PCHAR + '/?')}" if fragment is not None else "")
    )


def id_problem(value: str, max_bytes: int | None = None) -> str | None:
    """Say why ``value`` cannot be an entry id, or None.

    The module's docstring gives the rules. A non-canonical id is told its canonical form.
    ``max_bytes`` caps the UTF-8 length of that suggested form.
    """
    if _UUID_URN.match(value):
        return None  # The common id, canonical as it stands, so spared the general checks.
    scheme = value.partition(":")[0].lower()
    if scheme not in ID_SCHEMES or ":" not in value:
        return f"must be a URI with one of the schemes {', '.join(ID_SCHEMES)}"
    try:
        canonical = canonical_uri(value)
    except NotAUri as exc:
        return f"is not a URI: {exc}"
    if canonical != value:
        # Suggest the canonical form only if the door takes it. Else say what is wrong.
        size = len(canonical.encode("utf-8"))
        if max_bytes is not None and size > max_bytes:
            return (
                "is not in canonical form (RFC 3986 6.2, percent-encoding), which is"
                f" {size} bytes of UTF-8; at most {max_bytes} are allowed: use a shorter id"
            )
        return id_problem(canonical) or (
            f"is not in canonical form (RFC 3986 6.2, case, percent-encoding, default port); "
            f"send {canonical!r}"
        )
    if scheme in ("http", "https"):
        authority = value[len(scheme) + 1 :]
        host = re.match(r"^//(?:[^@/?#]*@)?([^:/?#]*)", authority)
        if host is None or not _HOST.match(host.group(1)):
            return "must name a host (http://host/...), by a DNS name"
        return None
    if scheme == "urn":
        urn = _URN.match(value)
        if urn is None:
            return "is not a URN (RFC 2141: urn:<namespace id>:<specific string>)"
        if urn.group(1) == "uuid":
            uuid_text = value[len("urn:uuid:") :]
            if not _UUID.match(uuid_text):
                return "is not a UUID URN (urn:uuid: then 8-4-4-4-12 hex digits)"
        return None
    tag = _TAG.match(value)
    if tag is None:
        return "is not a tag URI (RFC 4151: tag:<domain or e-mail>,<YYYY[-MM[-DD]]>:<name>)"
    year, month, day = (int(g) if g else 1 for g in tag.group(3, 4, 5))
    try:
        date(year, month, day)
    except ValueError:
        return "is not a tag URI (RFC 4151): its date is not a calendar date"
    return None


# The W3C Feed Validator's URI grammar, from validators.py, rfc2396 and rfc3987. URNs, UUID
# URIs and tag URIs follow their RFCs, in any case. Anything else takes RFC 2396 characters,
# after IDNA encoding.
_ANY_URN = re.compile(
    r"^[Uu][Rr][Nn]:[a-zA-Z0-9][a-zA-Z0-9-]{1,31}:([a-zA-Z0-9()+,.:=@;$_!*'\-]|%[0-9A-Fa-f]{2})+\Z"
)
_ANY_UUID = re.compile(
    r"^[Uu][Rr][Nn]:[Uu][Uu][Ii][Dd]:[a-fA-F0-9]{8}-[a-fA-F0-9]{4}-[a-fA-F0-9]{4}-"
    r"[a-fA-F0-9]{4}-[a-fA-F0-9]{12}\Z"
)
_ANY_TAG = re.compile(
    r"^tag:([a-z0-9\-._]+?@)?[a-z0-9.\-]+?,\d{4}(-\d{2}(-\d{2})?)?:"
    r"[0-9a-zA-Z;/?:@&=+$.\-_!~*'()%,]*(#[0-9a-zA-Z;/?:@&=+$.\-_!~*'()%,]*)?\Z",
    re.ASCII,
)
_RFC2396 = re.compile(
    r"([a-zA-Z][0-9a-zA-Z+\-.]*:)?/{0,2}(\[[0-9A-Fa-f:]+\])?[0-9a-zA-Z;/?:@&=+$.\-_!~*'()%,#]*\Z"
)


def iri_problem(value: str) -> str | None:
    """Say why the W3C Feed Validator would flag ``value``, or None.

    The value is a link, scheme, author URI or namespace name. It is an absolute IRI already.
    The validator flags a ``urn:`` that is not RFC 2141, or a ``urn:uuid:`` that holds no UUID.
    It flags a ``tag:`` that is not RFC 4151, and characters RFC 3987 does not allow. It flags
    an ``http(s):`` or ``ftp:`` URL without ``//host``. It flags a ``%`` that does not begin a
    percent-encoded octet.
    """
    if BAD_PERCENT.search(value):
        return "has a % not followed by two hex digits (RFC 3986 2.1: write a % itself as %25)"
    scheme = value.partition(":")[0].lower()
    if scheme == "urn":
        if value.lower().startswith("urn:uuid:"):
            return None if _ANY_UUID.match(value) else "is not a UUID URN (8-4-4-4-12 hex digits)"
        if not _ANY_URN.match(value):
            return "is not a URN (RFC 2141: urn:<namespace id of 2-32 characters>:<string>)"
        return None
    if scheme == "tag":
        if not _ANY_TAG.match(value):
            return "is not a tag URI (RFC 4151: tag:<domain or e-mail>,<YYYY[-MM[-DD]]>:<name>)"
        return None
    try:
        ascii_form = value.encode("idna").decode("ascii")
    except UnicodeError:
        ascii_form = value
    if not _RFC2396.match(ascii_form):
        return "is not a valid IRI (RFC 3987: characters such as [ ] are percent-encoded)"
    if scheme in ("http", "https", "ftp"):
        authority = re.match(r"^\w+://([^/?#]*)", value)
        if authority is None or not authority[1]:
            return f"is not a {scheme} URL ({scheme}://host/...)"
        # The host and port after any userinfo. An IPv6 host is in [ ] (RFC 3986 3.2.2).
        hostport = authority[1].rpartition("@")[2]
        if hostport.startswith("["):
            host, closed, after = hostport[1:].partition("]")
            if not closed or (after and not after.startswith(":")):
                return "has a host in [ ] that does not end with ] (an IPv6 host: [2001:db8::1])"
            if not _is_ipv6(host):
                # A browser's URL parser throws on anything else there, such as IPvFuture or
                # a zone id.
                return f"has [{host[:40]}] as its host, not an IPv6 address"
            port = after[1:]
        else:
            port = hostport.partition(":")[2]
        if port and not (port.isascii() and port.isdigit() and int(port) <= 65535):
            # WHATWG URL parsers throw on it, such as a browser's or Node's new URL().
            return f"has the port {port[:20]!r}, not one of 0-65535"
    return None


def _is_ipv6(text: str) -> bool:
    if "%" in text:  # A zone id, which means something only on the host that wrote it.
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def email_problem(value: str) -> str | None:
    """Say why ``value`` is not an RFC 5322 addr-spec that an Atom reader accepts, or None."""
    if len(value) > 254 or not _ADDR_SPEC.match(value):
        return "must be an e-mail address (RFC 5322 addr-spec: name@host.domain, no mailto:, no <>)"
    return None
