"""A line of a command's tab-separated output (``simplefeed consume``, ``token list``): its
fields escaped, so that whatever a field holds (an entry's title from a server, a token's label
stored before labels were checked) it can neither add a field or a line nor reach the terminal
as a control."""

from __future__ import annotations

#: Backslash-escapes for what would break a tab-separated line, or a terminal.
_ESCAPES = {ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"}
_CONTROLS = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, 0x85]
    if code not in _ESCAPES
}
_FIELD = str.maketrans({**_CONTROLS, **_ESCAPES})


def escape_field(text: str) -> str:
    """``text`` with backslash, tab, line breaks and other control characters backslash-escaped,
    so that it is one field of one tab-separated line whatever it holds."""
    return text.translate(_FIELD)
