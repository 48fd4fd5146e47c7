"""Reusing the key/value cache of a prompt prefix that many rows share.

A batch job's prompts mostly start the same way: the system prompt and the chat
template's head are identical on every row and only the row's own words differ
(text-industry: about two thirds of each prompt's tokens). Running the model over
that shared head once per actor, and handing its key/value cache to every batch,
spares the engine the bulk of its prompt work. vLLM does the same with its
automatic prefix caching (``enable_prefix_caching``), which is also the setting
that turns this off.

How a batch uses a cached prefix of ``P`` tokens: each row's input is the prefix,
then left padding, then the row's own suffix::

    [prefix ........][pad pad][suffix of row 1    ]
    [prefix ........][pad pad pad pad][suffix row 2]

with an attention mask of 1, 0, 1 over those three parts. ``generate`` derives
position ids from the mask's running sum, so every suffix token gets the position
it has in the whole prompt, pads are never attended to, and the model computes
only the suffixes: the same arithmetic as the whole prompt left-padded, without
the prefix's share of it.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

#: Shorter shared heads aren't worth a cache lookup and a copy per batch.
MIN_PREFIX_TOKENS = 16
#: Distinct prefixes an actor keeps (a job normally has one; a few cover jobs
#: whose prompt head depends on an option or a column).
PREFIXES_KEPT = 8


def shared_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """Tokens every prompt starts with, leaving each at least one token of its own
    (the model must run on something to produce the first new token's logits)."""
    if not prompts:
        return 0
    shortest = min(len(p) for p in prompts)
    first = prompts[0]
    length = 0
    while length < shortest - 1 and all(p[length] == first[length] for p in prompts):
        length += 1
    return length


class PrefixCache:
    """Key/value caches of prompt prefixes, computed once per actor and reused.

    ``prepare(prompts)`` returns the batch's model inputs: with a cached (or newly
    computed) prefix the rows' suffixes padded between it and them, plus a copy
    of the prefix cache expanded to the batch; without one (too short a shared
    head, or a model whose cache can't be reused) ``None``, and the caller pads
    whole prompts as usual.
    """

    def __init__(self, model: Any, pad_token_id: int, device: str) -> None:
        self.model = model
        self.pad_token_id = pad_token_id
        self.device = device
        self._caches: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self.usable = True

    def prepare(self, prompts: Sequence[Sequence[int]]) -> dict[str, Any] | None:
        if not self.usable:
            return None
        prefix = self._prefix_for(prompts)
        if prefix is None:
            return None
        cache = self._cache_of(prefix)
        if cache is None:
            return None
        import torch

        length = len(prefix)
        suffixes = [list(p[length:]) for p in prompts]
        widest = max(len(s) for s in suffixes)
        input_ids = [
            list(prefix) + [self.pad_token_id] * (widest - len(s)) + s for s in suffixes
        ]
        mask = [[1] * length + [0] * (widest - len(s)) + [1] * len(s) for s in suffixes]
        batch_cache = copy.deepcopy(cache)
        batch_cache.batch_repeat_interleave(len(prompts))
        return {
            "input_ids": torch.tensor(input_ids, device=self.device),
            "attention_mask": torch.tensor(mask, device=self.device),
            "past_key_values": batch_cache,
        }

    def _prefix_for(self, prompts: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
        """The longest kept prefix every prompt extends, else the batch's own shared
        head (a one-row batch only reuses, it never adds a prefix of its own)."""
        for prefix in sorted(self._caches, key=len, reverse=True):
            if all(len(p) > len(prefix) and tuple(p[: len(prefix)]) == prefix for p in prompts):
                self._caches.move_to_end(prefix)
                return prefix
        if len(prompts) < 2:
            return None
        length = shared_prefix_length(prompts)
        return tuple(prompts[0][:length]) if length >= MIN_PREFIX_TOKENS else None

    def _cache_of(self, prefix: tuple[int, ...]) -> Any:
        if prefix in self._caches:
            return self._caches[prefix]
        import torch
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        with torch.inference_mode():
            self.model(
                input_ids=torch.tensor([prefix], device=self.device),
                past_key_values=cache,
                use_cache=True,
            )
        if not isinstance(cache, DynamicCache) or cache.get_seq_length() != len(prefix):
            # A model with another kind of state (recurrent layers, say): its
            # cache can't be expanded and extended this way, so don't try again.
            self.usable = False
            return None
        self._caches[prefix] = cache
        while len(self._caches) > PREFIXES_KEPT:
            self._caches.popitem(last=False)
        return cache
