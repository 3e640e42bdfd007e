"""A small scanner for batch scripts: the top-level simple commands of a bash script, each with the
character spans of its words, so a launch line can be rewritten in place without re-quoting
anything.

It knows quotes, `$(...)`, `${...}`, backticks, arrays `(...)`, comments, line continuations and
here-documents; it is not a bash parser, and it does not need to be: it only has to find where
commands start and end."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SEPARATORS = (";", "|", "&")
# word characters with no meaning to the scanner: skipped in one step
_PLAIN = re.compile(r"[^ \t\n;|&<>\\'\"`$(]+")
# what can end or nest inside "...": the rest is skipped in one step
_DQ_STOPS = re.compile(r'["\\$]')
_BQ_STOPS = re.compile(r"[`\\]")
_DQ_ESCAPE = re.compile(r'\\([$`"\\\n])')  # what a backslash escapes inside "..."
_BLANKS = re.compile(r"[ \t]+")
_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([\w.-]+)\2")


@dataclass(slots=True)
class Segment:
    """One simple command at the top level: words as (start, end) offsets into the text."""

    words: list[tuple[int, int]] = field(default_factory=list)
    line_start: int = 0

    def texts(self, text: str) -> list[str]:
        return [text[a:b] for a, b in self.words]


def _skip_quoted(text: str, i: int) -> int:
    """`i` is at a quote, `$(`, `${`, backtick or `(`: return the index just past its end."""
    ch = text[i]
    if ch == "'":
        j = text.find("'", i + 1)
        return len(text) if j < 0 else j + 1
    if ch in '"`':
        stops = _DQ_STOPS if ch == '"' else _BQ_STOPS
        j = i + 1
        while True:
            m = stops.search(text, j)
            if m is None:
                return len(text) + 1
            j = m.start()
            if text[j] == ch:
                return j + 1
            if text[j] == "\\":
                j += 1
            elif text.startswith(("$(", "${"), j):
                j = _skip_quoted(text, j + 1) - 1
            j += 1
    close = {"(": ")", "{": "}"}[ch]
    depth, j = 1, i + 1
    while j < len(text) and depth:
        c = text[j]
        if c in "'\"`":
            j = _skip_quoted(text, j)
            continue
        if c == "\\":
            j += 2
            continue
        if c == "#" and (j == 0 or text[j - 1] in " \t\n(") and close == ")":
            nl = text.find("\n", j)
            j = len(text) if nl < 0 else nl
            continue
        depth += 1 if c == ch else -1 if c == close else 0
        j += 1
    return j


def _heredoc_end(text: str, i: int, pending: list[tuple[str, bool]]) -> int:
    """`i` is at the newline ending a line with here-documents: skip their bodies."""
    j = i + 1
    for delim, strip in pending:
        while j < len(text):
            nl = text.find("\n", j)
            line = text[j:] if nl < 0 else text[j:nl]
            j = len(text) if nl < 0 else nl + 1
            if (line.lstrip("\t") if strip else line) == delim:
                break
    return j - 1


def _word_end(text: str, i: int, pending: list[tuple[str, bool]]) -> int:
    j = i
    while (j < len(text) and text[j] not in " \t\n;|&<>"
           or (j < len(text) and text[j] in "<>" and j == i)):
        c = text[j]
        plain = _PLAIN.match(text, j)
        if plain:
            j = plain.end()
        elif c == "\\":
            j += 2
        elif c in "'\"`" or text.startswith(("$(", "${"), j):
            j = _skip_quoted(text, j + (1 if c == "$" else 0))
        elif c == "(" and j > i and text[j - 1] == "=":
            j = _skip_quoted(text, j)
        elif c in "<>":
            m = _HEREDOC.match(text, j)
            if m:
                pending.append((m.group(3), m.group(1) == "-"))
                return m.end()
            j += 1
            while j < len(text) and text[j] in "<>&":
                j += 1
            return j
        else:
            j += 1
    return j


# no quote, substitution, here-document or continuation in it
_FLAT_LINE = re.compile(r"[^\\'\"`$()<\n]*")


_OPENS = re.compile(r"[\\`]|\$\(|<<")
# a command that is itself an expansion (`$LAUNCHER $CMD`, `"$PY" train.py`): may be a launch,
# always read
_EXPANDED_COMMAND = re.compile(r"\s*(?:(?:time|exec|nohup|eval|command|then|do|else|!|\{|\()\s+)"
                               r"*[$\"']")


def _closed(text: str, start: int, end: int) -> bool:
    """text[start:end] (one line) opens nothing that could run past its end: no backslash, backtick,
    `$(` or here-document, its quotes pair up on their own (an even number of each kind, never
    nested), and so do its braces and parentheses (`${X` or `A=(` would go on to the next line)."""
    if _OPENS.search(text, start, end) or _EXPANDED_COMMAND.match(text, start, end):
        return False
    line = text[start:end]
    dq, sq = line.count('"'), line.count("'")
    return (dq % 2 == 0 and sq % 2 == 0 and not (dq and sq) and _nests(line, "{", "}")
            and _nests(line, "(", ")"))


def _nests(line: str, opening: str, closing: str) -> bool:
    """Every `closing` closes an `opening` before it on the line, and all are closed (`}${` is
    not: its `${` runs on)."""
    depth = 0
    for c in line:
        depth += (c == opening) - (c == closing)
        if depth < 0:
            return False
    return depth == 0


# what a line may hold to be split into words by one regex
_SIMPLE_LINE = re.compile(r"[^\\`<>#(){}\n]*")
_SIMPLE_WORD = re.compile(r"""(?:[^ \t;|&"']+|"[^"\n]*"|'[^'\n]*')+|[;|&]""")


def _shortcut(text: str, i: int, wanted: re.Pattern[str], out: list[Segment]) -> int:
    """For a line starting at `i` that nothing crosses: skip it if `wanted` finds nothing in it,
    split it into segments by one regex if it is simple (words, simple quotes, `;`, `|`, `&`); the
    next line's start, or 0 when the line needs the character scanner."""
    flat = _FLAT_LINE.match(text, i)
    j = flat.end()  # type: ignore[union-attr]
    # quotes or `$`: a shortcut still if nothing crosses the line
    if j < len(text) and text[j] != "\n":
        nl = text.find("\n", j)
        j = len(text) if nl < 0 else nl
        if not _closed(text, i, j):
            return 0
    if not wanted.search(text, i, j):
        return j + 1
    if _SIMPLE_LINE.match(text, i).end() != j or "$(" in text[i:j]:  # type: ignore[union-attr]
        return 0
    cur = Segment(line_start=i)
    for m in _SIMPLE_WORD.finditer(text, i, j):
        if m.group() in SEPARATORS:
            if cur.words:
                out.append(cur)
            cur = Segment(line_start=i)
        else:
            cur.words.append(m.span())
    if cur.words:
        out.append(cur)
    return j + 1


def segments(text: str, wanted: re.Pattern[str] | None = None) -> list[Segment]:
    """The simple commands outside quotes, substitutions and here-documents, in order. With
    `wanted`, a line that starts at the top level, holds nothing that spans lines and has no match
    of `wanted` is skipped unread (a 20 MB script of plain commands is scanned in seconds)."""
    out: list[Segment] = []
    cur = Segment()
    pending: list[tuple[str, bool]] = []
    i, line_start = 0, 0
    while i < len(text):
        c = text[i]
        if (wanted is not None and i == line_start and not pending
            and (nxt := _shortcut(text, i, wanted, out))):
            i = line_start = nxt
            cur = Segment(line_start=line_start)
            continue
        if c == "\\" and text.startswith("\\\n", i):
            i += 2
        elif c in " \t":
            i = _BLANKS.match(text, i).end()  # type: ignore[union-attr]
        elif c == "\n" or c in SEPARATORS:
            if c == "\n" and pending:
                i = _heredoc_end(text, i, pending)
                pending.clear()
            if cur.words:
                out.append(cur)
            if c == "\n":
                line_start = i + 1
            cur = Segment(line_start=line_start)
            i += 1
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n;"):
            nl = text.find("\n", i)
            i = len(text) if nl < 0 else nl
        else:
            j = _word_end(text, i, pending)
            if not cur.words:
                cur.line_start = line_start
            cur.words.append((i, max(j, i + 1)))
            i = max(j, i + 1)
    if cur.words:
        out.append(cur)
    return out


def line_end(text: str, pos: int) -> int:
    """The end of the logical line (backslash continuations followed) that holds `pos`."""
    j = pos
    while True:
        nl = text.find("\n", j)
        if nl < 0:
            return len(text)
        if (nl > 0 and text[nl - 1] == "\\"
            and not text[text.rfind("\n", 0, nl) + 1:nl].lstrip().startswith("#")):
            j = nl + 1
            continue
        return nl


def unquote(word: str) -> str:
    """The word's text with one level of quotes removed (no expansion)."""
    if "'" not in word and '"' not in word and "\\" not in word:
        return word
    out, i = [], 0
    while i < len(word):
        c = word[i]
        if c == "'":
            j = word.find("'", i + 1)
            j = len(word) if j < 0 else j
            out.append(word[i + 1:j])
            i = j + 1
        elif c == '"':
            j = _skip_quoted(word, i)
            out.append(_DQ_ESCAPE.sub(r"\1", word[i + 1:j - 1]))
            i = j
        elif c == "\\" and i + 1 < len(word):
            out.append("" if word[i + 1] == "\n" else word[i + 1])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)
