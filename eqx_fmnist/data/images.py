"""Users' own images as Fashion-MNIST pixels (PIL; no JAX)."""

import os
from pathlib import Path

import numpy as np

from .idx import DataError


def load_image(path: str | os.PathLike, *, invert: bool = False) -> np.ndarray:
    """A user's image as Fashion-MNIST pixels: grayscale, 28 x 28, light item on dark.

    The image is padded to a square with its border colour, so the item keeps its
    aspect ratio, then resized.

    **Arguments:**

    - `path`: a PNG or JPEG file.
    - `invert`: turn a dark-on-light photo into light-on-dark, as Fashion-MNIST is.
        Defaults to `False`.

    **Returns:**

    A `uint8` array of shape `(28, 28)`.

    **Raises:**

    `DataError` naming the file when it is missing or not a readable image.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    path = Path(path)
    try:
        with Image.open(path) as im:
            gray = ImageOps.exif_transpose(im).convert("L")
    except FileNotFoundError:
        raise DataError(f"no image at {path}.") from None
    except (UnidentifiedImageError, OSError) as e:
        raise DataError(f"{path} is not a readable image (PNG or JPEG): {e}") from None
    pixels = np.asarray(gray)
    border = int(np.median(np.concatenate([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]])))
    side = max(gray.size)
    square = Image.new("L", (side, side), border)
    square.paste(gray, ((side - gray.size[0]) // 2, (side - gray.size[1]) // 2))
    small = np.asarray(square.resize((28, 28), Image.Resampling.LANCZOS), dtype=np.uint8)
    return 255 - small if invert else small
