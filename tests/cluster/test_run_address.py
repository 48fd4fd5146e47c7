"""`toolkit run --address` joins an existing Ray cluster the way `submit` does (issue 14).

A head of our own, with token auth explicitly on and a token file only the tests
know, runs once for the module (``ray start --head`` on free ports, its own
``--temp-dir``, stopped precisely; never ``ray stop``). The CLI runs in a
subprocess, as a user runs it; results are read back from the parquet it wrote.

The classification of connection failures and the token rules are tested directly
with Ray's own exceptions (no cluster needed).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.cluster.conftest import head_death
from toolkit.cluster.backends.local_head import LocalHead, pids_using, start_head, stop_head
from toolkit.errors import BackendUnavailableError, SpecError
from toolkit.run.output.location import output_location_warning
from toolkit.run.ray.auth import (
    TOKEN_HINT,
    auth_headers,
    driver_auth_env,
    is_local_address,
    is_this_machine,
    probe_address,
    read_auth_token,
    split_host_port,
)
from toolkit.run.ray.connection import connect_error, local_ray_environment, ray_target

TOOLKIT = str(Path(sys.executable).parent / "toolkit")
#: Env vars of the caller that would change what the toolkit does with tokens.
AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS",
             "RAY_API_SERVER_ADDRESS", "RAY_TMPDIR")


@dataclass(frozen=True)
class TokenHead:
    head: LocalHead
    token_file: Path
    #: RAY_TMPDIR that makes ``auto`` find this head (its --temp-dir is ROOT/ray).
    root: Path

    @property
    def port(self) -> str:
        return self.head.gcs_address.rsplit(":", 1)[1]


@pytest.fixture(scope="module")
def token_head() -> Iterator[TokenHead]:
    """A head that requires a token: RAY_AUTH_MODE=token and a token file of its own."""
    root = Path(tempfile.mkdtemp(prefix="tkauth-", dir="/tmp"))  # short: Ray's sockets
    token_file = root / "auth_token"
    token_file.write_text(secrets.token_hex(16), encoding="utf-8")
    saved = {name: os.environ.pop(name, None) for name in AUTH_VARS}
    os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)})
    try:
        head, process = start_head(root / "ray")  # copies os.environ for the head only
    finally:
        for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):
            os.environ.pop(name, None)
        os.environ.update({name: value for name, value in saved.items() if value is not None})
    try:
        yield TokenHead(head=head, token_file=token_file, root=root)
    finally:
        died = head_death(head, process)
        stop_head(head, process=process)
        leftovers = pids_using(head.temp_dir)
        shutil.rmtree(root, ignore_errors=True)
        assert died is None, died
        assert not leftovers, f"Ray processes of the token head survived: {leftovers}"


def client_env(**overrides: str) -> dict[str, str]:
    """The caller's environment without any Ray address or token setting, plus ``overrides``."""
    env = {name: value for name, value in os.environ.items() if name not in AUTH_VARS}
    env.update(overrides)
    return env


