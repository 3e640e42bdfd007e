"""The one way a URL is shown (issue 37): its scheme and host, never its user, password, path,
query or fragment, where tokens live (a Slack webhook's path, a healthchecks.io UUID, a password in
`user:password@`). For a scheme whose "host" is itself a token (apprise's `slack://TOKEN/...`,
`tgram://BOT_TOKEN/...`), only the scheme is shown."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# schemes whose host part is a real host name (the others put tokens there)
HOST_SCHEMES = frozenset({"http", "https", "json", "jsons", "xml", "xmls", "form", "forms",
                          "mailto", "mailtos"})
_URLISH = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s'\"<>]*")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,30}")


def shown_url(url: object) -> str:
    """`https://hooks.slack.com/…`, `slack://…`, or `(not a URL)`: what of a URL may be printed."""
    text = str(url).strip()
    scheme, sep, rest = text.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):
        return "(not a URL)"
    scheme = scheme.lower()
    if scheme not in HOST_SCHEMES:
        return f"{scheme}://…"
    try:
        parts = urlsplit(text)
        host, port = parts.hostname or "", parts.port
    except ValueError:  # a bad port or IPv6 literal: the host is not trusted to be one
        return f"{scheme}://…"
    if not re.fullmatch(r"[A-Za-z0-9.:_-]{1,253}", host):
        return f"{scheme}://…"
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}{'' if port is None else f':{port}'}/…"


def _host(url: str) -> str:
    shown = shown_url(url)
    return "" if shown.endswith("://…") else (urlsplit(url.strip()).hostname or "")


def redacted(text: str, urls: tuple[str, ...] = ()) -> str:
    """`text` with every URL in it shown as `shown_url` shows it, and every token of `urls` (their
    user, password, path and query parts; the host too where it is no host name) cut out, for a
    library's error message that may quote them."""
    out = _URLISH.sub(lambda m: shown_url(m.group(0)), text)
    for url in urls:
        kept = _host(url)
        rest = url.partition("://")[2] if "://" in url else url
        for piece in re.split(r"[/@:?&=#;,]", rest):
            if len(piece) >= 4 and piece != kept and not piece.isdigit():
                out = out.replace(piece, "…")
    return out


_USERINFO = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]{0,30}://[^/@:?#]*):[^/@?#]+@")
# a user with no password: often the token itself (`https://ghp_TOKEN@github.com/...`)
_USER_ONLY = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]{0,30}://)[^/@:?#]+@")
# `--password=X`, `--hf-token X`, `--api_key=X`: an argument whose name says it holds a secret (a
# whole part of the name: `--tokenizer_name` holds none)
_FLAG = re.compile(r"(--?([A-Za-z][\w.-]*)(?:=|\s+|\",\s*\"))(?!-)([^\s'\"]+)")  # a JSON argv too
_SECRET_WORDS = re.compile(r"(?i)(?:^|[-_.])(?:password|passwd|token|secret|api[-_]?key|"
                           r"access[-_]?key|credentials?)(?:$|[-_.])")


def _masked_flag(m: re.Match[str]) -> str:
    return f"{m.group(1)}***" if _SECRET_WORDS.search(m.group(2)) else m.group(0)


def _masked_url(url: str) -> str:
    """One URL whole but its password (`user:***@`), a user with no password (`***@`: a token
    there) and its query values (`?token=***`)."""
    url = _USERINFO.sub(lambda m: f"{m.group('head')}:***@", url)
    url = _USER_ONLY.sub(lambda m: f"{m.group('head')}***@", url)
    base, sep, query = url.partition("?")
    if not sep:
        return url
    query, hash_, fragment = query.partition("#")
    pairs = re.split(r"([&;])", query)
    pairs = [p if p in "&;" or "=" not in p else p.split("=", 1)[0] + "=***" for p in pairs]
    return f"{base}?{''.join(pairs)}{hash_}{fragment}"


def masked_text(text: str) -> str:
    """`text` (a command line, an environment value) as the dry run prints it: every URL in it
    whole but its password and its query values, where credentials sit in a URL someone pastes
    into an argument or a variable."""
    return _FLAG.sub(_masked_flag, _URLISH.sub(lambda m: _masked_url(m.group(0)), text))
