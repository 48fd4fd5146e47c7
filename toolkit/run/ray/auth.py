"""Ray's token auth and cluster addresses, shared by every way the toolkit reaches Ray.

Used by the driver (:mod:`toolkit.run.ray.connection`, ``toolkit run``) and by the
Ray Jobs client (:mod:`toolkit.cluster.backends.ray_jobs`, ``toolkit submit``), so
both find the same token and send it to the same places. Imports no Ray.

How Ray 2.60 does it (``ray/_private/authentication/``, ``ray/_private/worker.py``):
the token is read by Ray's C++ ``AuthenticationTokenLoader`` from ``$RAY_AUTH_TOKEN``,
else the file ``$RAY_AUTH_TOKEN_PATH`` (only that file once the variable is set),
else ``~/.ray/auth_token``. A client attaches it (gRPC metadata, HTTP
``Authorization: Bearer``) only when ``RAY_AUTH_MODE=token``, which Ray's
``RayConfig`` reads from the environment. ``ray.init`` switches that mode on by
itself only for ``address=None``/``"auto"`` when a token exists
(``maybe_enable_token_auth_if_token_available``), never for an explicit
``host:port`` or ``ray://`` address: that is why ``RAY_ADDRESS=auto`` joined a
local head while ``--address 127.0.0.1:6379`` was refused.

The toolkit's rule, for both clients: a token found here is sent when the user set
``RAY_AUTH_MODE=token``, or when the cluster is on this machine (it shares the
token file). It never goes to another host unless RAY_AUTH_MODE says so.

Example:
    >>> auth_headers("http://127.0.0.1:8265", {"RAY_AUTH_TOKEN": "abc"})
    {'Authorization': 'Bearer abc'}
    >>> auth_headers("http://head.example.com:8265", {"RAY_AUTH_TOKEN": "abc"})
    {}
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from toolkit.errors import BackendUnavailableError

#: How long a TCP probe of a cluster address may take before it counts as down.
CONNECT_TIMEOUT_S = 5.0

#: The env var Ray reads to decide whether a client sends its token.
AUTH_MODE_ENV_VAR = "RAY_AUTH_MODE"

TOKEN_HINT = (
    "This cluster uses token auth. Export RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<token> "
    "(or save the token in ~/.ray/auth_token); `ray get-auth-token` on the head prints it."
)

_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}

#: Addresses that Ray resolves to a cluster on this machine.
_LOCAL_ADDRESS_WORDS = {"auto", "local"}


def split_host_port(address: str) -> tuple[str | None, int | None]:
    """``(host, port)`` of ``host:port``, ``http(s)://host[:port]`` or ``ray://host:port``.

    The port is ``None`` when missing or invalid (80/443 are implied for http/https).
    """
    if "://" not in address:
        address = "tcp://" + address
    parts = urlsplit(address)
    try:
        port = parts.port
    except ValueError:
        return parts.hostname, None
    if port is None and parts.scheme in ("http", "https"):
        port = 443 if parts.scheme == "https" else 80
    return parts.hostname, port


def is_this_machine(host: str | None) -> bool:
    """Whether ``host`` is this machine: loopback, its host name, or one of its IPs.

    Host names other than the machine's own are not looked up (no DNS wait).
    """
    if host is None:
        return False
    if host in _LOOPBACK_HOSTS or host.startswith("127."):
        return True
    with contextlib.suppress(OSError):
        if host == socket.gethostname():
            return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    # Only an address of this machine can be bound to.
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
    except OSError:
        return False
    return True


def is_local_address(address: str) -> bool:
    """Whether ``address`` names a Ray cluster on this machine (``auto`` does)."""
    if address.strip().lower() in _LOCAL_ADDRESS_WORDS:
        return True
    return is_this_machine(split_host_port(address)[0])


def read_auth_token(environ: Mapping[str, str]) -> str | None:
    """Ray's token, looked up as Ray does: ``$RAY_AUTH_TOKEN``, ``$RAY_AUTH_TOKEN_PATH``,
    ``~/.ray/auth_token``. ``None`` when there is none (or the named file is missing).
    """
    raw = environ.get("RAY_AUTH_TOKEN", "")
    if raw:
        return raw.strip() or None
    path = environ.get("RAY_AUTH_TOKEN_PATH") or str(_home(environ) / ".ray" / "auth_token")
    try:
        return Path(path).expanduser().read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def token_mode_requested(environ: Mapping[str, str]) -> bool:
    """The user set ``RAY_AUTH_MODE=token``: send the token to any host."""
    return environ.get(AUTH_MODE_ENV_VAR, "").strip().lower() == "token"


def token_allowed(address: str, environ: Mapping[str, str]) -> bool:
    """Whether a token found here may be sent to ``address`` (see the module doc)."""
    if token_mode_requested(environ):
        return True
    if environ.get(AUTH_MODE_ENV_VAR, "").strip():
        return False  # e.g. RAY_AUTH_MODE=disabled: the user said no
    return is_local_address(address)


def auth_headers(address: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The Authorization header for an HTTP request to ``address``, if a token should go."""
    if not token_allowed(address, environ):
        return {}
    token = read_auth_token(environ)
    return {"Authorization": f"Bearer {token}"} if token else {}


def driver_auth_env(address: str, environ: Mapping[str, str]) -> dict[str, str]:
    """Env vars to set before ``ray.init(address)`` so the driver sends the token.

    ``{"RAY_AUTH_MODE": "token"}`` when a token is here, may go to ``address`` and
    Ray would not send it by itself (RAY_AUTH_MODE unset); else ``{}``. Ray's own
    loader then reads the token from the same places :func:`read_auth_token` does.
    """
    if environ.get(AUTH_MODE_ENV_VAR, "").strip():
        return {}  # Ray obeys the user's RAY_AUTH_MODE already
    if not token_allowed(address, environ) or read_auth_token(environ) is None:
        return {}
    return {AUTH_MODE_ENV_VAR: "token"}


def probe_address(
    address: str, timeout_s: float = CONNECT_TIMEOUT_S, *, hint: str | None = None
) -> None:
    """Fail fast (within ``timeout_s``) when nothing listens at ``address``.

    Addresses without a port (``auto``) are left to Ray to resolve.

    Raises:
        BackendUnavailableError: connection refused, unknown host or timeout; the
            message names ``address``.
    """
    host, port = split_host_port(address)
    if host is None or port is None:
        return
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except OSError as exc:
        reason = (
            "timed out" if isinstance(exc, socket.timeout) else exc.strerror or str(exc)
        )
        raise BackendUnavailableError(
            f"Cannot reach the Ray cluster at {address} ({reason}).", hint=hint
        ) from None


def _home(environ: Mapping[str, str]) -> Path:
    home = environ.get("HOME")
    return Path(home) if home else Path.home()
