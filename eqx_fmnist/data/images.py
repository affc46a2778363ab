"""Users' own photos prepared the way Fashion-MNIST was made (PIL; no JAX).

The data set's paper (Xiao, Rasul and Vollgraf, 2017, section 2) converted each product
photo by: trimming the edges close to the corner colour; resizing the longest edge to 28;
sharpening; extending the shorter edge to 28 with the item centred; negating the
intensities; and converting to 8-bit grayscale. [`prepare_image`][eqx_fmnist.data.images.prepare_image]
does the same to a user's photo, and decides from the background whether to negate (a
light background, as in a product photo, is negated; a dark one is kept).
"""

import dataclasses
import os
import stat
import warnings
from pathlib import Path

import numpy as np

from .errors import DataError

MAX_PIXELS = 50_000_000
"""Larger images are refused before they are decoded (50 megapixels)."""
TRIM_TOLERANCE = 24
"""Grey levels (of 255) within which an edge counts as the corner colour and is trimmed."""


@dataclasses.dataclass(frozen=True)
class PreparedImage:
    """A photo as the model sees it.

    **Fields:** `pixels` (`uint8`, 28 x 28, light item on dark), `inverted` (whether
    the intensities were negated), `background` (the corner colour, 0-255, before any
    negation), `box` (the `(left, top, right, bottom)` kept by the trim, in the original
    image's pixels), `size` (the original `(width, height)`).
    """

    pixels: np.ndarray
    inverted: bool
    background: int
    box: tuple[int, int, int, int]
    size: tuple[int, int]


def _grayscale(im) -> np.ndarray:
    """Any PIL mode as `uint8` gray: 16-bit and float images are scaled, not clipped (a
    float image whose pixels all lie in [0, 1] is read on that scale, as float images
    are written); transparency is composited onto white."""
    from PIL import Image

    if im.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        a = np.asarray(im, np.float64)
        if not np.isfinite(a).all():
            raise ValueError("its pixels include NaN or infinity")
        top = 65535.0 if im.mode.startswith("I;16") or a.max() > 255 else 255.0
        if im.mode == "F" and a.min() >= 0 and a.max() <= 1:
            top = 1.0
        return np.clip(a / top * 255.0 + 0.5, 0, 255).astype(np.uint8)
    if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
        rgba = im.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        im = Image.alpha_composite(white, rgba)
    return np.asarray(im.convert("L"), np.uint8)


def _decoded(path: Path) -> tuple[np.ndarray, int, int]:
    """The image at `path` in gray, its width and height (checked before decoding)."""
    from PIL import Image, ImageOps

    with Image.open(path) as im:
        width, height = im.size
        if width * height > MAX_PIXELS:
            raise DataError(
                f"{path} is {width:,} x {height:,} pixels, more than the "
                f"{MAX_PIXELS // 1_000_000} megapixels read here; make it smaller first."
            )
        if width == 0 or height == 0:
            raise DataError(f"{path} is an empty image ({width} x {height}).")
        return _grayscale(ImageOps.exif_transpose(im)), width, height


def _trim_box(gray: np.ndarray, background: int) -> tuple[int, int, int, int]:
    from PIL import Image

    height, width = gray.shape
    factor = max(1, -(-max(width, height) // 256))
    small = Image.fromarray(gray).reduce(factor) if factor > 1 else Image.fromarray(gray)
    rows, cols = np.nonzero(np.abs(np.asarray(small, int) - background) > TRIM_TOLERANCE)
    if not len(rows):
        return (0, 0, width, height)
    return (
        int(cols.min()) * factor,
        int(rows.min()) * factor,
        min(width, (int(cols.max()) + 1) * factor),
        min(height, (int(rows.max()) + 1) * factor),
    )


def prepare_image(path: str | os.PathLike, *, invert: bool | None = None) -> PreparedImage:
    """Prepare a photo the way Fashion-MNIST's images were made.

    **Arguments:**

    - `path`: an image file PIL reads (PNG, JPEG, ...; any mode: RGB, CMYK, 16-bit, ...).
    - `invert`: negate the intensities. Defaults to `None`: negate when the background
        (the corners' colour) is light, as for an item photographed on a white page.

    **Returns:**

    A [`PreparedImage`][eqx_fmnist.data.images.PreparedImage].

    **Raises:**

    `DataError` naming the file when it is missing, not a regular file, not an image
    the decoder can read (whatever the decoder raised), empty, larger than
    `MAX_PIXELS`, or holding pixels that are not finite.
    """
    from PIL import Image, ImageFilter

    path = Path(path)
    try:
        kind = path.stat().st_mode
    except FileNotFoundError:
        raise DataError(f"no image at {path}.") from None
    if stat.S_ISDIR(kind):
        raise DataError(f"{path} is a folder, not an image.")
    if not stat.S_ISREG(kind):  # a FIFO or a device would be read forever
        raise DataError(f"{path} is not a regular file (a pipe or a device); give an image file.")
    try:
        # Pillow warns of damaged metadata (EXIF, TIFF tags) it reads past; the pixels
        # it returns are the file's, and a file it cannot decode raises below.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gray, width, height = _decoded(path)
    except DataError:
        raise
    except Image.DecompressionBombError:  # Pillow refuses it before we see its size
        raise DataError(
            f"{path} is more than the {MAX_PIXELS // 1_000_000} megapixels read here; make "
            "it smaller first."
        ) from None
    except OSError as e:
        if e.errno is not None:  # the file system's error, not the decoder's
            raise DataError(f"{path} cannot be read: {e.strerror}.") from None
        raise DataError(f"{path} is not a readable image ({e}); give a PNG or JPEG file.") from None
    except Exception as e:  # a decoder's failure, of whatever kind: the file is damaged
        raise DataError(
            f"{path} is not a readable image ({type(e).__name__}: {e}); give a PNG or JPEG file."
        ) from None
    corners = gray[[0, 0, -1, -1], [0, -1, 0, -1]]
    background = int(np.median(corners))
    # 1. Trim the edges close to the corner colour, judged on a copy averaged down to at
    #    most 256 pixels a side, so that dithering, JPEG noise and dust do not count.
    box = _trim_box(gray, background)
    item = Image.fromarray(gray[box[1] : box[3], box[0] : box[2]])
    # 2. Resize the longest edge to 28 (keeping the aspect ratio).
    scale = 28 / max(item.size)
    size = (max(1, round(item.size[0] * scale)), max(1, round(item.size[1] * scale)))
    item = item.resize(size, Image.Resampling.LANCZOS)
    # 3. Sharpen (a Gaussian unsharp mask of radius 1).
    item = item.filter(ImageFilter.UnsharpMask(radius=1.0, percent=100, threshold=0))
    # 4. Extend the shorter edge to 28, the item centred, with the background colour.
    square = Image.new("L", (28, 28), background)
    square.paste(item, ((28 - size[0]) // 2, (28 - size[1]) // 2))
    pixels = np.asarray(square, np.uint8)
    # 5. Negate: Fashion-MNIST items are light on a dark background.
    inverted = background > 127 if invert is None else bool(invert)
    if inverted:
        pixels = 255 - pixels
    return PreparedImage(pixels, inverted, background, box, (width, height))


def load_image(path: str | os.PathLike, *, invert: bool | None = None) -> np.ndarray:
    """A user's photo as Fashion-MNIST pixels: `uint8`, 28 x 28, light item on dark.

    The pixels of [`prepare_image`][eqx_fmnist.data.images.prepare_image]`(path,
    invert=invert)`; see there.
    """
    return prepare_image(path, invert=invert).pixels
