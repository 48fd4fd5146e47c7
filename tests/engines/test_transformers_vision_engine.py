"""The transformers vision engine: chat messages with pictures in, text or row errors out."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from toolkit.engines.transformers.chat_engine import generate_texts  # noqa: E402
from toolkit.engines.transformers.vision_engine import (  # noqa: E402
    TransformersVisionEngine,
    apply_transformers_vision_engine,
    split_images,
)
from toolkit.engines.images import decode_image, image_to_data_url, resize_image  # noqa: E402
from toolkit.samples.image_files import write_sample_images  # noqa: E402
from toolkit.samples.tiny_vision_model import build_tiny_vision_model  # noqa: E402
from toolkit.spec.engine_settings import validate_engine  # noqa: E402

GREEDY = {"temperature": 0.0, "max_tokens": 8, "top_p": 1.0}


def image_row(row_id: int, image_part: dict, error: str | None = None, **sampling) -> dict:
    """A row as a vision job's preprocess makes it."""
    return {
        "id": row_id,
        "messages": [
            {"role": "system", "content": "You describe pictures in one sentence."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "What is in this picture?"}, image_part],
            },
        ],
        "sampling_params": {**GREEDY, **sampling},
        "error": error,
    }


def as_data_url(path) -> dict:
    url = image_to_data_url(resize_image(decode_image(path.read_bytes())), format="JPEG")
    return {"type": "image_url", "image_url": {"url": url}}


def as_bytes(path) -> dict:
    return {"type": "image", "image": path.read_bytes()}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_vision_model(tmp_path_factory.mktemp("models") / "tiny-vision")


@pytest.fixture(scope="module")
def engine(model_dir):
    return TransformersVisionEngine(str(model_dir), engine_kwargs={})


@pytest.fixture(scope="module")
def pictures(tmp_path_factory):
    """Two good pictures, then a truncated JPEG."""
    paths = write_sample_images(tmp_path_factory.mktemp("images"), count=3, corrupt=1, seed=0)
    good = [path for path in paths if path.stat().st_size and _decodes(path)]
    (bad,) = sorted(set(paths) - set(good))
    return good + [bad]


def _decodes(path) -> bool:
    try:
        decode_image(path.read_bytes())
    except ValueError:
        return False
    return True


def test_a_batch_with_good_corrupt_and_failed_rows(engine, pictures):
    good, other, corrupt = pictures
    rows = [
        image_row(0, as_data_url(good)),
        image_row(1, as_bytes(other)),
        image_row(2, as_bytes(corrupt)),
        image_row(3, as_bytes(good), error="preprocess: company name missing"),
    ]

    out = generate_texts(engine, rows)

    assert [row["id"] for row in out] == [0, 1, 2, 3]
    assert all(out[i]["generated_text"] and out[i]["error"] is None for i in (0, 1))
    assert out[2]["generated_text"] is None
    assert out[2]["error"].startswith("messages[1].content[1]: image data is corrupt or truncated")
    assert out[3] == {
        "id": 3,
        "generated_text": None,
        "num_input_tokens": None,
        "num_generated_tokens": None,
        "finish_reason": None,
        "generated_logprob": None,
        "error": "preprocess: company name missing",
    }
    # The prompt columns, pictures included, are not carried on.
    assert set(out[0]) == {"id", "generated_text", "num_input_tokens", "num_generated_tokens",
                           "finish_reason", "generated_logprob", "error"}


def test_unusable_images_become_row_errors(engine, pictures):
    rows = [
        image_row(0, {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}),
        image_row(1, {"type": "image", "image": b""}),
        image_row(2, {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}),
        image_row(3, as_bytes(pictures[0])),
    ]

    errors = [row["error"] for row in generate_texts(engine, rows)]

    assert errors == [
        "messages[1].content[1]: only data: URLs and image bytes are supported, "
        "got 'https://example.com/cat.jpg'",
        "messages[1].content[1]: image data is empty (0 bytes)",
        "messages[1].content[1]: data URL has invalid base64: Only base64 data is allowed",
        None,
    ]


def test_greedy_output_is_repeatable_and_depends_on_the_picture(engine, pictures):
    good, other, _ = pictures
    rows = [image_row(i, as_bytes(path)) for i, path in enumerate([good, other, good])]

    texts = [row["generated_text"] for row in generate_texts(engine, rows)]

    assert texts[0] == texts[2] != texts[1]


def test_structured_outputs_constrain_the_answer(engine, pictures):
    choice = {"choice": ["circle", "square", "triangle"]}
    rows = [image_row(i, as_bytes(pictures[i]), structured_outputs=choice) for i in (0, 1)]

    texts = [row["generated_text"] for row in generate_texts(engine, rows)]

    assert all(text in choice["choice"] for text in texts), texts


def test_prompts_longer_than_max_model_len_become_error_rows(model_dir, pictures):
    short = TransformersVisionEngine(str(model_dir), engine_kwargs={"max_model_len": 32})

    (row,) = generate_texts(short, [image_row(0, as_bytes(pictures[0]))])

    match = re.fullmatch(r"prompt is (\d+) tokens, longer than max_model_len 32", row["error"])
    assert match and int(match.group(1)) > 32
    assert row["generated_text"] is None


def test_split_images_normalises_parts_that_went_through_arrow(pictures):
    # After Arrow, every part has every key, with nulls where it has none.
    messages = [
        {"role": "user", "content": [
            {"type": "text", "text": "Hi", "image": None, "image_url": None},
            {"type": "image", "text": None, "image": pictures[0].read_bytes(), "image_url": None},
        ]},
    ]

    template_messages, images = split_images(messages)

    assert template_messages == [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image"}]}
    ]
    assert [image.mode for image in images] == ["RGB"]


def test_importing_the_engine_module_does_not_load_torch():
    code = (
        "import sys, toolkit.engines.transformers.vision_engine\n"
        "print(sorted({'torch', 'transformers', 'PIL', 'ray'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


# --------------------------------------------------------------------------- on Ray


def test_runs_as_a_ray_data_stage(local_ray, model_dir, pictures):
    import ray

    good, other, corrupt = pictures
    ds = ray.data.from_items(
        [
            image_row(0, as_data_url(good)),
            image_row(1, as_data_url(other)),
            image_row(2, as_bytes(corrupt)),
            image_row(3, as_data_url(good), error="preprocess: failed"),
            image_row(4, as_bytes(other)),
        ]
    )
    config = validate_engine(dict(kind="transformers", model=str(model_dir), batch_size=2,
                                  concurrency=1))

    rows = sorted(apply_transformers_vision_engine(ds, config).take_all(), key=lambda r: r["id"])

    assert [row["id"] for row in rows] == [0, 1, 2, 3, 4]
    assert set(rows[0]) == {"id", "generated_text", "num_input_tokens", "num_generated_tokens",
                            "finish_reason", "generated_logprob", "error"}
    assert [bool(row["generated_text"]) for row in rows] == [True, True, False, False, True]
    assert rows[2]["error"].startswith("messages[1].content[1]: image data is corrupt")
    assert rows[3]["error"] == "preprocess: failed"
