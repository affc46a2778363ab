"""Users' photos prepared the way Fashion-MNIST was made, and refused clearly when they
cannot be read."""

import numpy as np
import pytest
from PIL import Image, ImageDraw


def page(tmp_path, name="photo.png", size=(600, 900), box=(60, 400, 260, 860), mode="RGB"):
    """A dark rectangle item, off-centre, on a light non-square page."""
    im = Image.new("RGB", size, (245, 244, 240))
    ImageDraw.Draw(im).rectangle(box, fill=(25, 25, 35))
    path = tmp_path / name
    im.convert(mode).save(path)
    return path


def test_a_dark_item_on_a_light_page_becomes_a_centred_light_item(tmp_path):
    from eqx_fmnist.data import prepare_image

    p = prepare_image(page(tmp_path))
    assert p.pixels.shape == (28, 28) and p.pixels.dtype == np.uint8
    assert p.inverted and p.background > 200 and p.size == (600, 900)
    # Trimmed to the item (judged on a copy reduced 4x: to within 4 pixels).
    assert np.abs(np.subtract(p.box, (60, 400, 261, 861))).max() <= 4
    rows, cols = np.nonzero(p.pixels > 128)
    assert rows.max() - rows.min() + 1 >= 27  # the longest edge fills 28
    assert (
        abs((rows.min() + rows.max()) / 2 - 13.5) <= 1
        and abs((cols.min() + cols.max()) / 2 - 13.5) <= 1
    )
    assert p.pixels[0, 0] < 20 and p.pixels[14, 14] > 200  # light on dark


def test_invert_can_be_forced_either_way(tmp_path):
    from eqx_fmnist.data import prepare_image

    path = page(tmp_path)
    assert not prepare_image(path, invert=False).inverted
    assert prepare_image(path, invert=False).pixels[14, 14] < 60
    dark = tmp_path / "dark.png"
    Image.fromarray(255 - np.asarray(Image.open(path).convert("L"))).save(dark)
    assert not prepare_image(dark).inverted and prepare_image(dark, invert=True).inverted


def test_a_fashion_mnist_image_survives_the_pipeline(real_data, tmp_path):
    from eqx_fmnist.data import load_image

    original = real_data.test_images[0]
    Image.fromarray(255 - original).resize((112, 112), Image.Resampling.LANCZOS).save(
        tmp_path / "x.png"
    )
    got = load_image(tmp_path / "x.png").astype(float)
    # Trimming and centring may move the item by a pixel.
    best = max(
        np.corrcoef(np.roll(got, (dy, dx), (0, 1)).ravel(), original.astype(float).ravel())[0, 1]
        for dy in (-1, 0, 1)
        for dx in (-1, 0, 1)
    )
    assert best > 0.9


@pytest.mark.parametrize("mode", ["CMYK", "L", "P", "RGBA"])
def test_other_colour_modes_give_the_same_answer(mode, tmp_path):
    from eqx_fmnist.data import prepare_image

    ext = "jpg" if mode == "CMYK" else "png"
    reference = prepare_image(page(tmp_path)).pixels.astype(int)
    got = prepare_image(page(tmp_path, f"p.{ext}", mode=mode)).pixels.astype(int)
    assert np.abs(got - reference).mean() < 8


def test_a_16_bit_image_is_scaled_not_clipped(tmp_path):
    from eqx_fmnist.data import prepare_image

    a = np.zeros((90, 60), np.uint16)
    a[20:70, 10:50] = 60_000  # a bright item on black, 16 bits deep
    Image.fromarray(a).save(tmp_path / "deep.png")
    with Image.open(tmp_path / "deep.png") as im:
        assert im.mode.startswith("I")
    p = prepare_image(tmp_path / "deep.png")
    assert not p.inverted and 200 < p.pixels[14, 14] <= 255 and p.pixels[0, 0] == 0


def test_a_float_image_in_0_1_is_read_on_that_scale(tmp_path):
    """A float TIFF of a bright item (0.9) on black (0), pixels in [0, 1]: read as
    such, not as 0-255 (every pixel black before)."""
    from eqx_fmnist.data import prepare_image

    a = np.zeros((90, 60), np.float32)
    a[20:70, 10:50] = 0.9
    Image.fromarray(a, "F").save(tmp_path / "float.tiff")
    p = prepare_image(tmp_path / "float.tiff")
    assert not p.inverted and 200 < p.pixels[14, 14] <= 255 and p.pixels[0, 0] == 0


