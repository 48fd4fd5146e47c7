"""The transformers engine: a Ray Data actor pool over Hugging Face ``generate``.

Same row contract as Ray Data LLM's vLLM processor: ``messages`` and
``sampling_params`` in, ``generated_text`` out, other columns carried through. It
exists for CPUs and small GPUs, where vLLM doesn't run.

Why it is fast (``bench/engine_throughput.py`` measures each point alone):
- the model loads once per actor (class UDF), never per batch;
- a whole Ray batch is one padded ``generate`` call with a KV cache, rather
  than the row-at-a-time ``pipeline("text-generation")`` pattern;
- the prompt head every row shares (system prompt, chat template) is computed
  once per actor and its key/value cache reused by every batch
  (:mod:`toolkit.engines.transformers.prompt_prefix`; ``engine_kwargs.enable_prefix_caching:
  false`` turns it off, as on vLLM);
- at temperature 0 an identical prompt is answered once per actor, and rows
  that already failed never reach the model;
- structured outputs (``choice``/``regex``/``json``/``grammar``, vLLM's names) go
  through llguidance (one of vLLM's structured-output backends; a small Rust
  library with no GPU compiler stack behind it), as a token mask at each step, so
  a constrained answer needs only as many decode steps as its tokens and is
  always valid; grammars are compiled once per actor and cached. Each constraint
  is written so that it allows what vLLM's default backend, xgrammar, allows
  (:func:`structured_output_grammar`).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from toolkit.engines.batch_stage import stage_resources
from toolkit.engines.transformers.prompt_prefix import PrefixCache
from toolkit.spec.row_contract import (
    ERROR_COLUMN,
    FINISH_REASON_COLUMN,
    GENERATED_LOGPROB_COLUMN,
    GENERATED_TEXT_COLUMN,
    MESSAGES_COLUMN,
    PROMPT_COLUMN,
    SAMPLING_PARAMS_COLUMN,
    object_column,
    plain,
    prompt_too_long,
    row_error,
)

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.spec.engine_settings import EngineSettings
    from toolkit.engines.model_source import ModelLocation


def structured_output_grammar(constraint: dict[str, Any]) -> str:
    """Map a vLLM ``structured_outputs`` dict to an llguidance grammar that allows
    what xgrammar, vLLM's default backend, allows for it: a regex as xgrammar reads
    it (:func:`toolkit.spec.structured_regex.engine_regex`), and a JSON schema with
    xgrammar's defaults (any JSON whitespace between tokens; \\uXXXX escapes in
    strings; an object schema that names properties or required ones takes no others
    unless it says so)."""
    from llguidance import LLMatcher, grammar_from

    if "choice" in constraint:
        choices = [str(c) for c in constraint["choice"]]
        if not choices:
            raise ValueError("structured_outputs choice is an empty list")
        return LLMatcher.grammar_from_lark(
            "start: " + " | ".join(json.dumps(c) for c in choices))
    if "regex" in constraint:
        from toolkit.spec.structured_regex import engine_regex

        return LLMatcher.grammar_from_regex(engine_regex(str(constraint["regex"])))
    if "json" in constraint:
        schema = constraint["json"]
        schema = json.loads(schema) if isinstance(schema, str) else schema
        return LLMatcher.grammar_from_json_schema(
            json.dumps(_closed_objects(schema)),
            defaults={"whitespace_flexible": True, "json_allow_general_unicode_escapes": True})
    if "grammar" in constraint:
        return grammar_from("grammar", str(constraint["grammar"]))
    raise ValueError(
        f"unsupported structured_outputs {sorted(constraint)}; use choice, regex, json or grammar"
    )


#: JSON schema keywords whose value is a schema, a list of schemas, or a map of them.
_SUBSCHEMA = ("items", "additionalItems", "additionalProperties", "unevaluatedProperties",
              "not", "if", "then", "else", "contains", "propertyNames")
_SUBSCHEMA_LISTS = ("prefixItems", "anyOf", "oneOf", "allOf", "items")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions",
                   "dependentSchemas")


def _closed_objects(schema: Any) -> Any:
    """``schema`` with xgrammar's strict mode spelled out: an object schema that names
    ``properties`` or ``required`` ones and doesn't say ``additionalProperties`` takes
    no others (``{"type": "object"}`` alone stays any object, as in xgrammar)."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA:
        if isinstance(out.get(key), dict):
            out[key] = _closed_objects(out[key])
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_closed_objects(s) for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: _closed_objects(s) for name, s in out[key].items()}
    if ("properties" in out or "required" in out) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


