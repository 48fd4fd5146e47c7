"""Small pictures of an image job's sample rows, embedded in the report as data: URIs.

An image job's output drops the image bytes (they would double the output's size)
but keeps what names the picture: an image folder's ``path`` id, or the id of a row
of a local parquet file whose ``options.image_column`` holds the bytes. The report
goes back to that source only where it is local and cheap, for the dozen sample rows
it shows; a picture it can't find or decode just has no thumbnail (a report never
fails over one, and a broken picture is already an error row).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: Longest side of a thumbnail, in CSS pixels.
THUMBNAIL_PIXELS = 96
#: Bytes of every thumbnail together (the report stays one small file).
MAX_THUMBNAIL_BYTES = 200_000
#: A picture file bigger than this is not opened for a thumbnail.
MAX_IMAGE_FILE_BYTES = 32 << 20
#: A local parquet input bigger than this is not scanned for its sample rows' pictures.
MAX_PARQUET_SCAN_BYTES = 1 << 30


def sample_thumbnails(rows: list[Mapping[str, Any]], id_column: str,
                      spec: Mapping[str, Any]) -> dict[str, str]:
    """Row id (as the sample table shows it) -> ``data:image/...`` URI, for the sample
    rows whose picture can be found: a local image file a row names, image bytes the
    row kept, or the image column of a local parquet input. Empty for a job without
    pictures."""
    found: dict[str, bytes | Path] = {}
    for row in rows:
        source = _in_row(row)
        if source is not None:
            found[str(row.get(id_column))] = source
    missing = [row.get(id_column) for row in rows if str(row.get(id_column)) not in found]
    if missing:
        found.update(_from_parquet_input(missing, id_column, spec))
    thumbnails: dict[str, str] = {}
    spent = 0
    for row in rows:
        key = str(row.get(id_column))
        if key in thumbnails or key not in found:
            continue
        uri = _thumbnail(found[key])
        if uri is None:
            continue
        spent += len(uri)
        if spent > MAX_THUMBNAIL_BYTES:
            break
        thumbnails[key] = uri
    return thumbnails


def _in_row(row: Mapping[str, Any]) -> bytes | Path | None:
    """A picture the output row itself leads to: a local image file named by one of
    its values (an image folder's ``path``), or image bytes it kept."""
    from toolkit.run.input.file_access import IMAGE_EXTENSIONS

    for value in row.values():
        if isinstance(value, dict):
            value = value.get("bytes")  # a Hugging Face image column
        if isinstance(value, (bytes, bytearray)) and value:
            return bytes(value)
        if (isinstance(value, str) and value.lower().endswith(IMAGE_EXTENSIONS)
                and "://" not in value and len(value) < 4096):
            path = Path(value).expanduser()
            if path.is_file():
                return path
    return None


def _from_parquet_input(ids: Iterable[Any], id_column: str,
                        spec: Mapping[str, Any]) -> dict[str, bytes]:
    """The pictures of rows ``ids`` from the job's input, when it is a local parquet file
    or folder of a bounded size whose ``options.image_column`` the output dropped."""
    data, options = spec.get("data") or {}, spec.get("options") or {}
    source, column = data.get("input"), options.get("image_column")
    if not isinstance(source, str) or not isinstance(column, str) or "://" in source \
            or ":" in source.split("/")[0]:  # sample:NAME, hf://, s3://: not read here
        return {}
    path = Path(source).expanduser()
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    try:
        if not files or not all(f.is_file() and f.suffix == ".parquet" for f in files) \
                or sum(f.stat().st_size for f in files) > MAX_PARQUET_SCAN_BYTES:
            return {}
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        dataset = ds.dataset([str(f) for f in files], format="parquet")
        if id_column not in dataset.schema.names or column not in dataset.schema.names:
            return {}
        wanted = [i for i in ids if i is not None]
        found: dict[str, bytes] = {}
        scanner = dataset.scanner(columns=[id_column, column], batch_size=256,
                                  filter=pc.field(id_column).isin(wanted))
        for batch in scanner.to_batches():
            for row_id, value in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                if isinstance(value, dict):
                    value = value.get("bytes")
                if isinstance(value, (bytes, bytearray)) and value:
                    found[str(row_id)] = bytes(value)
            if len(found) >= len(wanted):
                break  # every sample row's picture: the rest of the file is not read
        return found
    except Exception:  # noqa: BLE001 - an input moved or changed since the run: no thumbnails
        return {}


def _thumbnail(source: bytes | Path) -> str | None:
    """A JPEG (PNG where the picture has transparency) at most THUMBNAIL_PIXELS on its
    longest side, as a data: URI; None for what doesn't open as a picture."""
    from PIL import Image

    try:
        if isinstance(source, Path):
            if source.stat().st_size > MAX_IMAGE_FILE_BYTES:
                return None
            source = source.read_bytes()
        with Image.open(io.BytesIO(source)) as image:
            image.draft("RGB", (THUMBNAIL_PIXELS * 2, THUMBNAIL_PIXELS * 2))  # JPEG: decode small
            image.thumbnail((THUMBNAIL_PIXELS, THUMBNAIL_PIXELS))
            clear = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
            picture = image.convert("RGBA" if clear else "RGB")
        buffer = io.BytesIO()
        if clear:
            picture.save(buffer, "PNG", optimize=True)
        else:
            picture.save(buffer, "JPEG", quality=80)
    except Exception:  # noqa: BLE001 - Pillow raises many kinds for a broken picture
        return None
    kind = "png" if clear else "jpeg"
    return f"data:image/{kind};base64,{base64.b64encode(buffer.getvalue()).decode('ascii')}"
