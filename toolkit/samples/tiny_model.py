"""A tiny random-weight Llama-style chat model, built locally in a couple of seconds.

The model is useless for quality but real in every way that matters to a
pipeline: it loads with ``AutoTokenizer`` / ``AutoModelForCausalLM``, has a
chat template, eos/pad tokens and a generation config, and its byte-level BPE
tokenizer round-trips any Unicode text and is understood by grammar engines
such as xgrammar and llguidance. It lets CPU tests and demos run end to end with no download.

Layout written into the target directory::

    config.json  generation_config.json  model.safetensors
    tokenizer.json  tokenizer_config.json  chat_template.jinja (or inside the config)
    .complete    # JSON marker, written last: {"format": ..., "seed": ...}
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import TYPE_CHECKING

from toolkit.samples.model_cache import build_once

if TYPE_CHECKING:
    from torch import nn
    from transformers import (
        GenerationConfig,
        LlamaConfig,
        PretrainedConfig,
        PreTrainedModel,
        PreTrainedTokenizerFast,
        ProcessorMixin,
    )

__all__ = [
    "BOS_TOKEN",
    "CHAT_SHAPES",
    "CHAT_TEMPLATE",
    "EOS_TOKEN",
    "INIT_STD",
    "PAD_TOKEN",
    "build_tiny_chat_model",
    "build_tokenizer",
    "chat_template",
    "make_tokenizer_config_portable",
    "reinitialise",
    "sample_cache_dir",
    "save_tiny_model",
    "seeded_model",
    "tiny_chat_model_path",
    "tiny_generation_config",
    "tiny_llama_config",
]

# Bump when the build changes what is written: older builds are then rebuilt.
_FORMAT_VERSION = 3

# Random-weight scale. Larger than the usual 0.02: at 0.02 the residual stream is
# dominated by the input embedding and, with tied embeddings, greedy decoding just
# repeats the last prompt token ("\n\n\n..."). At 0.1 the layers mix and outputs vary.
INIT_STD = 0.1

BOS_TOKEN = "<|begin_of_text|>"
EOS_TOKEN = "<|eot|>"
PAD_TOKEN = "<|pad|>"
START_HEADER_TOKEN = "<|start_header|>"
END_HEADER_TOKEN = "<|end_header|>"
# Special tokens get the first ids, in this order: bos=0, eos=1, pad=2.
SPECIAL_TOKENS: tuple[str, ...] = (
    BOS_TOKEN,
    EOS_TOKEN,
    PAD_TOKEN,
    START_HEADER_TOKEN,
    END_HEADER_TOKEN,
)

VOCAB_SIZE = 1024
# Rotary positions cost no weights: room for every built-in template's max_model_len
# (up to vlm-caption's 8192), which vLLM refuses past the model's own limit.
MAX_POSITION_EMBEDDINGS = 8192


def chat_template(image_token: str | None = None) -> str:
    """The Llama-3 style chat template, optionally rendering image parts as ``image_token``.

    The template itself emits the BOS token and the tokenizer does not add one on
    encode, so a prompt rendered to text and then tokenized with
    add_special_tokens=True (what many engines do) gets exactly one BOS. With
    ``image_token``, each ``{"type": "image"}`` / ``{"type": "image_url"}`` part
    becomes that token on its own line (LLaVA's convention). Parts are recognised
    by type only: rows that went through Arrow carry every key of every part,
    with nulls where a part has none.
    """
    image_branch = (
        ""
        if image_token is None
        else "{%- elif part['type'] in ('image', 'image_url') %}{{- '" + image_token + "\\n' }}"
    )
    return (
        "{{- bos_token }}"
        "{%- for message in messages %}"
        "{{- '" + START_HEADER_TOKEN + "' + message['role'] + '" + END_HEADER_TOKEN + "\\n\\n' }}"
        "{%- if message['content'] is string %}"
        "{{- message['content'] | trim }}"
        "{%- else %}"
        "{%- for part in message['content'] %}"
        "{%- if part['type'] == 'text' %}{{- part['text'] | trim }}"
        + image_branch
        + "{%- endif %}"
        "{%- endfor %}"
        "{%- endif %}"
        "{{- '" + EOS_TOKEN + "' }}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}"
        "{{- '" + START_HEADER_TOKEN + "assistant" + END_HEADER_TOKEN + "\\n\\n' }}"
        "{%- endif %}"
    )


CHAT_TEMPLATE = chat_template()

INDUSTRIES: tuple[str, ...] = (
    "Law Firm",
    "Healthcare",
    "Technology",
    "Retail",
    "Consulting",
    "Manufacturing",
    "Finance",
    "Real Estate",
    "Other",
)

_PROMPT_LINES: tuple[str, ...] = (
    "You are a helpful assistant.",
    "You are a helpful assistant that classifies companies by industry.",
    "Classify the industry of the following company.",
    "Answer with exactly one of: Law Firm, Healthcare, Technology, Retail, Consulting, "
    "Manufacturing, Finance, Real Estate, Other.",
    "Reply with the industry name only, and nothing else.",
    'Return a JSON object with the keys "industry" and "confidence".',
    '{"industry": "Technology", "confidence": 0.9}',
    "Summarize the following text in one sentence.",
    "Translate the following sentence into French.",
    "Extract the date from the text and write it as DD-MM-YYYY.",
    "What is the capital of France? The capital of France is Paris.",
    "Write a short, friendly email to the customer about their subscription.",
    "The quick brown fox jumps over the lazy dog.",
    "Thank you for your message. We will get back to you as soon as possible.",
    "Please answer the question below. If you do not know the answer, say so.",
    "Question: Which industry does this company belong to? Answer:",
)


def sample_cache_dir() -> pathlib.Path:
    """Where samples are cached: ``$TOOLKIT_CACHE_DIR``, else ``~/.cache/batch-llm-toolkit``."""
    configured = os.environ.get("TOOLKIT_CACHE_DIR")
    if configured:
        return pathlib.Path(configured).expanduser()
    return pathlib.Path.home() / ".cache" / "batch-llm-toolkit"


#: The tiny chat models' shapes, by sample name: ``tiny-chat-small`` is the small
#: model of a cascade's smoke run (same tokenizer, fewer and narrower layers).
CHAT_SHAPES: dict[str, dict[str, int]] = {
    "tiny-chat": {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
                  "num_attention_heads": 2},
    "tiny-chat-small": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                        "num_attention_heads": 1},
}


def tiny_chat_model_path(seed: int = 0, shape: str = "tiny-chat") -> pathlib.Path:
    """Path of the cached tiny chat model of ``shape`` for ``seed``, building it first
    if needed."""
    return build_tiny_chat_model(sample_cache_dir() / "models" / f"{shape}-seed{seed}", seed,
                                 shape)


def build_tiny_chat_model(directory: str | os.PathLike[str], seed: int = 0,
                          shape: str = "tiny-chat") -> pathlib.Path:
    """Build the tiny random-weight chat model and its tokenizer into ``directory``.

    Returns ``directory`` as a path. If it already holds a complete build for
    ``seed`` it is returned at once. Otherwise the model is built in a
    temporary directory beside it and renamed into place, so concurrent
    builders never see or produce a half-written model: the first rename wins
    and the others discard their copy. The same seed always gives a
    byte-identical ``model.safetensors`` and ``tokenizer.json``. A build left
    by an older version of this function is replaced.

    Raises FileExistsError if ``directory`` exists and is not empty but is not
    a build of this function, or was built for another seed (nothing there is
    deleted).
    """
    marker: dict[str, object] = {"format": _FORMAT_VERSION, "seed": seed}
    if shape != "tiny-chat":  # the first shape's builds predate shapes
        marker["shape"] = shape
    return build_once(
        pathlib.Path(directory),
        marker,
        lambda staging: _build_into(staging, seed, shape),
        replace_older_formats=True,
    )


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Train the byte-level BPE tokenizer (deterministic: same files on every call).

    Special tokens take the first ids (bos=0, eos=1, pad=2, then the header
    tokens); the chat template is ``CHAT_TEMPLATE`` and padding is on the left.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    # Byte-level on every side: any Unicode text encodes without <unk> and decodes
    # back unchanged, and grammar engines recognise the vocabulary as byte-level.
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        show_progress=False,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(_training_corpus(), trainer)

    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[START_HEADER_TOKEN, END_HEADER_TOKEN],
        chat_template=CHAT_TEMPLATE,
        model_max_length=MAX_POSITION_EMBEDDINGS,
        # Decoder-only batch generation wants left padding.
        padding_side="left",
        clean_up_tokenization_spaces=False,
        # Llama takes no token_type_ids; transformers 4.x would return them and
        # model.generate(**tokenizer(...)) would then fail.
        model_input_names=["input_ids", "attention_mask"],
    )


def tiny_llama_config(
    tokenizer: PreTrainedTokenizerFast, initializer_range: float = INIT_STD,
    shape: str = "tiny-chat",
) -> LlamaConfig:
    """The tiny Llama decoder's config (:data:`CHAT_SHAPES`; ``tiny-chat``: 2 layers,
    hidden size 128), vocabulary of ``tokenizer``.

    head_dim = 64 in every shape: a size every attention kernel (FlashAttention,
    FlashInfer, SDPA) supports, so GPU engines can serve the model too.
    """
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        **CHAT_SHAPES[shape],
        num_key_value_heads=1,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=initializer_range,
    )


def tiny_generation_config(tokenizer: PreTrainedTokenizerFast) -> GenerationConfig:
    """A generation config naming ``tokenizer``'s bos, eos and pad tokens."""
    from transformers import GenerationConfig

    return GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def reinitialise(model: nn.Module, seed: int, std: float = INIT_STD) -> None:
    """Overwrite every parameter of ``model`` from a private generator seeded with ``seed``.

    The weights then depend only on the seed (not on transformers' init code,
    the global RNG state or other threads). Biases become 0, 1-D norm scales 1,
    and every other parameter is drawn from N(0, std²), in ``named_parameters``
    order.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.zero_()
            elif parameter.ndim == 1 and "norm" in name:  # LayerNorm / RMSNorm scales
                parameter.fill_(1.0)
            else:
                values = torch.randn(parameter.shape, generator=generator, dtype=torch.float32)
                parameter.copy_(values * std)


def seeded_model(
    model_class: type[PreTrainedModel],
    config: PretrainedConfig,
    tokenizer: PreTrainedTokenizerFast,
    seed: int,
    std: float = INIT_STD,
) -> PreTrainedModel:
    """Construct ``model_class(config)`` in float32 with weights from ``reinitialise(seed, std)``.

    Its generation config names ``tokenizer``'s special tokens; it is returned in eval mode.
    """
    import torch

    # fork_rng: constructing the model draws from torch's global RNG; keep the caller's intact.
    with torch.random.fork_rng(devices=[]):
        model = model_class(config)
    model = model.float()
    reinitialise(model, seed, std)
    model.generation_config = tiny_generation_config(tokenizer)
    return model.eval()


def save_tiny_model(
    directory: pathlib.Path,
    model: PreTrainedModel,
    preprocessor: PreTrainedTokenizerFast | ProcessorMixin,
) -> None:
    """Save ``model`` and its tokenizer or processor into ``directory``, quietly and portably.

    Raises RuntimeError if transformers did not write ``model.safetensors``.
    """
    from transformers.utils import logging as hf_logging

    # A library call should not draw a "Writing model shards" progress bar.
    bars_were_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        # transformers 5 always writes safetensors (the safe_serialization flag is gone).
        model.save_pretrained(directory)
        preprocessor.save_pretrained(directory)
    finally:
        if bars_were_enabled:
            hf_logging.enable_progress_bar()
    if not (directory / "model.safetensors").is_file():
        raise RuntimeError(f"transformers did not write {directory / 'model.safetensors'}")
    make_tokenizer_config_portable(directory / "tokenizer_config.json")


def make_tokenizer_config_portable(path: pathlib.Path) -> None:
    """Use the names transformers 4.x also understands; transformers 5 loads both the same.

    transformers 5 writes ``tokenizer_class: TokenizersBackend`` and a list under
    ``extra_special_tokens``; 4.x (still used by some inference engines) knows
    neither, while 5.x maps ``PreTrainedTokenizerFast`` to its fast backend and
    still reads ``additional_special_tokens``.
    """
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    extra = config.pop("extra_special_tokens", None)
    if isinstance(extra, list):
        config["additional_special_tokens"] = extra
    elif extra is not None:
        config["extra_special_tokens"] = extra
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------- internals


def _training_corpus() -> list[str]:
    """Deterministic text resembling the prompts and sample data the model will see."""
    from toolkit.samples.customers import customers_batch

    lines = list(_PROMPT_LINES)
    lines += [f"Industry: {name}" for name in INDUSTRIES]
    lines.append(", ".join(INDUSTRIES))
    lines += [" ".join(f"{i:d}" for i in range(start, start + 50)) for start in range(0, 1000, 50)]
    rows = customers_batch(0, 1500, seed=20240101).to_pylist()
    for number, row in enumerate(rows):
        year, month, day = row["Subscription Date"].split("-")
        industry = INDUSTRIES[number % len(INDUSTRIES)]
        lines.append(
            f"Company: {row['Company']}\nCity: {row['City']}\nCountry: {row['Country']}\n"
            f"Industry: {industry}"
        )
        lines.append(
            f"{row['First Name']} {row['Last Name']} ({row['Email']}, {row['Phone 1']}) "
            f"subscribed on {row['Subscription Date']} ({day}-{month}-{year}) "
            f"via {row['Website']}."
        )
    return lines


def _build_into(directory: pathlib.Path, seed: int, shape: str = "tiny-chat") -> None:
    from transformers import LlamaForCausalLM

    tokenizer = build_tokenizer()
    model = seeded_model(LlamaForCausalLM, tiny_llama_config(tokenizer, shape=shape),
                         tokenizer, seed)
    save_tiny_model(directory, model, tokenizer)
