"""Image files with the standard library only: 8-bit RGB PNG, and raw pixels compressed with xz.

Written for the ``images`` workload, whose samples must cost real decoding (as JPEG or PNG
files do in an image pipeline) without a new image dependency. The PNG writer uses filter type
0 (none) on every row, so the reader is ``zlib`` inflation plus dropping each row's filter byte;
a PNG from another writer (other filters, interlacing, palettes) is refused, not misread.
"""

from __future__ import annotations

import lzma
import struct
import zlib

import torch

__all__ = ["CODECS", "decode", "encode"]

CODECS: tuple[str, ...] = ("png", "xz")

_PNG = b"\x89PNG\r\n\x1a\n"
_XZ_HEADER = struct.Struct(">4sHH")  # magic, height, width
_XZ_MAGIC = b"ORXZ"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode(image: torch.Tensor, codec: str) -> bytes:
    """The file bytes of ``image``, a ``uint8`` tensor ``(3, H, W)``, in ``codec``."""
    if image.dtype != torch.uint8 or image.dim() != 3 or image.shape[0] != 3:
        raise ValueError(f"encode takes a uint8 (3, H, W) tensor, got {image.dtype} {image.shape}")
    _, h, w = image.shape
    pixels = image.permute(1, 2, 0).contiguous()  # (H, W, 3): the files' pixel order
    if codec == "xz":
        return _XZ_HEADER.pack(_XZ_MAGIC, h, w) + lzma.compress(pixels.numpy().tobytes(), preset=1)
    if codec != "png":
        raise ValueError(f"codec must be one of {', '.join(CODECS)}, got {codec!r}")
    rows = torch.cat([torch.zeros(h, 1, dtype=torch.uint8), pixels.view(h, 3 * w)], dim=1)
    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (
        _PNG
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(rows.numpy().tobytes(), 6))
        + _chunk(b"IEND", b"")
    )


def decode(data: bytes) -> torch.Tensor:
    """The ``uint8`` tensor ``(3, H, W)`` of a file :func:`encode` wrote.

    Raises:
        ValueError: not such a file (truncated, another PNG flavour, a bad checksum).
    """
    if data.startswith(_XZ_MAGIC):
        _, h, w = _XZ_HEADER.unpack_from(data)
        raw = lzma.decompress(data[_XZ_HEADER.size :])
        return _pixels(raw, h, w, 3 * w, 0)
    if not data.startswith(_PNG):
        raise ValueError("not a PNG or xz image file")
    pos, idat, size = len(_PNG), [], None
    while pos + 8 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack_from(">I", data, pos + 8 + length)
        if len(body) != length or zlib.crc32(kind + body) != crc:
            raise ValueError(f"PNG chunk {kind!r} is truncated or corrupt")
        if kind == b"IHDR":
            w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if (depth, color, interlace) != (8, 2, 0):
                raise ValueError("only 8-bit RGB PNG without interlacing is read here")
            size = (h, w)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    if size is None:
        raise ValueError("PNG without IHDR")
    h, w = size
    return _pixels(zlib.decompress(b"".join(idat)), h, w, 1 + 3 * w, 1)


def _pixels(raw: bytes, h: int, w: int, stride: int, skip: int) -> torch.Tensor:
    """``(3, H, W)`` from ``h`` rows of ``stride`` bytes whose first ``skip`` are a filter."""
    if len(raw) != h * stride:
        raise ValueError(f"image data is {len(raw)} bytes, expected {h * stride}")
    rows = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(h, stride)
    if skip and bool(rows[:, 0].any()):
        raise ValueError("only PNG filter type 0 (none) is read here")
    return rows[:, skip:].reshape(h, w, 3).permute(2, 0, 1).contiguous()