class CompiledGrammar(NamedTuple):
    """A grammar compiled for one tokenizer: a matcher at its start, copied for each row."""

    matcher: Any  # llguidance.LLMatcher
    vocab_size: int
    eos_ids: frozenset[int]
    tokens: "TokenBytes"

    def new_matcher(self) -> Any:
        return self.matcher.deep_copy()


class TokenBytes:
    """Each token's bytes, to find the tokens that spell a part of a forced stretch.

    Where the grammar leaves one way to go on (the rest of a choice once its first
    letters tell it apart), llguidance allows only the first token of that
    stretch's canonical tokenization; xgrammar, vLLM's default, allows any token
    that spells a piece of it, and the model picks. :class:`GrammarLogitsProcessor`
    adds those tokens back, so greedy answers go token by token as on vLLM.
    Built on first use (one pass over the vocabulary), once per tokenizer.
    """

    def __init__(self, grammar_tokenizer: Any) -> None:
        self.tokenizer = grammar_tokenizer
        self._by_bytes: dict[bytes, list[int]] | None = None
        self._sorted: list[tuple[bytes, int]] = []

    def _build(self) -> dict[bytes, list[int]]:
        if self._by_bytes is None:
            tokenizer = self.tokenizer
            by_bytes: dict[bytes, list[int]] = {}
            for token in range(tokenizer.vocab_size):
                if tokenizer.is_special_token(token):
                    continue
                spelled = tokenizer.decode_bytes([token])
                if spelled:
                    by_bytes.setdefault(spelled, []).append(token)
            self._sorted = sorted((b, t) for b, ids in by_bytes.items() for t in ids)
            self._by_bytes = by_bytes
        return self._by_bytes

    def spelling_part_of(self, forced: bytes) -> tuple[list[int], list[int]]:
        """(tokens whose bytes begin ``forced``: all allowed; tokens whose bytes
        begin with ``forced`` and go on: allowed where the grammar takes them)."""
        from bisect import bisect_right

        by_bytes = self._build()
        within = [t for end in range(1, len(forced) + 1) for t in by_bytes.get(forced[:end], ())]
        beyond = []
        for spelled, token in self._sorted[bisect_right(self._sorted, (forced, 1 << 62)):]:
            if not spelled.startswith(forced):
                break
            beyond.append(token)
        return within, beyond


def grammar_tokenizer(tokenizer: Any, vocab_size: int) -> Any:
    """An ``llguidance.LLTokenizer`` for a Hugging Face (fast) tokenizer, whose stop
    token is the tokenizer's end-of-sequence token, as xgrammar's would be."""
    from copy import copy

    from llguidance import LLTokenizer

    if getattr(tokenizer, "backend_tokenizer", None) is None:
        raise ValueError("structured outputs need a fast (Rust) tokenizer; "
                         f"{type(tokenizer).__name__} isn't one")
    backend = copy(tokenizer.backend_tokenizer)  # its padding settings are not ours to change
    backend.no_padding()
    backend.no_truncation()
    return LLTokenizer(backend.to_str(), n_vocab=vocab_size, eos_token=tokenizer.eos_token_id)


