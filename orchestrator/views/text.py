"""Text from logs, file names and state on its way to a terminal: control characters (escape
sequences, carriage returns, bells) made visible, rich markup never interpreted, long lines cut at a
word boundary."""

from __future__ import annotations

import re

from rich.text import Text

ELLIPSIS = "…"
# C0 controls except tab, DEL, C1 controls (0x9b is a one-byte CSI on some terminals), and the
# Unicode bidirectional controls (U+202A-202E, U+2066-2069: a file name with U+202E reads backwards)
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean(s: object) -> str:
    """`s` as one printable line: every control character shown as \\xNN (so ESC [ 2 J clears
    nothing)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256
                        else f"\\u{ord(m.group()):04x}", str(s))


def cut(s: object, width: int) -> str:
    """`clean(s)` in at most `width` characters: cut at the last word boundary before the limit,
    with an ellipsis, so a number is never shown as a shorter number ('ran for 180052' when the log
    says 1800520)."""
    t = clean(s)
    if len(t) <= width:
        return t
    head = t[: max(width - 1, 1)]
    space = head.rfind(" ")
    if space >= width // 2:
        head = head[:space]
    return head.rstrip() + ELLIPSIS


def plain(s: object) -> Text:
    """A rich `Text` of `clean(s)`: printed as is, `[/INST]` and `[bold]` included (no markup, no
    highlighting)."""
    return Text(clean(s))


def shell_dq(s: str) -> str:
    """`s` safe inside double quotes for a shell an admin pastes into: no expansion, no quote
    ending."""
    return clean(s).replace("\\", "\\\\").replace("$", "\\$").replace("`", "\\`").replace('"', "'")
