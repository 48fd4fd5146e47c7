"""A provider's Files and Batches API, through the official ``openai`` client.

The key is read from the environment variable the settings name, in the process
that talks to the provider (a Ray worker, or the driver's check), and goes no
further than the client's ``Authorization`` header. Waiting is bounded and its
clock and sleep are arguments, so a caller decides how long and tests needn't sleep.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from toolkit.errors import BackendUnavailableError, SpecError

if TYPE_CHECKING:
    from toolkit.engines.batch_api.settings import BatchApiSettings

#: A batch's statuses once it has ended (OpenAI's).
ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
#: Ended without running every line: its finished lines count, the rest go again.
CUT_SHORT = frozenset({"expired", "cancelled"})
#: Seconds one API call may take (an upload of 200 MB included).
REQUEST_TIMEOUT_S = 600.0
#: Seconds past the completion window a batch is waited for before the task gives up
#: (the run fails; a rerun polls the same batch again).
WINDOW_GRACE_S = 3600.0


def api_key(api_key_env: str | None, environ: Mapping[str, str]) -> str:
    """The key from ``environ`` (a provider without keys, such as a local server,
    gets a placeholder: the client insists on one).

    Raises:
        KeyError: naming the variable, when it is unset or empty (the name only).
    """
    if not api_key_env:
        return "none"
    value = environ.get(api_key_env)
    if not value:
        raise KeyError(api_key_env)
    return value


class BatchProvider:
    """One provider's files and batches; builds its client where it is used."""

    def __init__(self, base_url: str, api_key_env: str | None,
                 environ: Mapping[str, str] | None = None) -> None:
        from openai import OpenAI

        key = api_key(api_key_env, os.environ if environ is None else environ)
        # The client retries lost connections, 429s and 5xx with backoff itself.
        self.client = OpenAI(base_url=base_url, api_key=key, max_retries=5,
                             timeout=REQUEST_TIMEOUT_S)

    def __repr__(self) -> str:  # never the key
        return f"BatchProvider({self.client.base_url!s})"

    def upload(self, name: str, content: bytes) -> str:
        """A request file uploaded with purpose ``batch``: its id."""
        return self.client.files.create(file=(name, content), purpose="batch").id

    def create(self, file_id: str, endpoint: str, window: str,
               metadata: Mapping[str, str]) -> dict[str, Any]:
        return self.client.batches.create(input_file_id=file_id, endpoint=endpoint,
                                          completion_window=window,
                                          metadata=dict(metadata)).model_dump()

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        return self.client.batches.retrieve(batch_id).model_dump()

    def batch_of(self, file_id: str, newest: int = 1000) -> dict[str, Any] | None:
        """The batch made of ``file_id``, among the ``newest`` batches (a driver killed
        between creating a batch and recording it finds it this way)."""
        for seen, batch in enumerate(self.client.batches.list(limit=100)):
            if batch.input_file_id == file_id:
                return batch.model_dump()
            if seen + 1 >= newest:
                break
        return None

    def content(self, file_id: str | None) -> str:
        """A file's text ('' for none: a batch with no errors has no error file)."""
        return self.client.files.content(file_id).text if file_id else ""

    def wait(self, batch_ids: Iterable[str], first_wait_s: float, max_wait_s: float,
             give_up_after_s: float, sleep: Callable[[float], None] = time.sleep,
             clock: Callable[[], float] = time.monotonic) -> dict[str, dict[str, Any]]:
        """Poll the batches until each has ended; each as it ended, by id. The wait
        between rounds starts at ``first_wait_s`` and grows by half up to ``max_wait_s``.

        Raises:
            TimeoutError: some batch is still going after ``give_up_after_s``.
        """
        going, ended = list(dict.fromkeys(batch_ids)), {}
        deadline, wait = clock() + give_up_after_s, first_wait_s
        while True:
            for batch_id in list(going):
                batch = self.retrieve(batch_id)
                if batch["status"] in ENDED:
                    ended[batch_id] = batch
                    going.remove(batch_id)
            if not going:
                return ended
            if clock() >= deadline:
                raise TimeoutError(f"the provider's batches {', '.join(going)} had not ended "
                                   f"{give_up_after_s:.0f} s after this run began waiting; "
                                   "run again to go on waiting for them")
            sleep(wait)
            wait = min(wait * 1.5, max_wait_s)


def check_provider(engine: "BatchApiSettings") -> None:
    """On the driver: the provider lists batches with our key.

    Raises:
        SpecError: the key's environment variable is unset here.
        BackendUnavailableError: no connection, or the key was refused.
    """
    import openai

    assert engine.base_url is not None
    try:
        provider = BatchProvider(engine.base_url, engine.api_key_env)
    except KeyError as exc:
        raise SpecError(
            f"engine: environment variable {exc.args[0]} is not set, and the batch-api "
            "engine reads the provider's key from it.",
            hint=f"export {exc.args[0]}=... before the run (its value is never written "
            "or printed), or remove engine.api_key_env.") from None
    provider.client = provider.client.with_options(max_retries=1, timeout=10.0)
    try:
        provider.client.batches.list(limit=1)
    except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
        raise BackendUnavailableError(
            f"engine.base_url: the provider at {engine.base_url} refused the key (HTTP "
            f"{exc.status_code}); no row was read.",
            hint="Check the key in the variable engine.api_key_env names.") from None
    except openai.APIStatusError:
        return  # it answered: reachable
    except openai.APIConnectionError as exc:
        raise BackendUnavailableError(
            f"engine.base_url: can't reach the Batch API at {engine.base_url} ({exc}); no "
            "row was read.",
            hint="Check the URL and port, and that this machine can reach it.") from None
