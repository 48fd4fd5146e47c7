"""A chat prompt's tokens, counted as its engine counts them, with the tokenizer alone.

The engines write ``num_input_tokens`` for every row. The counter here gives the
same number before any model loads: the model's chat template over the row's
messages, then its tokenizer, each the way the engine does it
(:attr:`~toolkit.engines.registry.EngineKind.ray_llm_prompt` says whose way).

Counting every row of a big input is the point, so the tokenizer's work is not
repeated: a fast tokenizer splits a text on its added tokens (``<|eot|>``, role
headers) before anything else, and encodes the pieces between them on their own.
A prompt's pieces are mostly the same on every row (the system message, the
instructions), so each distinct piece is encoded once and its length remembered.
Where a tokenizer's added tokens don't split text that cleanly (they strip the
spaces around them, or a pre-tokenizer treats a text's first piece apart), the
counter checks itself against whole-text encoding on its first batch, and on a
row of every batch after, and encodes whole texts from the first difference on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

#: Distinct pieces remembered per counter (a piece is a few hundred bytes).
PIECES_KEPT = 200_000


class PromptTokenCounter:
    """Counts the prompt tokens of chat conversations for one model and engine kind.

    Args:
        tokenizer_source: A local model directory or Hugging Face id (only the
            tokenizer's files are read).
        ray_llm_prompt: Build prompts as Ray Data LLM's stages do (the vLLM engine);
            else as the transformers engine does.
        chat_template_kwargs: The engine section's ``chat_template_kwargs``.
    """

    def __init__(self, tokenizer_source: str, ray_llm_prompt: bool,
                 chat_template_kwargs: dict[str, Any] | None = None) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
        self.ray_llm_prompt = ray_llm_prompt
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        # Ray Data LLM's tokenize stage encodes with the tokenizer's special tokens.
        self.added_per_prompt = (self.tokenizer.num_special_tokens_to_add(pair=False)
                                 if ray_llm_prompt else 0)
        self._backend = getattr(self.tokenizer, "backend_tokenizer", None)
        self._splitter = _added_token_splitter(self.tokenizer) if self._backend else None
        self._pieces: dict[str, int] = {}
        self._checked_first = False
        self._render = _compiled_template(self.tokenizer)
        self._render_checked = False
        self._variables = {**self.tokenizer.special_tokens_map, **self.chat_template_kwargs}

    def _rendered(self, conversations: Sequence[list[dict[str, Any]]]) -> list[str] | None:
        """The chat template rendered straight from its compiled form, without
        ``apply_chat_template``'s per-call work (a third of a row's cost); None where
        a conversation needs that work (parts, an assistant message last, an added
        token in the text), or where it renders otherwise than
        ``apply_chat_template`` on the first batch or on a row of a later one."""
        splitter = self._splitter
        plain = []
        for conversation in conversations:
            if not conversation or conversation[-1].get("role") == "assistant":
                return None
            messages = []
            for message in conversation:
                content = message.get("content")
                if not isinstance(content, str) or (splitter and splitter.search(content)):
                    return None
                messages.append({k: v for k, v in message.items() if v is not None})
            plain.append(messages)
        render = self._render
        assert render is not None
        texts = [render(messages=m, tools=None, documents=None, add_generation_prompt=True,
                        **self._variables) for m in plain]
        checked = range(len(texts)) if not self._render_checked else range(1)
        self._render_checked = True
        apply = self.tokenizer.apply_chat_template
        if any(texts[i] != apply(conversations[i], add_generation_prompt=True, tokenize=False,
                                 **self.chat_template_kwargs) for i in checked):
            self._render = None
            return None
        return texts

    def prompt_texts(self, conversations: Sequence[list[dict[str, Any]]]) -> list[str]:
        """Each conversation through the chat template, as the engine renders it."""
        texts = self._rendered(conversations) if self._render is not None else None
        if texts is not None:
            return texts
        apply = self.tokenizer.apply_chat_template
        if not self.ray_llm_prompt:
            return [apply(c, add_generation_prompt=True, tokenize=False,
                          **self.chat_template_kwargs) for c in conversations]
        texts = []
        for conversation in conversations:
            # Ray Data LLM's ChatTemplateStage: an assistant message last is continued.
            generation = not conversation or conversation[-1].get("role") != "assistant"
            texts.append(apply(conversation, add_generation_prompt=generation,
                               continue_final_message=not generation, tokenize=False,
                               **self.chat_template_kwargs))
        return texts

    def count(self, conversations: Sequence[list[dict[str, Any]]]) -> list[int]:
        """Prompt tokens of each conversation (as ``num_input_tokens`` will say)."""
        texts = self.prompt_texts(conversations)
        if not texts:
            return []
        if self._splitter is None:
            return self._whole(texts)
        counts = self._by_pieces(texts)
        checked = range(len(texts)) if not self._checked_first else range(1)
        self._checked_first = True
        whole = self._whole([texts[i] for i in checked])
        if any(counts[i] != n for i, n in zip(checked, whole)):
            self._splitter = None  # this tokenizer's pieces aren't independent
            return self._whole(texts)
        return counts

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of prompts sent as written, without a chat template (both engines
        then encode with the tokenizer's special tokens, as vLLM does a completion's)."""
        return self._whole([str(text) for text in texts], special=True)

    def _whole(self, texts: list[str], special: bool | None = None) -> list[int]:
        special = self.ray_llm_prompt if special is None else special
        if self._backend is not None:
            encode = getattr(self._backend, "encode_batch_fast", self._backend.encode_batch)
            return [len(e) for e in encode(texts, add_special_tokens=special)]
        return [len(ids) for ids in
                self.tokenizer(texts, add_special_tokens=special)["input_ids"]]

    def _by_pieces(self, texts: list[str]) -> list[int]:
        assert self._splitter is not None and self._backend is not None
        split_texts = [self._splitter.split(text) for text in texts]
        pieces = self._pieces
        if len(pieces) > PIECES_KEPT:
            pieces.clear()
        missing = list({p for parts in split_texts for p in parts[::2]
                        if p and p not in pieces})
        if missing:
            encode = getattr(self._backend, "encode_batch_fast", self._backend.encode_batch)
            for piece, encoded in zip(missing, encode(missing, add_special_tokens=False)):
                pieces[piece] = len(encoded)
        # re.split with one group: text pieces at even places, added tokens at odd ones.
        return [sum(pieces[p] for p in parts[::2] if p) + len(parts) // 2
                + self.added_per_prompt for parts in split_texts]