def compile_grammar(grammar_tokenizer: Any, constraint: dict[str, Any],
                    token_bytes: TokenBytes | None = None) -> CompiledGrammar:
    """Compile a ``structured_outputs`` dict; ValueError says why it can't be.
    ``token_bytes``: the tokenizer's, shared by its grammars (else one of its own)."""
    from llguidance import LLMatcher

    token_bytes = token_bytes or TokenBytes(grammar_tokenizer)
    matcher = LLMatcher(grammar_tokenizer, structured_output_grammar(constraint), log_level=0)
    if matcher.is_error():
        raise ValueError(f"structured_outputs can't be compiled: {matcher.get_error()}")
    return CompiledGrammar(matcher, grammar_tokenizer.vocab_size,
                           frozenset(grammar_tokenizer.eos_tokens), token_bytes)


#: Greedy answers an actor remembers, by prompt (a few MB at most).
ANSWERS_KEPT = 50_000


class TransformersChatEngine:
    """Ray Data class UDF: loads the model in ``__init__``, generates per batch.

    ``dedupe`` (answer an identical greedy prompt once) and ``rows_per_call``
    (cut a batch's rows, ordered by length, into ``generate`` calls of at most
    this many; None: one call) exist to measure and compare; the defaults are
    the fast ones.
    """

    #: Prompts are token lists whose shared head can be cached (the vision
    #: engine's prompts carry images, so it pads whole prompts instead).
    reuses_prompt_prefix = True

    def __init__(
        self,
        model_source: "str | ModelLocation",
        engine_kwargs: dict[str, Any],
        use_gpu: bool = False,
        num_threads: int = 1,
        chat_template_kwargs: dict[str, Any] | None = None,
        dedupe: bool = True,
        rows_per_call: int | None = None,
        apply_chat_template: bool = True,
    ) -> None:
        started = time.monotonic()
        import torch

        from toolkit.engines.model_source import model_location

        torch.set_num_threads(max(1, num_threads))
        self.torch = torch
        self.device = "cuda" if use_gpu and torch.cuda.is_available() else "cpu"
        self.tokenizer, self.model = self._load(
            model_location(model_source).path(), engine_kwargs.get("dtype", "auto")
        )
        # Decoder-only batch generation: new tokens must follow every prompt directly.
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model.to(self.device).eval()
        # Multimodal configs keep the decoder's settings in a nested text config.
        text_config = self.model.config.get_text_config()
        config_limit = getattr(text_config, "max_position_embeddings", None)
        self.max_model_len = int(engine_kwargs.get("max_model_len") or config_limit or 4096)
        # Extra chat template arguments (e.g. enable_thinking), as vLLM's stage passes them.
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        # Off: each row's `prompt` is the model's input as written (/v1/completions).
        self.apply_chat_template = apply_chat_template
        self._grammar_tokenizer: Any = None
        self._token_bytes: TokenBytes | None = None
        self._grammars: dict[str, CompiledGrammar] = {}
        # vLLM's setting, with vLLM's default (on); off only to compare answers or speed.
        self.prefixes = (
            PrefixCache(self.model, self.tokenizer.pad_token_id, self.device)
            if self.reuses_prompt_prefix and engine_kwargs.get("enable_prefix_caching", True)
            else None
        )
        self.dedupe = dedupe
        self.rows_per_call = rows_per_call
        self._answers: OrderedDict[bytes, Generated] = OrderedDict()
        self._eos_ids: frozenset[int] | None = None
        # Logged with the first batch, then None: the line is written once per worker.
        self._load_seconds: float | None = time.monotonic() - started

    def _load(self, path: str, dtype: str) -> tuple[Any, Any]:
        """Load (tokenizer, model) from ``path``; subclasses load other model kinds."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        return AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype
        )

    # -- structured outputs -------------------------------------------------
    def _compiled_grammar(self, constraint: dict[str, Any]) -> CompiledGrammar:
        key = json.dumps(constraint, sort_keys=True, default=str)
        if key not in self._grammars:
            if self._grammar_tokenizer is None:
                # Multimodal configs keep the decoder's vocabulary in a nested text config.
                vocab_size = self.model.config.get_text_config().vocab_size
                self._grammar_tokenizer = grammar_tokenizer(self.tokenizer, vocab_size)
                self._token_bytes = TokenBytes(self._grammar_tokenizer)
            self._grammars[key] = compile_grammar(self._grammar_tokenizer, constraint,
                                                  self._token_bytes)
        return self._grammars[key]

    # -- generation ---------------------------------------------------------
    def _prepare_prompts(self, inputs: list[Any]) -> list[Any]:
        """Per row, a prompt for ``_encode``, or a ValueError saying why the row can't run.

        ``inputs``: the rows' chat messages, or their prompt texts as written where the
        chat template is off; those are tokenized with the tokenizer's special tokens
        (a BOS), as vLLM tokenizes a completion's prompt."""
        if self.apply_chat_template:
            texts = [
                self.tokenizer.apply_chat_template(
                    c, add_generation_prompt=True, tokenize=False, **self.chat_template_kwargs
                )
                for c in inputs
            ]
        else:
            texts = [str(text) for text in inputs]
        # One batched (Rust, multi-threaded) tokenizer call for the whole batch.
        token_ids = self.tokenizer(
            texts, add_special_tokens=not self.apply_chat_template)["input_ids"] if texts else []
        return [self._check_length(len(ids)) or ids for ids in token_ids]

    def _check_length(self, n_tokens: int) -> ValueError | None:
        if n_tokens > self.max_model_len:
            return ValueError(prompt_too_long(n_tokens, self.max_model_len))
        return None

    def _encode(self, prompts: Sequence[Any]) -> Any:
        """Pad already-tokenized prompts into one batch on the model's device."""
        return self.tokenizer.pad(
            {"input_ids": list(prompts)}, padding=True, return_tensors="pt"
        ).to(self.device)

    def _model_inputs(self, prompts: Sequence[Any]) -> Any:
        """The batch's ``generate`` inputs: suffixes after a cached shared prefix where
        the prompts have one, else whole prompts left-padded."""
        if self.prefixes is not None:
            prepared = self.prefixes.prepare(prompts)
            if prepared is not None:
                return prepared
        return self._encode(prompts)

    def _prompt_key(self, prompt: Any) -> bytes | None:
        """What makes two prompts the same prompt (their tokens); None: never the same."""
        return array("q", prompt).tobytes()

    def _prompt_length(self, prompt: Any) -> int:
        return len(prompt)

    def _row_budgets(self, params: dict[str, Any], prompt_lengths: Sequence[int]) -> list[int]:
        """Per row, the new tokens it may get, as vLLM counts them: its own
        ``max_tokens``, capped by what ``max_model_len`` leaves after its own prompt
        (never by another row's, so batching a row doesn't change its answer)."""
        max_tokens = int(params.get("max_tokens") or 16)
        return [max(1, min(max_tokens, self.max_model_len - n)) for n in prompt_lengths]

    def _generate(
        self, prompts: Sequence[Any], params: dict[str, Any]
    ) -> list[Generated | BaseException]:
        """Generate for prompts sharing one set of sampling params: per row, what it
        generated (:class:`Generated`)."""
        torch = self.torch
        encoded = self._model_inputs(prompts)
        prompt_len = encoded["input_ids"].shape[1]
        prompt_counts = encoded["attention_mask"].sum(dim=1).tolist()
        budgets = self._row_budgets(params, prompt_counts)
        temperature = float(params.get("temperature") or 0.0)
        kwargs: dict[str, Any] = {
            # The longest budget bounds the call; each row stops at its own below.
            "max_new_tokens": max(budgets),
            "pad_token_id": self.tokenizer.pad_token_id,
            "do_sample": temperature > 0,
        }
        if min(budgets) < max(budgets):
            kwargs["stopping_criteria"] = [_row_budget_criterion(budgets, prompt_len)]
        if temperature > 0:
            kwargs["temperature"] = temperature
            kwargs["top_p"] = float(params.get("top_p") or 1.0)
            if params.get("seed") is not None:
                torch.manual_seed(int(params["seed"]))
        constraint = params.get("structured_outputs")
        processors: list[Any] = []
        if constraint:
            # One processor per generate() call: it keeps per-row matcher state.
            processors.append(
                GrammarLogitsProcessor(self._compiled_grammar(constraint), budgets, prompt_len))
        # Last, so it sees the scores as the grammar left them.
        logprobs = TokenLogprobs(prompt_len)
        kwargs["logits_processor"] = [*processors, logprobs]
        with torch.inference_mode():
            output = self.model.generate(**encoded, **kwargs)
        new_tokens = output[:, prompt_len:]
        rows = [new_tokens[i, :budget] for i, budget in enumerate(budgets)]
        texts = self.tokenizer.batch_decode(rows, skip_special_tokens=True)
        counts = [int((row != self.tokenizer.pad_token_id).sum()) for row in rows]
        token_logprobs = logprobs.per_token(output)
        ends = [self._generated_length(row.tolist()) for row in rows]
        return [
            Generated(text, count, prompt_count, "stop" if stopped else "length",
                      float(token_logprobs[i, :length].sum()) if length else 0.0)
            for i, (text, count, prompt_count, (length, stopped))
            in enumerate(zip(texts, counts, prompt_counts, ends))
        ]

    def _generated_length(self, tokens: list[int]) -> tuple[int, bool]:
        """(tokens the row generated, its end-of-sequence token included; whether it
        ended there): a row without one ran into its ``max_tokens``, as vLLM's
        ``finish_reason: length``."""
        if self._eos_ids is None:
            configured = self.model.generation_config.eos_token_id
            if configured is None:
                configured = self.tokenizer.eos_token_id
            ids = configured if isinstance(configured, list) else [configured]
            self._eos_ids = frozenset(i for i in ids if i is not None)
        for position, token in enumerate(tokens):
            if token in self._eos_ids:
                return position + 1, True
        return len(tokens), False

    def _generate_isolating_failures(
        self, prompts: Sequence[Any], params: dict[str, Any]
    ) -> list[Generated | BaseException]:
        try:
            return self._generate(prompts, params)
        except Exception:  # noqa: BLE001 - retried row by row to find the culprit
            if len(prompts) == 1:
                raise
        results: list[Generated | BaseException] = []
        for prompt in prompts:
            try:
                results.extend(self._generate([prompt], params))
            except Exception as exc:  # noqa: BLE001 - becomes that row's error
                results.append(exc)
        return results

    def _answer_group(
        self, prompts: Sequence[Any], params: dict[str, Any], params_key: str
    ) -> list[Generated | BaseException]:
        """Answers for prompts sharing sampling params, each distinct prompt computed once.

        At temperature 0 a prompt seen before, in this batch or an earlier one on
        this actor, gets the answer already computed: greedy decoding would give it
        the same one. The rest run ordered by length, so a call's rows pad alike.
        """
        greedy = not float(params.get("temperature") or 0.0) > 0
        keys: list[bytes | None] = [None] * len(prompts)
        if greedy and self.dedupe:
            # 16-byte digests, so remembering 50k answers costs a few MB, not the prompts.
            keys = [
                hashlib.blake2b(params_key.encode() + k, digest_size=16).digest()
                if (k := self._prompt_key(p)) is not None else None
                for p in prompts
            ]
        results: list[Generated | BaseException | None] = [None] * len(prompts)
        first_of: dict[bytes, int] = {}
        todo: list[int] = []
        for i, key in enumerate(keys):
            if key is not None and key in self._answers:
                results[i] = self._answers[key]
            elif key is not None and key in first_of:
                continue  # filled in from its first occurrence below
            else:
                if key is not None:
                    first_of[key] = i
                todo.append(i)
        todo.sort(key=lambda i: self._prompt_length(prompts[i]))
        step = self.rows_per_call or len(todo) or 1
        for start in range(0, len(todo), step):
            chunk = todo[start: start + step]
            answers = self._generate_isolating_failures([prompts[i] for i in chunk], params)
            for i, answer in zip(chunk, answers):
                results[i] = answer
                if keys[i] is not None and not isinstance(answer, BaseException):
                    self._remember(keys[i], answer)
        for i, key in enumerate(keys):
            if results[i] is None and key is not None:
                results[i] = results[first_of[key]]
        return [r for r in results if r is not None]  # every one is set by now

    def _remember(self, key: bytes, answer: Generated) -> None:
        self._answers[key] = answer
        if len(self._answers) > ANSWERS_KEPT:
            self._answers.popitem(last=False)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        inputs = MESSAGES_COLUMN if self.apply_chat_template else PROMPT_COLUMN
        size = len(batch[inputs])
        if self._load_seconds is not None:
            log_first_batch(size, self._load_seconds)
            self._load_seconds = None
        errors = [row_error(v) for v in batch.get(ERROR_COLUMN, [None] * size)]
        answers: list[Generated | None] = [None] * size
        groups: dict[str, list[tuple[int, Any]]] = {}
        group_params: dict[str, dict[str, Any]] = {}
        todo = [i for i in range(size) if not errors[i]]
        prompts = self._prepare_prompts([plain(batch[inputs][i]) for i in todo])
        for i, prompt in zip(todo, prompts):
            if isinstance(prompt, ValueError):
                errors[i] = str(prompt)
                continue
            raw = plain(batch[SAMPLING_PARAMS_COLUMN][i]) if SAMPLING_PARAMS_COLUMN in batch else {}
            params = {k: v for k, v in (raw or {}).items() if v is not None}
            key = json.dumps(params, sort_keys=True, default=str)
            group_params[key] = params
            groups.setdefault(key, []).append((i, prompt))
        for key, members in groups.items():
            results = self._answer_group([p for _, p in members], group_params[key], key)
            for (i, _), result in zip(members, results):
                if isinstance(result, BaseException):
                    errors[i] = f"engine error: {type(result).__name__}: {result}"
                else:
                    answers[i] = result
        # The prompt columns are consumed here; carrying them on only costs memory.
        batch.pop(MESSAGES_COLUMN, None)
        batch.pop(inputs, None)
        batch.pop(SAMPLING_PARAMS_COLUMN, None)
        for column, field in _ANSWER_COLUMNS:
            batch[column] = object_column([getattr(a, field) if a else None for a in answers])
        batch[ERROR_COLUMN] = object_column(errors)
        return batch


