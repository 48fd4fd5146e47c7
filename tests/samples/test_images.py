"""Sample pictures and the image helpers: generated files, broken ones caught, data URLs."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from toolkit.engines.images import (
    data_url_to_bytes,
    decode_image,
    image_to_data_url,
    resize_image,
)
from toolkit.samples.image_files import write_sample_images


def decodable(path) -> bool:
    try:
        decode_image(path.read_bytes())
    except ValueError:
        return False
    return True


def test_writes_count_pictures_of_which_exactly_corrupt_are_broken(tmp_path):
    paths = write_sample_images(tmp_path / "images", count=12, corrupt=3, seed=0)

    assert [path.name[:9] for path in paths] == [f"img-{i:05d}" for i in range(12)]
    assert sorted(tmp_path.joinpath("images").iterdir()) == paths
    broken = [path for path in paths if not decodable(path)]
    assert len(broken) == 3
    assert all(path.suffix == ".jpg" for path in broken)
    # Spread among the files, not bunched at one end.
    assert broken != paths[:3] and broken != paths[-3:]


def test_good_pictures_are_jpeg_and_png_of_the_requested_size(tmp_path):
    paths = write_sample_images(tmp_path, count=8, size=(40, 30))

    images = [decode_image(path.read_bytes()) for path in paths]
    assert {image.size for image in images} == {(40, 30)}
    assert [image.format for image in images] == ["JPEG", "JPEG", "JPEG", "PNG"] * 2
    assert [path.suffix for path in paths] == [".jpg", ".jpg", ".jpg", ".png"] * 2
    assert len({image.tobytes() for image in images}) == 8  # every picture differs


def test_each_kind_of_breakage_is_reported_with_its_reason(tmp_path):
    paths = write_sample_images(tmp_path, count=3, corrupt=3, seed=0)

    reasons = []
    for path in paths:
        with pytest.raises(ValueError) as caught:
            decode_image(path.read_bytes())
        reasons.append(str(caught.value))
    assert sorted(reason.split(" (")[0] for reason in reasons) == [
        "image data is corrupt or truncated",  # a JPEG cut in half
        "image data is empty",  # a zero-byte file
        "not a recognised image format",  # a text file named .jpg
    ]


def test_same_seed_writes_the_same_bytes(tmp_path):
    first = write_sample_images(tmp_path / "a", count=6, corrupt=2, seed=7)
    again = write_sample_images(tmp_path / "b", count=6, corrupt=2, seed=7)
    other = write_sample_images(tmp_path / "c", count=6, corrupt=2, seed=8)

    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in again]
    assert [p.read_bytes() for p in first] != [p.read_bytes() for p in other]


def test_rejects_impossible_requests(tmp_path):
    with pytest.raises(ValueError, match="cannot make 3 of 2"):
        write_sample_images(tmp_path, count=2, corrupt=3)
    with pytest.raises(ValueError, match="negative"):
        write_sample_images(tmp_path, count=-1)
    with pytest.raises(ValueError, match="size"):
        write_sample_images(tmp_path, count=1, size=(0, 10))


def test_decode_catches_truncation_anywhere_in_a_png():
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), "red").save(buffer, format="PNG")
    data = buffer.getvalue()

    assert decode_image(data).size == (32, 32)
    with pytest.raises(ValueError, match="corrupt or truncated"):
        decode_image(data[:-20])


def test_decode_wants_bytes_not_a_data_url():
    with pytest.raises(TypeError, match="data_url_to_bytes"):
        decode_image("data:image/png;base64,AAAA")  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P"])
def test_resize_gives_225_square_rgb(mode):
    image = Image.new(mode, (64, 48))

    resized = resize_image(image)

    assert resized.size == (225, 225)
    assert resized.mode == "RGB"
    assert resize_image(image, size=(32, 16)).size == (32, 16)


def test_data_url_round_trip(tmp_path):
    (path,) = write_sample_images(tmp_path, count=1)
    image = resize_image(decode_image(path.read_bytes()))

    png_url = image_to_data_url(image)
    jpeg_url = image_to_data_url(image, format="JPEG")

    assert png_url.startswith("data:image/png;base64,")
    assert jpeg_url.startswith("data:image/jpeg;base64,")
    assert decode_image(data_url_to_bytes(png_url)).tobytes() == image.tobytes()  # lossless
    assert decode_image(data_url_to_bytes(jpeg_url)).size == (225, 225)


def test_data_url_to_bytes_explains_what_is_wrong():
    assert data_url_to_bytes("data:text/plain,hello%20world") == b"hello world"
    with pytest.raises(ValueError, match="expected a data: URL"):
        data_url_to_bytes("https://example.com/cat.jpg")
    with pytest.raises(ValueError, match="invalid base64"):
        data_url_to_bytes("data:image/png;base64,not base64!")
