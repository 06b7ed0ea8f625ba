"""Just enough PNG decoding (8-bit RGB/RGBA, non-interlaced) to ask whether a screenshot, or a region of it,
shows anything."""

from __future__ import annotations

import struct
import zlib
from collections import Counter


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and raw pixel rows (filters undone) of a PNG as Chromium writes it."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and color in (2, 6) and interlace == 0, "unsupported PNG layout"
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, [bytes(r) for r in rows]


def distinct_colours(data: bytes, step: int = 4) -> int:
    width, height, rows = decode_png(data)
    bpp = len(rows[0]) // width
    seen = set()
    for y in range(0, height, step):
        r = rows[y]
        for x in range(0, width, step):
            seen.add(r[x * bpp : x * bpp + 3])
    return len(seen)


def region_colours(data: bytes, x: int, y: int, w: int, h: int) -> Counter:
    """How many pixels of each RGB colour the box (x, y, w, h) holds (clipped to the image)."""
    width, height, rows = decode_png(data)
    bpp = len(rows[0]) // width
    seen: Counter = Counter()
    for yy in range(max(y, 0), min(y + h, height)):
        r = rows[yy]
        for xx in range(max(x, 0), min(x + w, width)):
            seen[r[xx * bpp : xx * bpp + 3]] += 1
    return seen
