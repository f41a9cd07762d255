"""Reading the workspace's ``.env`` file (``--env-file``) the way the reference agent's godotenv does.

Init containers append ``KEY=VALUE`` lines to ``/share/.env`` (``$PULUMI_ENV``); the agent passes those variables to
every Pulumi CLI run. Supported: comments, blank lines, ``export`` prefixes, ``=`` or ``:`` separators, single
quotes (literal), double quotes (escapes ``\\n \\r \\t \\" \\\\ \\$``, may span lines), inline `` #`` comments on
unquoted values, and ``$VAR``/``${VAR}`` expansion from variables defined earlier in the same file.

Pure parser plus one reader; a missing file is not an error. It must never log values (they are often secrets).
"""

from __future__ import annotations

import re
from pathlib import Path

_KEY = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.-]*)\s*[=:]\s?(.*)$", re.DOTALL)
_EXPAND = re.compile(r"(\\)?\$(\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\", "$": "$"}


class EnvFileError(ValueError):
    """The file is not a valid dotenv file; the message names the line, never its value."""


def _expand(value: str, known: dict[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group(1):
            return match.group(0)[1:]
        return known.get(match.group(3) or match.group(4), "")

    return _EXPAND.sub(replace, value)


def _unescape_double(body: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body) and body[i + 1] in _ESCAPES:
            nxt = body[i + 1]
            out.append("\\$" if nxt == "$" else _ESCAPES[nxt])  # keep \$ escaped until expansion
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _closing_quote(text: str, quote: str) -> int:
    i = 1
    while i < len(text):
        if text[i] == "\\" and quote == '"':
            i += 2
            continue
        if text[i] == quote:
            return i
        i += 1
    return -1


def parse(text: str) -> dict[str, str]:
    """The variables defined by dotenv text, in order."""
    result: dict[str, str] = {}
    rest = text.replace("\r\n", "\n")
    line_no = 0
    while rest:
        line, _, rest = rest.partition("\n")
        line_no += 1
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _KEY.match(line)
        if not match:
            raise EnvFileError(f"unexpected content on line {line_no}")
        key, raw = match.group(1), match.group(2).lstrip()
        if raw[:1] in ("'", '"'):
            quote = raw[0]
            value_text = raw
            end = _closing_quote(value_text, quote)
            while end < 0 and rest:  # a quoted value may span lines
                nxt, _, rest = rest.partition("\n")
                line_no += 1
                value_text += "\n" + nxt
                end = _closing_quote(value_text, quote)
            if end < 0:
                raise EnvFileError(f"unterminated quoted value for {key} (line {line_no})")
            body = value_text[1:end]
            value = body if quote == "'" else _expand(_unescape_double(body), result)
        else:
            value = re.split(r"\s#", raw, maxsplit=1)[0].strip()
            value = _expand(value, result)
        result[key] = value
    return result


def read(path: Path) -> dict[str, str]:
    """The variables in the file at `path`; an absent file yields none."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    return parse(text)