def log_first_batch(rows: int, load_seconds: float) -> None:
    """One line in the run's log when the first rows reach a worker's model: how long
    the model took to load and when the work began, so start-up is told from steady
    work (``bench/vs_seed_pattern.py`` reads it)."""
    at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    print(f"engine: model loaded in {load_seconds:.1f} s; first batch ({rows} rows) at {at}",
          file=sys.stderr, flush=True)


class Generated(NamedTuple):
    """What the engine generated for one row."""

    text: str
    tokens: int
    prompt_tokens: int
    finish_reason: str
    logprob: float


#: Row columns -> Generated fields. Ray Data LLM's vLLM stage names its text and
#: token counts the same way; finish_reason is OpenAI's and vLLM's name.
_ANSWER_COLUMNS = (
    (GENERATED_TEXT_COLUMN, "text"),
    ("num_input_tokens", "prompt_tokens"),
    ("num_generated_tokens", "tokens"),
    (FINISH_REASON_COLUMN, "finish_reason"),
    (GENERATED_LOGPROB_COLUMN, "logprob"),
)


class TokenLogprobs:
    """A logits processor that records each generated token's log-probability as the
    model scored it after the processors before it (the structured-output mask), so
    a constrained answer's probability is over the answers the constraint allows.

    The token chosen at a step is known only at the next call (or from the output,
    for the last step), so one step's log-softmax is kept meanwhile, not all of them.
    """

    def __init__(self, prompt_len: int) -> None:
        import torch

        self.torch = torch
        self.prompt_len = prompt_len
        self._last: Any = None
        self._steps: list[Any] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        self._record(input_ids)
        self._last = self.torch.log_softmax(scores.float(), dim=-1)
        return scores

    def _record(self, sequences: Any) -> None:
        position = self.prompt_len + len(self._steps)
        if self._last is not None and sequences.shape[1] > position:
            chosen = sequences[:, position:position + 1].to(self._last.device)
            self._steps.append(self._last.gather(1, chosen).squeeze(1))
            self._last = None

    def per_token(self, output: Any) -> Any:
        """(rows x generated tokens) log-probabilities, after ``generate`` returned."""
        self._record(output)
        if not self._steps:
            return self.torch.zeros((output.shape[0], 0))
        return self.torch.stack(self._steps, dim=1).cpu()