def toolkit_run(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([TOOLKIT, "run", "text-industry", "--smoke", *args],
                            capture_output=True, text=True, env=env, timeout=timeout)
    print(result.stderr[-4000:])  # shown when a test fails
    return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- through the CLI, against the real head -------------------------------------------


def test_address_host_port_joins_with_the_clusters_token(token_head: TokenHead,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = toolkit_run("--rows", "100", "--output", str(out),
                         "--address", token_head.head.gcs_address,
                         env=client_env(RAY_AUTH_TOKEN_PATH=str(token_head.token_file)))
    assert result.returncode == 0
    joined = next(line for line in result.stderr.splitlines() if line.startswith("Joined"))
    assert joined.startswith("Joined the Ray cluster at ")
    assert joined.endswith(f":{token_head.port} ({token_head.head.dashboard_url})")
    assert "InvalidAuthToken" not in result.stderr
    assert "Warning: data.output" not in result.stderr  # the cluster is on this machine
    assert "rows written:  100 (100 ok, 0 with an error)" in result.stdout
    table = pq.read_table(out)
    assert table.num_rows == 100
    assert sorted(table["Index"].to_pylist()) == list(range(1, 101))


def test_ray_address_auto_joins_the_head_on_this_machine(token_head: TokenHead,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = toolkit_run("--rows", "100", "--output", str(out),
                         env=client_env(RAY_ADDRESS="auto", RAY_TMPDIR=str(token_head.root),
                                        RAY_AUTH_TOKEN_PATH=str(token_head.token_file)))
    assert result.returncode == 0
    assert f":{token_head.port} ({token_head.head.dashboard_url})\n" in result.stderr
    assert pq.read_table(out).num_rows == 100


def test_a_local_run_starts_its_own_ray_past_a_stale_address_file(tmp_path: Path) -> None:
    """A head killed (not stopped) leaves its address in Ray's temp dir; without
    --address or RAY_ADDRESS a run is local all the same."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="tkstale-", dir="/tmp"))  # short: Ray's sockets
    try:
        (ray_tmp / "ray").mkdir()
        (ray_tmp / "ray" / "ray_current_cluster").write_text("192.0.2.2:6399")
        result = toolkit_run("--rows", "20", "--output", str(tmp_path / "out"),
                             env=client_env(RAY_TMPDIR=str(ray_tmp)))
        assert result.returncode == 0, result.stderr
        assert pq.read_table(tmp_path / "out").num_rows == 20
    finally:
        leftovers = pids_using(str(ray_tmp))
        shutil.rmtree(ray_tmp, ignore_errors=True)
        assert not leftovers, f"Ray processes of the local run survived: {leftovers}"


def test_a_users_own_footer_actor_count_is_kept() -> None:
    environ = {"RAY_DATA_PARQUET_FOOTER_NUM_ACTORS": "16"}
    local_ray_environment(environ)
    assert environ == {"RAY_DATA_PARQUET_FOOTER_NUM_ACTORS": "16"}
    local_ray_environment(unset := {})
    assert unset == {"RAY_DATA_PARQUET_FOOTER_NUM_ACTORS": "2"}


def test_a_local_ray_retries_its_own_sockets_every_tenth_of_a_second() -> None:
    """Ray's default (try again after 1 s) stalled one local start in three, when the
    raylet reached its object store's socket before the store listened."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="tkcfg-", dir="/tmp"))
    script = (
        "import json, ray\n"
        "from toolkit.run.ray.connection import connect_ray, stop_local_ray\n"
        "connect_ray()\n"
        "footers = ray.get(ray.remote(lambda: __import__('os').environ.get("
        "'RAY_DATA_PARQUET_FOOTER_NUM_ACTORS')).remote())\n"
        "print(json.dumps({**ray._private.state.state.get_system_config(), 'footers': footers}))\n"
        "stop_local_ray()\n"
    )
    try:
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                timeout=120, env=client_env(RAY_TMPDIR=str(ray_tmp)))
        assert result.returncode == 0, result.stderr
        config = json.loads(result.stdout.strip().splitlines()[-1])
        assert config["raylet_client_connect_timeout_milliseconds"] == 100
        assert config["raylet_client_num_connect_attempts"] == 100  # still 10 s in all
        # Ray Data's Parquet footer readers: 2 actors on one machine, not a cluster's 32.
        assert config["footers"] == "2"
    finally:
        leftovers = pids_using(str(ray_tmp))
        shutil.rmtree(ray_tmp, ignore_errors=True)
        assert not leftovers, f"Ray processes of the local start survived: {leftovers}"


def test_wrong_port_exits_3_naming_the_address(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = toolkit_run("--rows", "10", "--output", str(tmp_path / "out"),
                         "--address", address, env=client_env())
    assert result.returncode == 3
    assert time.monotonic() - started < 30  # the port probe, not Ray's retries
    assert f"Error: Cannot reach the Ray cluster at {address} (Connection refused).\n" \
        "Hint: Give the cluster's GCS address" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("how", ["host:port", "auto"])
def test_missing_token_exits_3_with_the_token_hint(how: str, token_head: TokenHead,
                                                   tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()  # no ~/.ray/auth_token here
    missing = tmp_path / "no-such-token"
    env = client_env(HOME=str(home), RAY_AUTH_TOKEN_PATH=str(missing))
    args = ["--rows", "10", "--output", str(tmp_path / "out")]
    if how == "auto":
        env.update(RAY_ADDRESS="auto", RAY_TMPDIR=str(token_head.root))
        where = "the Ray cluster that address auto found on this machine"
    else:
        args += ["--address", token_head.head.gcs_address]
        where = f"the Ray cluster at {token_head.head.gcs_address}"
    result = toolkit_run(*args, env=env)
    assert result.returncode == 3
    assert f"Hint: {TOKEN_HINT}" in result.stderr
    assert "Traceback" not in result.stderr
    if how == "auto":  # Ray refuses a named token file that's missing before it connects
        assert (f"Error: RAY_AUTH_TOKEN_PATH names {missing}, which is missing or empty, so "
                f"Ray won't join {where} without a token.\n") in result.stderr
    else:  # the head refused the driver
        assert (f"Error: T{where[1:]} requires an auth token, and none was found here "
                f"(RAY_AUTH_TOKEN_PATH names {missing}, which is missing or empty).\n"
                ) in result.stderr


def test_ray_client_address_is_refused_up_front(tmp_path: Path) -> None:
    result = toolkit_run("--rows", "10", "--output", str(tmp_path / "out"),
                         "--address", f"ray://127.0.0.1:{free_port()}", env=client_env())
    assert result.returncode == 2
    assert "can't go through Ray Client (ray://)" in result.stderr


# -- the rules and the classification, without a cluster -----------------------------


def test_the_token_is_looked_up_where_ray_looks(tmp_path: Path) -> None:
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("from-home\n")
    (tmp_path / "other").write_text("from-path\n")
    home = {"HOME": str(tmp_path)}
    assert read_auth_token(home) == "from-home"
    assert read_auth_token({**home, "RAY_AUTH_TOKEN_PATH": str(tmp_path / "other")}) == "from-path"
    assert read_auth_token({**home, "RAY_AUTH_TOKEN_PATH": str(tmp_path / "other"),
                            "RAY_AUTH_TOKEN": "from-env"}) == "from-env"
    # A named file that is missing is not replaced by ~/.ray/auth_token (Ray doesn't either).
    assert read_auth_token({**home, "RAY_AUTH_TOKEN_PATH": str(tmp_path / "none")}) is None
    assert read_auth_token({"HOME": str(tmp_path / "empty")}) is None


def test_a_local_token_goes_only_to_this_machine_unless_ray_auth_mode_says_so() -> None:
    token = {"RAY_AUTH_TOKEN": "t0k"}
    for address in ("127.0.0.1:6379", "localhost:6379", "auto", "ray://127.0.0.1:10001",
                    "http://127.0.0.1:8265", f"{socket.gethostname()}:6379"):
        assert is_local_address(address), address
        assert driver_auth_env(address, token) == {"RAY_AUTH_MODE": "token"}, address
        assert auth_headers(address, token) == {"Authorization": "Bearer t0k"}, address
    for address in ("203.0.113.7:6379", "head.example.com:6379", "ray://203.0.113.7:10001"):
        assert not is_local_address(address), address
        assert driver_auth_env(address, token) == {}, address
        assert auth_headers(address, token) == {}, address
        # RAY_AUTH_MODE=token is the user's consent: Ray sends it itself then.
        consent = {**token, "RAY_AUTH_MODE": "token"}
        assert driver_auth_env(address, consent) == {}
        assert auth_headers(address, consent) == {"Authorization": "Bearer t0k"}
    # Nothing to send, or the user turned it off.
    assert driver_auth_env("127.0.0.1:6379", {"HOME": "/nonexistent"}) == {}
    assert driver_auth_env("127.0.0.1:6379", {**token, "RAY_AUTH_MODE": "disabled"}) == {}
    assert auth_headers("127.0.0.1:6379", {**token, "RAY_AUTH_MODE": "disabled"}) == {}


def test_this_machine_includes_its_own_ip_addresses() -> None:
    from ray._private.services import get_node_ip_address

    # The IP Ray gives this node (and resolves 127.0.0.1 to when joining).
    assert is_this_machine(get_node_ip_address())
    assert is_this_machine("127.0.0.1") and is_this_machine("::1")
    assert not is_this_machine("203.0.113.7")
    assert not is_this_machine(None)


def test_addresses_split_into_host_and_port() -> None:
    assert split_host_port("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert split_host_port("ray://head:10001") == ("head", 10001)
    assert split_host_port("http://head") == ("head", 80)
    assert split_host_port("auto") == ("auto", None)
    assert split_host_port("head:notaport") == ("head", None)


def test_ray_target_follows_ray_address_like_ray_does() -> None:
    assert ray_target("10.0.0.5:6379", {"RAY_ADDRESS": "auto"}) == "10.0.0.5:6379"
    assert ray_target(None, {"RAY_ADDRESS": "10.0.0.5:6379"}) == "10.0.0.5:6379"
    assert ray_target("auto", {"RAY_ADDRESS": "10.0.0.5:6379"}) == "10.0.0.5:6379"
    assert ray_target("auto", {}) == "auto"
    assert ray_target(None, {"RAY_ADDRESS": " "}) is None


def test_probe_names_the_address_and_is_quick() -> None:
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError) as caught:
        probe_address(address, 2.0, hint="try another")
    assert time.monotonic() - started < 3
    assert caught.value.message == f"Cannot reach the Ray cluster at {address} (Connection refused)."
    assert caught.value.hint == "try another"
    probe_address("auto")  # nothing to probe: Ray resolves it


def test_version_mismatch_names_both_versions() -> None:
    import platform

    import ray
    from ray._private.utils import check_version_info

    with pytest.raises(RuntimeError) as raised:  # Ray's own check, Ray's own message
        check_version_info({"ray_version": "2.59.0", "python_version": "3.10.4"},
                           "node 10.0.0.9")
    error = connect_error(raised.value, "10.0.0.5:6379", token_sent=True, token_found=True)
    assert isinstance(error, BackendUnavailableError) and error.exit_code == 3
    assert error.message == (
        "The Ray cluster at 10.0.0.5:6379 runs Ray 2.59.0 with Python 3.10.4, but this "
        f"machine has Ray {ray.__version__} with Python {platform.python_version()}; a "
        "driver must match the cluster's versions.")
    assert "toolkit submit" in (error.hint or "")


def test_auth_failures_say_what_happened_to_the_token() -> None:
    from ray.exceptions import AuthenticationError

    # How ray.init reports it: ConnectionError from RuntimeError from the auth error.
    try:
        try:
            try:
                raise AuthenticationError("RPC error: InvalidAuthToken: Authentication "
                                          "token is missing or incorrect.")
            except AuthenticationError as inner:
                raise RuntimeError("Failed to connect to GCS.") from inner
        except RuntimeError as middle:
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.5:6379") \
                from middle
    except ConnectionError as exc:
        refused = exc

    def message(**kwargs: object) -> str:
        error = connect_error(refused, "10.0.0.5:6379", **kwargs)  # type: ignore[arg-type]
        assert isinstance(error, BackendUnavailableError)
        assert error.hint == TOKEN_HINT
        return error.message

    assert message(token_sent=True, token_found=True) == (
        "The Ray cluster at 10.0.0.5:6379 refused the auth token this machine sent.")
    assert "the one on this machine was not sent" in message(token_sent=False, token_found=True)
    assert message(token_sent=False, token_found=False) == (
        "The Ray cluster at 10.0.0.5:6379 requires an auth token, and none was found here "
        "($RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token).")


def test_other_failures_are_unreachable_or_a_bad_address() -> None:
    none_running = ConnectionError("Could not find any running Ray instance. Please specify "
                                   "the one to connect to by setting `--address` flag.")
    error = connect_error(none_running, "auto", token_sent=False, token_found=False)
    assert isinstance(error, BackendUnavailableError)
    assert error.message == "No Ray cluster for address auto: none is running on this machine."

    timeout = ConnectionError("ray client connection timeout")
    error = connect_error(timeout, "ray://10.0.0.5:10001", token_sent=False, token_found=False)
    assert isinstance(error, BackendUnavailableError)
    assert error.message == ("Cannot reach the Ray cluster at ray://10.0.0.5:10001 "
                             "(ray client connection timeout).")
    assert "If the cluster uses token auth" in (error.hint or "")

    bad = connect_error(ValueError("Invalid address format: head"), "head",
                        token_sent=False, token_found=False)
    assert isinstance(bad, SpecError) and bad.exit_code == 2
    assert bad.message == "Ray address head: Invalid address format: head"


def test_output_warning_for_a_cluster_elsewhere() -> None:
    relative = output_location_warning("out/industry", "run")
    assert relative is not None
    assert f"it resolves to {os.path.abspath('out/industry')} here" in relative
    assert "on their own disks, not on this machine" in relative
    assert "a local path" in (output_location_warning("/data/out", "run") or "")
    assert output_location_warning("s3://bucket/out", "run") is None


def test_a_run_joining_a_cluster_elsewhere_refuses_a_local_answer_cache() -> None:
    from types import SimpleNamespace

    from toolkit.run.driver import check_cache_reaches_every_node
    from toolkit.spec.models import CacheConfig

    def plan(**cache: object) -> SimpleNamespace:  # what the check reads of a RunPlan
        return SimpleNamespace(spec=SimpleNamespace(cache=CacheConfig(**cache)))

    with pytest.raises(SpecError) as refused:
        check_cache_reaches_every_node(plan(dir="/home/me/answers"), on_this_machine=False)
    assert "cache.dir '/home/me/answers' is a local path" in str(refused.value)
    assert str(refused.value).endswith("Nothing was run.")
    check_cache_reaches_every_node(plan(dir="/home/me/answers"), on_this_machine=True)
    check_cache_reaches_every_node(plan(dir="/nfs/answers", shared=True), on_this_machine=False)
    check_cache_reaches_every_node(plan(dir="gs://b/answers"), on_this_machine=False)
