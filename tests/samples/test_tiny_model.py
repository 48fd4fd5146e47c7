"""The tiny chat model: builds offline, loads with the Auto classes, generates, caches."""

from __future__ import annotations

import json
import re
import shutil
import threading

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from toolkit.samples import tiny_model  # noqa: E402
from toolkit.samples.tiny_model import (  # noqa: E402
    build_tiny_chat_model,
    sample_cache_dir,
    tiny_chat_model_path,
)

MESSAGES = [
    {"role": "system", "content": "You classify companies by industry."},
    {"role": "user", "content": "Which industry is Vega, Gibson and Rowland in?"},
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_chat_model(tmp_path_factory.mktemp("models") / "tiny", seed=0)


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def model(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir)


def test_build_writes_a_small_complete_model(model_dir):
    names = {path.name for path in model_dir.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors"} <= names
    assert {"tokenizer.json", "tokenizer_config.json", ".complete"} <= names
    size = sum(path.stat().st_size for path in model_dir.iterdir())
    assert 200_000 < size < 3_000_000
    # No staging directories are left beside the target.
    assert [path.name for path in model_dir.parent.iterdir()] == ["tiny"]


def test_loads_with_auto_classes(tokenizer, model):
    assert model.config.model_type == "llama"
    assert model.config.vocab_size == len(tokenizer)
    assert 1000 <= len(tokenizer) <= 2000
    assert tokenizer.bos_token == "<|begin_of_text|>"
    assert tokenizer.eos_token == "<|eot|>"
    assert tokenizer.pad_token == "<|pad|>"
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id


def test_chat_template_renders_llama3_style_prompts(tokenizer):
    prompt = tokenizer.apply_chat_template(
        [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}],
        add_generation_prompt=True,
        tokenize=False,
    )

    assert prompt == (
        "<|begin_of_text|>"
        "<|start_header|>system<|end_header|>\n\nx<|eot|>"
        "<|start_header|>user<|end_header|>\n\ny<|eot|>"
        "<|start_header|>assistant<|end_header|>\n\n"
    )
    # Encoding the rendered text adds no second BOS.
    ids = tokenizer(prompt)["input_ids"]
    assert ids.count(tokenizer.bos_token_id) == 1
    assert tokenizer.convert_ids_to_tokens(ids[:2]) == ["<|begin_of_text|>", "<|start_header|>"]


def test_tokenizer_round_trips_any_text(tokenizer):
    for text in [
        "Law Firm, Healthcare, Real Estate",
        "2021-04-23",
        "naïve café — 東京 🙂",
        " \t\n ",
    ]:
        ids = tokenizer(text)["input_ids"]
        assert tokenizer.unk_token_id is None or tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids) == text


def test_batch_generation_with_left_padding(tokenizer, model):
    prompts = [
        tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False),
        tokenizer.apply_chat_template(MESSAGES[1:], add_generation_prompt=True, tokenize=False),
    ]
    assert tokenizer.padding_side == "left"
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    assert batch["input_ids"][1, 0].item() == tokenizer.pad_token_id

    output = model.generate(**batch, max_new_tokens=8, do_sample=False)

    new_tokens = output[:, batch["input_ids"].shape[1] :]
    assert new_tokens.shape[0] == 2 and 1 <= new_tokens.shape[1] <= 8
    texts = tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
    assert all(text.strip() for text in texts)  # random, but not degenerate whitespace


def test_same_seed_is_byte_identical_and_seeds_differ(model_dir, tmp_path):
    again = build_tiny_chat_model(tmp_path / "again", seed=0)
    other = build_tiny_chat_model(tmp_path / "other", seed=1)

    for name in ["model.safetensors", "tokenizer.json", "config.json"]:
        assert (again / name).read_bytes() == (model_dir / name).read_bytes(), name
    assert (other / "model.safetensors").read_bytes() != (
        model_dir / "model.safetensors"
    ).read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (model_dir / "tokenizer.json").read_bytes()


def test_second_call_returns_the_existing_build(model_dir, monkeypatch):
    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt a complete model")

    monkeypatch.setattr(tiny_model, "_build_into", no_rebuild)
    before = (model_dir / "model.safetensors").stat().st_mtime_ns

    assert build_tiny_chat_model(model_dir, seed=0) == model_dir
    assert (model_dir / "model.safetensors").stat().st_mtime_ns == before