class GrammarLogitsProcessor:
    """The grammar's token mask for a batch whose rows stop at different lengths.

    One matcher per row, a new processor per ``generate`` call, as vLLM keeps one
    per request: at each step a row's matcher takes the token the row got last, then
    allows the tokens that can continue a valid answer, and the stop token only
    where the answer is complete. A row past its own token budget, or that already
    stopped, is left alone: ``generate`` pads it from then on, and those pads are
    not tokens its grammar should see.
    """

    def __init__(self, grammar: CompiledGrammar, budgets: Sequence[int], prompt_len: int) -> None:
        import torch

        self.torch = torch
        self.budgets = list(budgets)
        self.prompt_len = prompt_len
        self.matchers = [grammar.new_matcher() for _ in self.budgets]
        self.stopped = [False] * len(self.budgets)
        self.eos_ids = grammar.eos_ids
        self.tokens = grammar.tokens
        self.vocab_size = grammar.vocab_size
        # One bit per token, 32 to an int32, all allowed until a row's matcher fills its own.
        self.bitmask = torch.full((len(self.budgets), (self.vocab_size + 31) // 32), -1,
                                  dtype=torch.int32)
        self._bits = torch.arange(32, dtype=torch.int32)
        self._words = self.bitmask.numpy().view(np.uint32)  # the same memory, to set bits in

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        generated = input_ids.shape[1] - self.prompt_len
        for i, (matcher, budget) in enumerate(zip(self.matchers, self.budgets)):
            if self.stopped[i] or generated > budget:
                continue  # finished (its stop token) or cut at its budget: now padding
            if generated > 0:
                token = int(input_ids[i, -1])
                if token in self.eos_ids and matcher.is_accepting():
                    self.stopped[i] = True
                    continue
                if not matcher.consume_token(token):
                    raise RuntimeError("generated a token its structured output does not allow")
            if generated < budget:
                row = self.bitmask[i]
                matcher.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * row.element_size())
                if matcher.is_error():
                    raise RuntimeError(f"structured output failed: {matcher.get_error()}")
                forced = matcher.compute_ff_bytes()
                if forced:
                    self._allow_every_spelling(i, matcher, forced)
        return apply_token_bitmask(scores, self.bitmask, self._bits)

    def _allow_every_spelling(self, row: int, matcher: Any, forced: bytes) -> None:
        """Allow, besides the canonical one, every token that spells a piece of the
        stretch the grammar forces next (:class:`TokenBytes`)."""
        within, beyond = self.tokens.spelling_part_of(forced)
        beyond = [t for t in beyond if matcher.deep_copy().try_consume_tokens([t]) == 1]
        words = self._words[row]
        for token in (*within, *beyond):
            if token < self.vocab_size:
                words[token >> 5] |= np.uint32(1 << (token & 31))