def _compiled_template(tokenizer: Any) -> Any | None:
    """The tokenizer's chat template compiled as transformers compiles it (its
    sandbox), as a render function; None when it has none or this transformers
    compiles it otherwise."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        return _compile_jinja_template(tokenizer.get_chat_template()).render
    except Exception:  # noqa: BLE001 - no fast path: apply_chat_template renders
        return None


def _added_token_splitter(tokenizer: Any) -> re.Pattern[str] | None:
    """A pattern that cuts a text at its added tokens as the tokenizer does; None where
    the tokenizer's added tokens change the text around them."""
    added = list(getattr(tokenizer, "added_tokens_decoder", {}).values())
    if not added or any(t.lstrip or t.rstrip or t.single_word or t.normalized for t in added):
        return None
    contents = sorted({t.content for t in added if t.content}, key=len, reverse=True)
    return re.compile("(" + "|".join(map(re.escape, contents)) + ")")


def model_max_len(engine_kwargs: dict[str, Any], tokenizer_source: str,
                  path: str) -> tuple[int | None, str]:
    """(the longest prompt the engine takes, where that figure comes from): the
    section's ``engine_kwargs.max_model_len``, else the model config's positions
    (both engines' default), else unknown."""
    given = engine_kwargs.get("max_model_len")
    if isinstance(given, int) and not isinstance(given, bool) and given > 0:
        return given, f"{path}.engine_kwargs.max_model_len"
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(tokenizer_source).get_text_config()
        positions = getattr(config, "max_position_embeddings", None)
    except Exception:  # noqa: BLE001 - no config: the limit stays unknown
        positions = None
    if isinstance(positions, int) and positions > 0:
        return positions, "the model config's max_position_embeddings"
    return None, f"unknown: set {path}.engine_kwargs.max_model_len"
