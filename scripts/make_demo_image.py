#!/usr/bin/env python3
"""Writes an 8-bit grayscale PNG for the hologram demo: a ring around the letter F.

Standard library only (zlib + struct), so the demo needs no NumPy or Pillow:
    make_demo_image.py OUT.png SIZE

The F is asymmetric on purpose: a reconstruction that came out mirrored or upside down would
show it at a glance.
"""
import struct
import sys
import zlib


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def write_png(path, rows):
    height, width = len(rows), len(rows[0])
    raw = b"".join(b"\x00" + bytes(r) for r in rows)  # filter type 0 per scanline
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        f.write(chunk(b"IEND", b""))


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    c = (n - 1) / 2.0
    rows = []
    for i in range(n):
        row = []
        for k in range(n):
            u, v = (k - c) / n, (i - c) / n  # -0.5 .. 0.5, v downwards
            r = (u * u + v * v) ** 0.5
            ring = 0.40 <= r <= 0.46
            stem = -0.18 <= u <= -0.08 and -0.26 <= v <= 0.26
            top = -0.18 <= u <= 0.20 and -0.26 <= v <= -0.16
            mid = -0.18 <= u <= 0.12 and -0.05 <= v <= 0.04
            value = 255 if (stem or top or mid) else 160 if ring else 0
            row.append(value)
        rows.append(row)
    write_png(out, rows)


if __name__ == "__main__":
    main()