def apply_token_bitmask(scores: Any, bitmask: Any, bits: Any) -> Any:
    """``scores`` with every token whose bit is 0 in its row of ``bitmask`` at -inf
    (tokens past the bitmask's width too), in place."""
    import torch

    rows, words = bitmask.shape
    allowed = ((bitmask.unsqueeze(-1) >> bits) & 1).view(rows, words * 32).bool()
    width = min(scores.shape[1], allowed.shape[1])
    scores[:, :width].masked_fill_(~allowed[:, :width].to(scores.device), -torch.inf)
    scores[:, width:] = -torch.inf
    return scores


def _row_budget_criterion(budgets: Sequence[int], prompt_len: int) -> Any:
    """A stopping criterion that finishes each row once it has its own budget of tokens."""
    import torch
    from transformers import StoppingCriteria

    class RowBudgets(StoppingCriteria):
        def __init__(self) -> None:
            self.budgets = torch.tensor(list(budgets))

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            generated = input_ids.shape[1] - prompt_len
            return (generated >= self.budgets).to(input_ids.device)

    return RowBudgets()


def apply_transformers_engine(
    ds: "Dataset",
    engine: "EngineSettings",
    udf: type = TransformersChatEngine,
    model: "ModelLocation | None" = None,
) -> "Dataset":
    """Run ``udf`` (the chat engine or a subclass) over ``ds`` on ``engine.concurrency`` actors
    (a fixed pool, or an autoscaling one for a range).

    Ray's core worker logs, once per driver, an error-level line for these actors:
    ``Actor with class name: 'MapWorker(...)' ... has constructor arguments in the
    object store and max_restarts > 0`` (ray-project/ray#53727). It doesn't come from
    the arguments below, which are small plain values inlined in the task spec: Ray
    Data itself creates every pool actor with two object-store references,
    ``ctx=ray.put(DataContext)`` and ``map_transformer=ray.put(MapTransformer)`` (which
    carries the UDF and these kwargs), and with ``max_restarts=-1``
    (``ray/data/_internal/execution/operators/actor_pool_map_operator.py``,
    ``_start_actor`` and ``_apply_default_remote_args``); core_worker.cc warns on any
    actor created with a by-reference argument and restarts allowed. A UDF without
    any argument gets it too. The only way to silence it at the source,
    ``max_restarts=0``, would stop Ray from bringing back an engine actor that was
    killed (out of memory), so we keep restarts (``engine.max_restarts`` of them).

    The risk it describes can't happen here: both objects are ``ray.put`` by the
    driver, whose operator holds their references for the whole execution, so they
    neither go out of scope while an actor may restart nor get lost short of losing
    the driver's node, which ends the run anyway. ``toolkit run`` sends the line to
    the run's log file with the rest of Ray's output (``toolkit.run.driver``).
    """
    use_gpu = engine.accelerator_type is not None
    return ds.map_batches(
        udf,
        fn_constructor_kwargs={
            "model_source": model or engine.model,
            "engine_kwargs": dict(engine.engine_kwargs),
            "use_gpu": use_gpu,
            "num_threads": max(1, int(engine.num_cpus)),
            "chat_template_kwargs": dict(engine.chat_template_kwargs),
            "apply_chat_template": getattr(engine, "apply_chat_template", True),
        },
        **stage_resources(engine),
    )


def generate_texts(
    engine: TransformersChatEngine, rows: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Run the engine on plain rows without Ray (for tests and benchmarks)."""
    batch = {key: object_column([row.get(key) for row in rows]) for key in rows[0]}
    out = engine(batch)
    return [{key: out[key][i] for key in out} for i in range(len(rows))]
