#!/usr/bin/env python3
"""Prints what a PNG holds: "<width> <height> <distinct colours> <fraction of pixels not white>".

  tests/apps/png_stats.py IMAGE.png [ROWS]

The render tests (tests/apps/test_render.cpp) check with it that a renderer drew a picture of the
expected size that is not blank. The size is the header's; the colours and the ink are counted
over the first ROWS rows (default 400: each row is unfiltered in Python, byte by byte). Standard
library only (zlib): 8-bit greyscale, RGB, RGBA or palette images, non-interlaced, as rsvg-convert
and Chromium write them. Exits 1 on anything else.
"""
import struct
import sys
import zlib


def main():
    data = open(sys.argv[1], "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{sys.argv[1]}: not a PNG")
    at, idat, palette = 8, b"", None
    width = height = depth = ctype = interlace = None
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        at += 12 + length
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"PLTE":
            palette = [body[i:i + 3] for i in range(0, len(body), 3)]
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(ctype)
    if depth != 8 or channels is None or interlace:
        sys.exit(f"{sys.argv[1]}: bit depth {depth}, colour type {ctype}, interlace {interlace}: not read here")
    raw, stride = zlib.decompress(idat), width * channels
    rows = min(height, int(sys.argv[2]) if len(sys.argv) > 2 else 400)
    prev, colours, not_white = bytearray(stride), set(), 0
    for y in range(rows):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):  # undo the row's filter (PNG spec, section 9)
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        for x in range(0, stride, channels):
            px = bytes(line[x:x + channels])
            if ctype == 3:
                px = palette[px[0]]
            elif ctype in (0, 4):
                px = bytes([px[0]] * 3) + px[1:]
            colours.add(px)
            if px[:3] != b"\xff\xff\xff" and (len(px) < 4 or px[3] > 0):
                not_white += 1
        prev = line
    print(width, height, len(colours), f"{not_white / (width * rows):.4f}")


if __name__ == "__main__":
    main()
