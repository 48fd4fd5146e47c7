"""The tiny vision model: builds offline, loads with the Auto classes, generates from pictures."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import AutoModelForImageTextToText, AutoProcessor, AutoTokenizer  # noqa: E402

from toolkit.engines.images import decode_image  # noqa: E402
from toolkit.samples import tiny_vision_model  # noqa: E402
from toolkit.samples.image_files import write_sample_images  # noqa: E402
from toolkit.samples.tiny_vision_model import (  # noqa: E402
    IMAGE_TOKENS_PER_IMAGE,
    build_tiny_vision_model,
    tiny_vision_model_path,
)

QUESTION = [
    {
        "role": "user",
        "content": [{"type": "image"}, {"type": "text", "text": "What is in this picture?"}],
    }
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_vision_model(tmp_path_factory.mktemp("models") / "tiny-vision", seed=0)


@pytest.fixture(scope="module")
def processor(model_dir):
    return AutoProcessor.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def model(model_dir):
    return AutoModelForImageTextToText.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def pictures(tmp_path_factory):
    paths = write_sample_images(tmp_path_factory.mktemp("images"), count=2, seed=0)
    return [decode_image(path.read_bytes()) for path in paths]


def test_build_writes_a_small_complete_model(model_dir):
    names = {path.name for path in model_dir.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors"} <= names
    assert {"tokenizer.json", "processor_config.json", "chat_template.jinja", ".complete"} <= names
    size = sum(path.stat().st_size for path in model_dir.iterdir())
    assert size < 5_000_000
    # No staging directories are left beside the target.
    assert [path.name for path in model_dir.parent.iterdir()] == ["tiny-vision"]


def test_loads_with_auto_classes(model_dir, processor, model):
    assert type(processor).__name__ == "LlavaProcessor"
    assert type(model).__name__ == "LlavaForConditionalGeneration"
    assert model.config.image_token_index == processor.tokenizer.convert_tokens_to_ids("<image>")
    assert model.config.get_text_config().vocab_size == len(processor.tokenizer)
    assert model.generation_config.eos_token_id == processor.tokenizer.eos_token_id
    # The tokenizer alone carries the same (image-aware) chat template.
    assert AutoTokenizer.from_pretrained(model_dir).chat_template == processor.chat_template


def test_chat_template_renders_openai_image_parts(processor):
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}},
                {"type": "image"},
            ],
        },
    ]

    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    assert prompt == (
        "<|begin_of_text|>"
        "<|start_header|>system<|end_header|>\n\nBe brief.<|eot|>"
        "<|start_header|>user<|end_header|>\n\nCompare<image>\n<image>\n<|eot|>"
        "<|start_header|>assistant<|end_header|>\n\n"
    )


def test_generates_for_a_batch_of_two_pictures(processor, model, pictures):
    prompts = [
        processor.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False),
        processor.apply_chat_template(
            [{"role": "system", "content": "You describe pictures."}, *QUESTION],
            add_generation_prompt=True,
            tokenize=False,
        ),
    ]
    processor.tokenizer.padding_side = "left"
    batch = processor(text=prompts, images=pictures, padding=True, return_tensors="pt")

    image_token = model.config.image_token_index
    assert (batch["input_ids"] == image_token).sum(dim=1).tolist() == [IMAGE_TOKENS_PER_IMAGE] * 2
    assert batch["input_ids"][0, 0].item() == processor.tokenizer.pad_token_id  # left padded

    output = model.generate(**batch, max_new_tokens=8, do_sample=False)

    new_tokens = output[:, batch["input_ids"].shape[1] :]
    texts = processor.batch_decode(new_tokens, skip_special_tokens=True)
    assert len(texts) == 2 and all(text.strip() for text in texts)


def test_the_picture_changes_the_answer(processor, model, pictures):
    prompt = processor.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    batch = processor(text=[prompt, prompt], images=pictures, return_tensors="pt")

    output = model.generate(**batch, max_new_tokens=8, do_sample=False)

    first, second = output[:, batch["input_ids"].shape[1] :].tolist()
    assert first != second


def test_same_seed_is_byte_identical_and_seeds_differ(model_dir, tmp_path):
    again = build_tiny_vision_model(tmp_path / "again", seed=0)
    other = build_tiny_vision_model(tmp_path / "other", seed=1)

    for name in ["model.safetensors", "tokenizer.json", "config.json", "processor_config.json"]:
        assert (again / name).read_bytes() == (model_dir / name).read_bytes(), name
    assert (other / "model.safetensors").read_bytes() != (
        model_dir / "model.safetensors"
    ).read_bytes()


def test_second_call_returns_the_existing_build(model_dir, monkeypatch):
    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt a complete model")

    monkeypatch.setattr(tiny_vision_model, "_build_into", no_rebuild)

    assert build_tiny_vision_model(model_dir, seed=0) == model_dir


def test_refuses_directories_it_did_not_build(model_dir, tmp_path):
    chat_model = tmp_path / "tiny-chat"
    chat_model.mkdir()
    (chat_model / ".complete").write_text(json.dumps({"format": 1, "seed": 0}))
    foreign = tmp_path / "project"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")

    with pytest.raises(FileExistsError, match="different settings"):
        build_tiny_vision_model(chat_model)
    with pytest.raises(FileExistsError, match="different settings"):
        build_tiny_vision_model(model_dir, seed=1)
    with pytest.raises(FileExistsError, match="not a tiny model build"):
        build_tiny_vision_model(foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_cache_location_follows_toolkit_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))

    path = tiny_vision_model_path(seed=0)

    assert path == tmp_path / "cache" / "models" / "tiny-vision-seed0"
    assert (path / ".complete").is_file()
    assert tiny_vision_model_path(seed=0) == path
