#!/usr/bin/env python3
"""Writes a synthetic interferogram's wrapped phase for the unwrap demo, as .npy files.

Standard library only, so the demo needs no NumPy:
    make_demo_phase.py PHASE.npy MASK.npy ROWS COLS [NOISE]

PHASE.npy: float32 [ROWS, COLS], radians in [-pi, pi): a smooth surface (a tilt plus two Gaussian
bumps, about 8 turns of 2 pi across the image) plus two vortex pairs (each vortex adds
+-atan2(y - y0, x - x0), so the wrapped phase has two +1 and two -1 residues that Goldstein's
method must join with branch cuts), wrapped. A disc of pixels holds NaN, as a detector's dead
area would. NOISE (default 0) adds Gaussian phase noise of that many radians (seeded, so the
files are reproducible); noise of about 0.5 rad or more makes many more residues.
MASK.npy: uint8 [ROWS, COLS], 1 on that disc (nonzero = excluded), else 0.
"""
import math
import random
import struct
import sys


def write_npy(path, descr, rows, cols, payload):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }" % (descr, rows, cols)
    # Version 1.0: magic, version, little-endian header length; the header is padded with spaces
    # and a newline so that the data starts at a multiple of 64 bytes.
    total = 10 + len(header) + 1
    header += " " * ((64 - total % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(payload)


def main():
    phase_path, mask_path, rows, cols = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    noise = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    rng = random.Random(1)
    # Vortices (row, col, charge) in relative coordinates; each pair sums to zero charge.
    vortices = [(0.22, 0.52, +1), (0.22, 0.60, -1), (0.72, 0.30, -1), (0.64, 0.36, +1)]
    disc = (0.80, 0.82, 0.07)  # centre row, centre col, radius (relative to the shorter side)
    phase = bytearray()
    mask = bytearray()
    masked = 0
    for r in range(rows):
        v = (r + 0.5) / rows
        for c in range(cols):
            u = (c + 0.5) / cols
            bump1 = math.exp(-((u - 0.35) ** 2 + (v - 0.40) ** 2) / 0.03)
            bump2 = math.exp(-((u - 0.70) ** 2 + (v - 0.65) ** 2) / 0.05)
            phi = 2 * math.pi * 8 * (0.6 * u + 0.3 * v + 0.5 * bump1 - 0.4 * bump2)
            for vr, vc, charge in vortices:
                phi += charge * math.atan2(r - vr * rows, c - vc * cols)
            if noise > 0:
                phi += rng.gauss(0.0, noise)
            wrapped = phi - 2 * math.pi * math.floor((phi + math.pi) / (2 * math.pi))
            dr, dc = r - disc[0] * rows, c - disc[1] * cols
            inside = dr * dr + dc * dc < (disc[2] * min(rows, cols)) ** 2
            if inside:
                wrapped = float("nan")
                masked += 1
            phase += struct.pack("<f", wrapped)
            mask.append(1 if inside else 0)
    write_npy(phase_path, "<f4", rows, cols, bytes(phase))
    write_npy(mask_path, "|u1", rows, cols, bytes(mask))
    extra = f" + {noise:g} rad noise" if noise > 0 else ""
    print(f"wrote {phase_path}: float32 [{rows}, {cols}] wrapped phase (8-turn surface + 2 vortex "
          f"pairs{extra}), {mask_path}: {masked} masked pixels (NaN phase there)")


if __name__ == "__main__":
    main()
