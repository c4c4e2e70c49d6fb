"""A line of a command's tab-separated output (``simplefeed consume``, ``token list``).

Its fields are escaped, whatever a field holds. A field may hold an entry's title from a server,
or a token's label stored before labels were checked. It can neither add a field or a line nor
reach the terminal as a control.
"""

from __future__ import annotations

#: Backslash-escapes for what would break a tab-separated line, or a terminal.
_ESCAPES = {ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"}
#: Unicode's bidirectional formatting characters. In a terminal, they reorder what follows them
#: on the line. So a field could show the text of another ("Trojan Source", CVE-2021-42574).
BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_CONTROLS = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, *BIDI]
    if code not in _ESCAPES
}
_FIELD = str.maketrans({**_CONTROLS, **_ESCAPES})
_LINE = str.maketrans({**_CONTROLS, **{c: e for c, e in _ESCAPES.items() if c != ord("\\")}})


def escape_field(text: str) -> str:
    """``text`` as one field of one tab-separated line, shown as it is, whatever it holds.

    Backslash, tab, line breaks, other control characters and bidirectional formatting
    characters are backslash-escaped.
    """
    return text.translate(_FIELD)


def one_line(text: str) -> str:
    """``text`` as one line that reaches the terminal as text.

    ``text`` is a message that may quote a server, such as a URL or what its error body said.
    Line breaks, tabs, other control characters and bidirectional formatting characters are
    backslash-escaped. A backslash stays as it is, because a message's quoted strings already
    escape theirs.
    """
    return text.translate(_LINE)
