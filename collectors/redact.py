"""Secrets kept out of everything tracekit writes: command lines and environment values.

A server's command line often carries a credential (`--api-key K`, `--hf-token T`); run.json,
process.json and the `manifests` table record command lines, and reports and diffs show them.
`redact_argv` replaces the value of a flag whose last word names a secret (`--api-key`,
`--hf-token`, `--password`, not `--num-draft-tokens`), credentials inside URLs
(`https://user:pass@host`) and values shaped like well-known tokens (Hugging Face `hf_...`,
OpenAI `sk-...`, GitHub `ghp_...`, AWS `AKIA...`). Standard library only: the collectors import
it at start-up inside the server.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "<redacted>"
SECRET_WORDS = frozenset(
    {
        "token",
        "key",
        "apikey",
        "secret",
        "password",
        "passwd",
        "pass",
        "credential",
        "credentials",
        "auth",
    }
)
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@:\s]*):[^/@\s]*@")
_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,})"
)


def _secret_flag(arg: str) -> bool:
    if not arg.startswith("-"):
        return False
    words = [w for w in re.split(r"[-_.]+", arg.lstrip("-").lower()) if w]
    return bool(words) and words[-1] in SECRET_WORDS


def redact_value(value: str) -> str:
    """URL credentials and token-shaped substrings of one string replaced."""
    value = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", value)
    return _TOKEN_SHAPES.sub(REDACTED, value)


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A command line with every secret value replaced by `<redacted>`."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not (arg.startswith("-") and len(arg) > 1):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        flag, eq, _value = arg.partition("=")
        if _secret_flag(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
                continue
            hide_next = True
        out.append(redact_value(arg))
    return out
