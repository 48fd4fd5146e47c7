"""Credentials in URLs, redacted: what every message, log line and written file shows.

A URL can carry a secret in its userinfo (``s3://KEY:SECRET@bucket/x.csv``,
``http://user:password@host/v1``) or in its query (an S3 presigned URL's
``X-Amz-Signature``, ``X-Amz-Credential`` and ``X-Amz-Security-Token``, Azure's
``sig``, ``token``, ``api_key``...). :func:`redact` replaces them with ``***``
wherever they appear in a string, or in every string of a dict or list (a spec
dump), so ``s3://AKIA...:SECRET@bucket/x.csv`` is shown and stored as
``s3://***@bucket/x.csv``.

The real value stays in the in-memory spec, which ``toolkit run`` reads the data
with. What leaves the process is redacted: messages and errors
(:class:`toolkit.errors.ToolkitError`), ``_manifest.json``, ``_summary.json`` and
``toolkit show``. (Ray writes ``_logs/run.log`` itself; the toolkit puts no URL
there.) A job sent to a cluster can't carry such a URL at all (``toolkit
render``/``submit`` refuse it), since its spec travels in files.

It sits beside :mod:`toolkit.errors`, on the bottom floor, because every error
message passes through it.

Redaction is a pure function of the text (no memory of secrets seen before), so a
redacted spec dump is stable: the resume fingerprint is computed from it.

The lowest layer: standard library only, so :mod:`toolkit.errors` and every other
layer may import it.

Example:
    >>> redact("can't read s3://AKIAEXAMPLE:abc/def@bucket/x.csv: Access Denied")
    "can't read s3://***@bucket/x.csv: Access Denied"
    >>> redact("https://b.s3.amazonaws.com/x.csv?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=9f0")
    'https://b.s3.amazonaws.com/x.csv?X-Amz-Credential=***&X-Amz-Signature=***'
"""

from __future__ import annotations

import re
from typing import TypeVar

#: What a secret is replaced with.
MASK = "***"

#: Query parameters whose value is a credential (matched without regard to case).
SECRET_QUERY_PARAMETERS: tuple[str, ...] = (
    "x-amz-signature", "x-amz-credential", "x-amz-security-token",  # S3 presigned URLs
    "x-goog-signature", "x-goog-credential",  # GCS signed URLs
    "awsaccesskeyid", "signature", "sig",  # S3 (v2) and Azure SAS signatures
    "token", "access_token", "id_token", "refresh_token", "auth", "authorization",
    "api_key", "apikey", "api-key", "key", "client_secret", "secret", "password", "passwd",
)

# Characters that end a URL inside a message (whitespace, quotes, brackets).
_END = r"\s'\"<>`"
_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)"
    r"(?:"
    rf"[^{_END}/?#@]+"  # user, user:password (RFC 3986: no '/' before the host)
    # user:password whose password holds '/', '?' or '#' unescaped (an AWS secret key
    # often does): no parser takes it, but its error message would show it. Not
    # host:port/path@..., whose "password" would start with the port's digits.
    rf"|[^{_END}/?#@:]+:(?!\d+(?:[/?#{_END}]|$))[^{_END}@]*"
    r")@"
)
_QUERY = re.compile(
    r"(?P<lead>[?&;](?:amp;)?)(?P<name>"
    + "|".join(re.escape(name) for name in SECRET_QUERY_PARAMETERS)
    # the value: up to the next parameter or the URL's end (a ':' that ends a
    # sentence, "can't read URL: reason", is not part of it)
    + rf")=(?P<value>(?:[^&#:{_END}]|:(?![{_END}]|$))*)",
    re.IGNORECASE,
)

T = TypeVar("T")


def redact(value: T) -> T:
    """``value`` with every credential in a URL replaced by ``***``.

    A string is redacted where it holds a URL (anywhere in it, so whole messages
    can be passed); a dict, list or tuple is copied with each string in it
    redacted (keys too); anything else is returned as it is.
    """
    if isinstance(value, str):
        return _redact_text(value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {redact(k): redact(v) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, (list, tuple)):
        return type(value)(redact(item) for item in value)  # type: ignore[return-value]
    return value


def _redact_text(text: str) -> str:
    if "@" in text:
        text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    if "=" in text:
        text = _QUERY.sub(_mask_value, text)
    return text


def _mask_value(match: re.Match[str]) -> str:
    value = match.group("value")
    if value.startswith(MASK):  # redacted already; what follows was written after it
        return match.group(0)
    return f"{match.group('lead')}{match.group('name')}={MASK}"


def preview(secret: str) -> str:
    """What may be shown of something that may be a secret: its first 3 characters."""
    return f"{secret[:3]}..."


__all__ = ["MASK", "SECRET_QUERY_PARAMETERS", "preview", "redact"]
