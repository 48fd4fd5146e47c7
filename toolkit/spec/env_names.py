"""Settings that name an environment variable where a secret is read from."""

from __future__ import annotations

import re

from toolkit.redaction import preview

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: How common API keys and tokens begin (OpenAI, Stripe, Hugging Face, GitHub, GitLab,
#: Slack, AWS access key ids, Google API keys, JWTs).
_KEY_PREFIXES = ("sk-", "sk_", "pk_", "rk_", "hf_", "ghp_", "gho_", "ghs_", "ghu_",
                 "github_pat_", "glpat-", "xoxb-", "xoxp-", "AKIA", "ASIA", "AIza", "eyJ")


def _looks_like_a_key(value: str) -> bool:
    if value.startswith(_KEY_PREFIXES):
        return True
    has_digit = any(c.isdigit() for c in value)
    if len(value) >= 20 and has_digit and "_" not in value:
        return True  # a hex or base64 token; variable names have words and underscores
    if len(value) >= 24 and has_digit and any(c.islower() for c in value) and any(
            c.isupper() for c in value):
        return True  # mixed case and digits: random, not a name
    return len(value) >= 16 and not _ENV_NAME.fullmatch(value)


def check_env_name(value: str) -> str:
    """The name of an environment variable (letters, digits and ``_``, not starting
    with a digit), for settings that name where a secret is read from.

    A value that looks like the secret itself is refused without being echoed: the
    message shows only its first three characters.

    Raises:
        ValueError: not a variable name.
    """
    if _ENV_NAME.fullmatch(value) and not _looks_like_a_key(value):
        return value
    if _looks_like_a_key(value):
        raise ValueError(
            f"{preview(value)!r} looks like a key, not a variable name; keep the key in an "
            "environment variable (export OPENAI_API_KEY=...) and give the variable's name "
            "here (OPENAI_API_KEY)"
        )
    raise ValueError(
        f"{preview(value)!r} is not an environment variable name (letters, digits and _, "
        "not starting with a digit)"
    )