@pytest.mark.parametrize("case", ["missing", "text", "truncated", "folder", "huge"])
def test_unreadable_images_name_the_file(case, tmp_path, monkeypatch):
    from eqx_fmnist.data import DataError, images, prepare_image

    path = tmp_path / "bad.png"
    if case == "text":
        path.write_text("not an image")
    elif case == "truncated":
        path.write_bytes(page(tmp_path).read_bytes()[:200])
    elif case == "folder":
        path.mkdir()
    elif case == "huge":
        page(tmp_path, "bad.png")
        monkeypatch.setattr(images, "MAX_PIXELS", 1000)
    with pytest.raises(DataError, match="bad.png"):
        prepare_image(path)


def test_an_image_pillow_calls_a_decompression_bomb_is_one_line(tmp_path, monkeypatch):
    """Past Pillow's own limit (twice `MAX_IMAGE_PIXELS`, 179 megapixels by default: a
    24 kB PNG can hold that many) Pillow raises before the size can be read; it is the
    same one line as an image over `MAX_PIXELS`. The limit is lowered here, so that a
    small file stands for the large one."""
    from PIL import Image

    from eqx_fmnist.data import DataError, prepare_image

    path = tmp_path / "bomb.png"
    Image.new("L", (300, 300)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)
    with pytest.raises(DataError, match=r"bomb.png is more than the 50 megapixels read here"):
        prepare_image(path)


def _saved(fmt: str, mode: str = "L") -> bytes:
    """A 16 x 20 noise image as Pillow writes it in `fmt` (the IM format's writer warns
    that it is deprecated: these files are readers' input, not Pillow's future)."""
    import io
    import warnings

    import numpy as np
    from PIL import Image

    pixels = (np.random.default_rng(0).random((20, 16)) * 255).astype(np.uint8)
    out = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        Image.fromarray(pixels).convert(mode).save(out, format=fmt)
    return out.getvalue()


def _tiff_with_double_strip_offsets() -> bytes:
    """StripOffsets (tag 273) typed DOUBLE (12) instead of LONG: a float offset."""
    import struct

    data = bytearray(_saved("TIFF"))
    ifd = struct.unpack_from("<I", data, 4)[0]
    for i in range(struct.unpack_from("<H", data, ifd)[0]):
        entry = ifd + 2 + 12 * i
        if struct.unpack_from("<H", data, entry)[0] == 273:
            struct.pack_into("<H", data, entry + 2, 12)
    return bytes(data)


def _dds_with_pixel_format_flags_0() -> bytes:
    import struct

    data = bytearray(_saved("DDS", "RGB"))
    struct.pack_into("<I", data, 80, 0)  # DDS_PIXELFORMAT.dwFlags
    return bytes(data)


def _spider_with_a_damaged_header() -> bytes:
    data = bytearray(_saved("SPIDER", "F"))
    for at, byte in ((82, 103), (107, 115), (165, 200)):  # found by fuzzing
        data[at] = byte
    return bytes(data)


def _im_with_a_fractional_size() -> bytes:
    return _saved("IM", "RGB").replace(b"(x*y): 16*20", b"(x*y): .6*20", 1)


def _float_tiff(value: float) -> bytes:
    import io

    import numpy as np
    from PIL import Image

    out = io.BytesIO()
    pixels = np.full((8, 8), 0.5, np.float32)
    pixels[3, 3] = value
    Image.fromarray(pixels, "F").save(out, format="TIFF")
    return out.getvalue()


HOSTILE = {
    "tiff-double-strip-offsets.tiff": _tiff_with_double_strip_offsets,
    "dds-pixel-format-flags-0.dds": _dds_with_pixel_format_flags_0,
    "spider-damaged-header.spi": _spider_with_a_damaged_header,
    "im-fractional-size.im": _im_with_a_fractional_size,
    "float-nan.tiff": lambda: _float_tiff(float("nan")),
    "float-inf.tiff": lambda: _float_tiff(float("inf")),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_file_the_decoder_fails_on_in_its_own_way_is_one_line(name, tmp_path):
    """Each decoder's own exception (Pillow raised TypeError, NotImplementedError,
    AttributeError on these, found by fuzzing) and non-finite pixels (which numpy would
    cast to 0 or 255 with a warning) become one `DataError` naming the file."""
    from eqx_fmnist.data import DataError, prepare_image

    path = tmp_path / name
    path.write_bytes(HOSTILE[name]())
    with pytest.raises(DataError) as refused:
        prepare_image(path)
    line = str(refused.value)
    assert str(path) in line and "\n" not in line


def test_a_pipe_named_like_an_image_is_refused_not_waited_on(tmp_path):
    """A FIFO would block the reader until something writes to it: only regular files
    are read."""
    import os

    from eqx_fmnist.data import DataError, prepare_image

    fifo = tmp_path / "x.png"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="x.png is not a regular file"):
        prepare_image(fifo)
