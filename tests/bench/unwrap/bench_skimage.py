#!/usr/bin/env python3
"""scikit-image's unwrap_phase (Herraez et al. 2002, quality-guided, no branch cuts) on the inputs
that fresnel_bench_unwrap wrote with --npy-dir: prints time and the wrong-pixel percentage with the
bench's definition (pixels whose multiple of 2 pi relative to the truth differs from the most
common one).

    python3 bench_skimage.py DIR [--max-size 4096]
"""
import argparse
import glob
import os
import re
import sys
import time

import numpy as np
from skimage.restoration import unwrap_phase


def wrong_fraction(unwrapped, truth):
    k = np.rint((unwrapped.astype(np.float64) - truth.astype(np.float64)) / (2 * np.pi))
    k = k.astype(np.int64).ravel()
    values, counts = np.unique(k, return_counts=True)
    return 1.0 - counts.max() / k.size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--max-size", type=int, default=4096)
    args = ap.parse_args()
    cases = []
    for path in glob.glob(os.path.join(args.dir, "wrapped_*.npy")):
        m = re.match(r"wrapped_(\d+)_(.+)\.npy$", os.path.basename(path))
        if m and int(m.group(1)) <= args.max_size:
            cases.append((int(m.group(1)), float(m.group(2)), m.group(2), path))
    cases.sort()
    import skimage
    print(f"scikit-image {skimage.__version__}, numpy {np.__version__}")
    print(f"{'size':>6} {'target':>8} {'seconds':>9} {'wrong%':>9}")
    for size, density, tag, path in cases:
        wrapped = np.load(path)
        truth = np.load(os.path.join(args.dir, f"truth_{size}_{tag}.npy"))
        start = time.perf_counter()
        out = unwrap_phase(wrapped)
        seconds = time.perf_counter() - start
        print(f"{size:>6} {density:>8.0e} {seconds:>9.3f} {100 * wrong_fraction(out, truth):>9.4f}",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