def test_refuses_directories_it_did_not_build(model_dir, tmp_path):
    foreign = tmp_path / "project"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")

    with pytest.raises(FileExistsError):
        build_tiny_chat_model(foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
    with pytest.raises(FileExistsError, match="different settings"):
        build_tiny_chat_model(model_dir, seed=1)


def test_replaces_a_build_left_by_an_older_version(model_dir, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(model_dir, old)
    (old / ".complete").write_text(json.dumps({"format": 0, "seed": 0}))
    (old / "model.safetensors").write_bytes(b"outdated")

    assert build_tiny_chat_model(old, seed=0) == old

    assert (old / "model.safetensors").read_bytes() == (
        model_dir / "model.safetensors"
    ).read_bytes()
    assert (old / ".complete").read_bytes() == (model_dir / ".complete").read_bytes()
    assert [path.name for path in tmp_path.iterdir()] == ["old"]


def test_refuses_a_vision_build_of_the_same_seed(tmp_path):
    vision = tmp_path / "tiny-vision"
    vision.mkdir()
    marker = json.dumps({"format": 1, "kind": "tiny-vision-llava", "seed": 0})
    (vision / ".complete").write_text(marker)

    with pytest.raises(FileExistsError, match="different settings"):
        build_tiny_chat_model(vision, seed=0)
    assert (vision / ".complete").read_text() == marker


def test_builds_into_an_existing_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    path = build_tiny_chat_model(tmp_path / "empty", seed=0)
    assert json.loads((path / ".complete").read_text())["seed"] == 0


def test_concurrent_builds_of_one_target_agree(tmp_path):
    target = tmp_path / "shared" / "tiny"
    results, errors = [], []

    def build():
        try:
            results.append(build_tiny_chat_model(target, seed=0))
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert results == [target] * 3
    assert [path.name for path in target.parent.iterdir()] == ["tiny"]
    AutoModelForCausalLM.from_pretrained(target)


def test_cache_location_follows_toolkit_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    assert sample_cache_dir() == tmp_path / "cache"

    path = tiny_chat_model_path(seed=0)

    assert path == tmp_path / "cache" / "models" / "tiny-chat-seed0"
    assert (path / ".complete").is_file()
    assert tiny_chat_model_path(seed=0) == path


def test_default_cache_location(tmp_path, monkeypatch):
    monkeypatch.delenv("TOOLKIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert sample_cache_dir() == tmp_path / ".cache" / "batch-llm-toolkit"


def test_xgrammar_understands_the_tokenizer_and_constrains_generation(tokenizer, model):
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.contrib.hf import LogitsProcessor

    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
    assert info.vocab_type == xgr.VocabType.BYTE_LEVEL
    assert info.stop_token_ids == [tokenizer.eos_token_id]
    grammar = xgr.GrammarCompiler(info).compile_regex(r"\d{2}-\d{2}-\d{4}")

    prompts = [
        tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    ] * 2
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        output = model.generate(
            **batch, max_new_tokens=16, do_sample=True, logits_processor=[LogitsProcessor(grammar)]
        )

    texts = tokenizer.batch_decode(
        output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True
    )
    assert all(re.fullmatch(r"\d{2}-\d{2}-\d{4}", text) for text in texts), texts


def test_llguidance_understands_the_tokenizer_and_constrains_generation(tokenizer, model):
    pytest.importorskip("llguidance")
    from toolkit.engines.transformers.chat_engine import (
        GrammarLogitsProcessor,
        compile_grammar,
        grammar_tokenizer,
    )

    info = grammar_tokenizer(tokenizer, model.config.vocab_size)
    assert info.eos_tokens == [tokenizer.eos_token_id]
    grammar = compile_grammar(info, {"regex": r"\d{2}-\d{2}-\d{4}"})

    prompts = [
        tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    ] * 2
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    prompt_len = batch["input_ids"].shape[1]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        output = model.generate(
            **batch, max_new_tokens=16, do_sample=True,
            logits_processor=[GrammarLogitsProcessor(grammar, [16, 16], prompt_len)],
        )

    texts = tokenizer.batch_decode(output[:, prompt_len:], skip_special_tokens=True)
    assert all(re.fullmatch(r"\d{2}-\d{2}-\d{4}", text) for text in texts), texts
