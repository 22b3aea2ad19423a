#!/usr/bin/env python3
"""CuPy baseline for fresnel_bench_interp: cupyx.scipy.signal.upfirdn / resample_poly on the same
cases, timed with CuPy events (median of 25 after 3 warm-ups), printing the same columns.

Run on the GPU machine beside the benchmark:  python3 tests/bench/interp/bench_cupy.py [--json]

The time is the whole CuPy call on device-resident data (for resample_poly it includes the host
firwin design and the filter upload, as cupyx does them on every call). Taps are float32 so that
the output stays float32, as Fresnel's does (float64 taps would make SciPy/CuPy write float64).
"""
import json
import sys

import cupy as cp
import numpy as np
from cupyx.scipy import signal as csignal

WARMUP, REPS = 3, 25


def median_seconds(fn):
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(WARMUP):
        fn()
    cp.cuda.get_current_stream().synchronize()
    times = []
    for _ in range(REPS):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) * 1e-3)
    return float(np.median(times))


def copy_gbps():
    nbytes = 1 << 30
    a = cp.ones(nbytes // 4, dtype=cp.float32)
    b = cp.empty_like(a)
    stream = cp.cuda.get_current_stream()
    s = median_seconds(lambda: b.data.copy_from_device_async(a.data, nbytes, stream))
    return 2.0 * nbytes / s / 1e9


def main():
    as_json = "--json" in sys.argv[1:]
    cp.random.seed(1)

    def uniform(shape):
        return cp.random.random_sample(shape, dtype=cp.float32) * 2 - 1
    copy = copy_gbps()
    h64 = cp.asarray(np.random.default_rng(2).uniform(-1, 1, 64), dtype=cp.float32)
    rows = []

    def case(name, fn, x):
        y = fn()
        s = median_seconds(fn)
        nbytes = x.nbytes + y.nbytes
        rows.append({"case": name, "impl": "cupyx " + cp.__version__, "in_bytes": x.nbytes,
                     "out_bytes": y.nbytes, "out_dtype": str(y.dtype), "kernel_s": s,
                     "gbps": nbytes / s / 1e9, "pct_copy": 100.0 * nbytes / s / 1e9 / copy})

    x = uniform(1 << 26)
    case("a: upfirdn up4 64t 2^26", lambda: csignal.upfirdn(h64, x, up=4), x)
    case("b: resample_poly 160/147 2^26", lambda: csignal.resample_poly(x, 160, 147), x)
    del x
    xc = uniform((64, 1 << 20))
    case("c: 64ch upfirdn up4 64t 2^20", lambda: csignal.upfirdn(h64, xc, up=4, axis=-1), xc)
    case("c: 64ch resample 160/147 2^20",
         lambda: csignal.resample_poly(xc, 160, 147, axis=-1), xc)

    x22 = uniform(1 << 22)
    for up, down, taps in ((3, 2, 1024), (2, 1, 256)):
        h = cp.asarray(np.random.default_rng(taps).uniform(-1, 1, taps), dtype=cp.float32)
        case(f"long: {up}/{down} {taps}t 2^22",
             lambda h=h, up=up, down=down: csignal.upfirdn(h, x22, up=up, down=down), x22)

    if as_json:
        print(json.dumps({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                          "copy_gbps": copy, "rows": rows}, indent=1))
        return
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"device: {name}   D2D copy bandwidth (read + write): {copy:.0f} GB/s")
    print(f"{'case':34s} {'impl':16s} {'in MiB':>9s} {'out MiB':>9s} {'kernel ms':>10s} "
          f"{'GB/s':>8s} {'%copy':>7s}")
    for r in rows:
        print(f"{r['case']:34s} {r['impl']:16s} {r['in_bytes'] / 2**20:9.1f} "
              f"{r['out_bytes'] / 2**20:9.1f} {r['kernel_s'] * 1e3:10.4f} {r['gbps']:8.0f} "
              f"{r['pct_copy']:6.1f}%")


if __name__ == "__main__":
    main()
