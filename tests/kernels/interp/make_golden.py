#!/usr/bin/python3
"""Writes SciPy golden files for the interp tests into tests/kernels/interp/golden/.

Run with Debian's python3 (python3-scipy 1.10.1):  /usr/bin/python3 make_golden.py

Each case is one line of golden/manifest.txt:  <kind> <name> key=value ...
  kind upfirdn:        up down mode cval dtype, files x h y
  kind resample_poly:  up down padtype cval dtype window (kaiser:<beta>|hamming|...|taps), files
                       x y [h when window=taps]
  kind firwin:         numtaps cutoff window, file y
  kind pad:            npre npost mode cval, files x y   (scipy's _upfirdn_apply._pad_test)
  kind upfirdn_ext:    up down mode cval axis, files x h y: every dtype of x (integers too) and of
                       h (float32/64, complex64/128), N-d x filtered along `axis`, empty x
  kind resample_ext:   up down padtype axis window (name|taps), files x y [h]: as upfirdn_ext
  kind resample:       num axis, files x y   (scipy.signal.resample, FFT method)
  kind decimate:       q n zero_phase axis, files x y   (scipy.signal.decimate, ftype='fir')
  kind resample_win:   num axis domain (time|freq) window (name[:params]|values|none), files x y
                       [w when window=values]   (scipy.signal.resample's window and domain)
Inputs are stored in the dtype the test feeds in; outputs in the dtype SciPy returned (the _ext
kinds' y dtype is SciPy's numpy.result_type(h, x, float32)).
"""
import os
import sys

import numpy as np
import scipy
from scipy.signal import decimate, firwin, resample, resample_poly, upfirdn
from scipy.signal._upfirdn_apply import _pad_test

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "golden")
MODES = ["constant", "symmetric", "reflect", "edge", "wrap", "smooth", "antisymmetric",
         "antireflect", "line"]
rng = np.random.default_rng(20261130)
lines = []


def save(name, suffix, arr):
    fname = f"{name}_{suffix}.npy"
    np.save(os.path.join(OUT, fname), np.ascontiguousarray(arr))
    return fname


def signal(shape, dtype):
    x = rng.uniform(-1, 1, shape)
    if dtype == "complex64":
        x = x + 1j * rng.uniform(-1, 1, shape)
    return x.astype(dtype)


def add_upfirdn(name, up, down, ntaps, n, dtype="float64", mode="constant", cval=0.0,
                channels=None, h=None):
    if h is None:
        h = rng.uniform(-1, 1, ntaps)
    shape = (channels, n) if channels else (n,)
    x = signal(shape, dtype)
    y = upfirdn(h, x, up, down, axis=-1, mode=mode, cval=cval)
    lines.append(f"upfirdn {name} up={up} down={down} mode={mode} cval={cval!r} dtype={dtype} "
                 f"x={save(name, 'x', x)} h={save(name, 'h', np.asarray(h, np.float64))} "
                 f"y={save(name, 'y', y)}")


def add_resample(name, up, down, n, dtype="float64", padtype="constant", cval=None,
                 window=("kaiser", 5.0), channels=None):
    shape = (channels, n) if channels else (n,)
    x = signal(shape, dtype)
    y = resample_poly(x, up, down, axis=-1, window=window, padtype=padtype, cval=cval)
    extra = ""
    if isinstance(window, np.ndarray):
        wname = "taps"
        extra = f" h={save(name, 'h', window.astype(np.float64))}"
    elif isinstance(window, tuple):
        wname = f"{window[0]}:{window[1]!r}"
    else:
        wname = window
    lines.append(f"resample_poly {name} up={up} down={down} padtype={padtype} "
                 f"cval={0.0 if cval is None else cval!r} dtype={dtype} window={wname} "
                 f"x={save(name, 'x', x)} y={save(name, 'y', y)}{extra}")


rng2 = np.random.default_rng(20261201)  # the _ext cases: keeps the older files unchanged


def ext_array(shape, dtype):
    if dtype in ("uint8", "uint16"):
        return rng2.integers(0, 200, shape).astype(dtype)
    if dtype in ("int16", "int32"):
        return rng2.integers(-300, 300, shape).astype(dtype)
    x = rng2.uniform(-1, 1, shape)
    if dtype.startswith("complex"):
        x = x + 1j * rng2.uniform(-1, 1, shape)
    return x.astype(dtype)


def add_upfirdn_ext(name, up, down, ntaps, shape, xdtype, hdtype, axis=-1, mode="constant",
                    cval=0.0):
    h = ext_array((ntaps,), hdtype)
    x = ext_array(shape, xdtype)
    y = upfirdn(h, x, up, down, axis=axis, mode=mode, cval=cval)
    lines.append(f"upfirdn_ext {name} up={up} down={down} mode={mode} cval={cval!r} axis={axis} "
                 f"x={save(name, 'x', x)} h={save(name, 'h', h)} y={save(name, 'y', y)}")


def add_resample_ext(name, up, down, shape, xdtype, window=("kaiser", 5.0), hdtype=None,
                     ntaps=0, axis=-1, padtype="constant"):
    x = ext_array(shape, xdtype)
    extra = ""
    if hdtype is not None:
        window = ext_array((ntaps,), hdtype)
        wname = "taps"
        extra = f" h={save(name, 'h', window)}"
    elif isinstance(window, tuple):
        wname = ":".join([window[0]] + [repr(v) for v in window[1:]])
    else:
        wname = window
    y = resample_poly(x, up, down, axis=axis, window=window, padtype=padtype)
    lines.append(f"resample_ext {name} up={up} down={down} padtype={padtype} axis={axis} "
                 f"window={wname} x={save(name, 'x', x)} y={save(name, 'y', y)}{extra}")


def add_ext_cases():
    xdtypes = ["float32", "float64", "complex64", "complex128", "uint8", "uint16", "int16",
               "int32"]
    hdtypes = ["float32", "float64", "complex64", "complex128"]
    for i, xd in enumerate(xdtypes):
        for j, hd in enumerate(hdtypes):
            up, down, ntaps = [(3, 2, 11), (2, 1, 8), (1, 3, 9), (4, 3, 30)][(i + j) % 4]
            add_upfirdn_ext(f"ux_{xd}_{hd}", up, down, ntaps, (2, 23), xd, hd)
    # Extension modes with complex taps / complex128 signals.
    for mode in MODES:
        add_upfirdn_ext(f"ux_mode_{mode}_c128", 3, 2, 13, (9,), "complex128", "complex128",
                        mode=mode, cval=0.5 if mode == "constant" else 0.0)
        add_upfirdn_ext(f"ux_mode_{mode}_ctaps", 2, 3, 10, (2, 7), "float32", "complex64",
                        mode=mode)
    # N-d signals along each axis.
    for axis in (0, 1, 2, -1, -2, -3):
        add_upfirdn_ext(f"ux_axis_{axis}".replace("-", "m"), 3, 2, 7, (4, 5, 6), "float64",
                        "float64", axis=axis)
    add_upfirdn_ext("ux_axis_c128_0", 2, 1, 6, (9, 3), "complex128", "complex64", axis=0)
    # Zero-length signals (constant mode: SciPy returns the filtered cval).
    for i, (up, down, ntaps) in enumerate([(1, 1, 3), (2, 3, 9), (4, 1, 12), (1, 1, 1),
                                           (2, 1, 5)]):
        add_upfirdn_ext(f"ux_empty_{i}", up, down, ntaps, (0,), "float64", "float64",
                        cval=2.0 if i % 2 else 0.0)
    add_upfirdn_ext("ux_empty_multi", 3, 2, 11, (2, 0), "float32", "complex128", cval=-1.0)
    add_upfirdn_ext("ux_empty_axis0", 1, 1, 4, (0, 3), "float64", "float64", axis=0, cval=1.5)

    # resample_poly: designed filters (x's dtype) and explicit taps of every dtype.
    for xd in ["complex128", "float32", "complex64", "float64"]:
        add_resample_ext(f"rx_{xd}_design", 3, 2, (2, 31), xd)
        for hd in hdtypes:
            add_resample_ext(f"rx_{xd}_{hd}", 5, 3, (2, 20), xd, hdtype=hd, ntaps=17)
    for xd in ["uint8", "int16", "int32"]:
        add_resample_ext(f"rx_{xd}_taps", 2, 3, (25,), xd, hdtype="float32", ntaps=12)
    for pad in ["mean", "median", "maximum", "minimum", "reflect", "line"]:
        add_resample_ext(f"rx_pad_{pad}_ctaps", 3, 2, (2, 19), "float64", hdtype="complex128",
                         ntaps=15, padtype=pad)
        add_resample_ext(f"rx_pad_{pad}_c128", 4, 5, (21,), "complex128", padtype=pad)
    for axis in (0, 1, -3):
        add_resample_ext(f"rx_axis_{axis}".replace("-", "m"), 3, 2, (6, 5, 4), "float64",
                         axis=axis)
    add_resample_ext("rx_empty", 3, 2, (0,), "float64")

    # get_window's other names, with tuple parameters, in firwin and resample_poly.
    windows = ["triang", "bartlett", "flattop", "parzen", "bohman", "blackmanharris", "nuttall",
               "barthann", "cosine", "lanczos", ("kaiser", 8.0), ("gaussian", 3.5),
               ("general_gaussian", 1.5, 7.0), ("tukey", 0.3), "tukey", "exponential",
               ("chebwin", 60.0), ("chebwin", 100.0)]
    for win in windows:
        wname = win if isinstance(win, str) else ":".join([win[0]] + [repr(v) for v in win[1:]])
        for numtaps in (1, 2, 12, 61):
            name = f"fw_{numtaps}_{wname.replace(':', '_')}"
            y = firwin(numtaps, 0.3, window=win)
            lines.append(f"firwin {name} numtaps={numtaps} cutoff=0.3 window={wname} "
                         f"y={save(name, 'y', y)}")
        for up, down in [(3, 2), (2, 5)]:
            add_resample_ext(f"rx_win_{wname.replace(':', '_')}_{up}_{down}", up, down, (2, 30),
                             "float64", window=win)
    add_resample_ext("rx_copy_c128", 4, 4, (2, 9), "complex128")


def add_fft_window_cases():
    # resample's window (get_window names with parameters, periodic; or an array in FFT order)
    # and domain='freq' (complex spectra, and a real array read as rfft bins), both dtypes of
    # each kind, up and down, even and odd lengths. Appended last: the earlier cases' random
    # draws, and so their files, stay as they were.
    windows = ["hann", "boxcar", "flattop", "triang", ("kaiser", 8.0), ("gaussian", 3.0),
               ("tukey", 0.3), ("chebwin", 60.0), "exponential"]
    sizes = [(16, 24), (15, 10), (17, 17), (64, 31), (2, 7), (1, 4)]
    for xd in ["float64", "complex128", "float32", "complex64"]:
        for win in windows:
            wname = win if isinstance(win, str) else ":".join([win[0]] + [repr(v) for v in win[1:]])
            for nx, num in sizes:
                name = f"fftw_{xd}_{wname.replace(':', '_')}_{nx}_{num}"
                x = ext_array((2, nx), xd)
                y = resample(x, num, axis=-1, window=win)
                lines.append(f"resample_win {name} num={num} axis=-1 domain=time window={wname} "
                             f"x={save(name, 'x', x)} y={save(name, 'y', y)}")
    for xd in ["float64", "complex128", "float32"]:
        for nx, num in [(16, 24), (15, 10), (9, 9)]:
            name = f"fftw_{xd}_values_{nx}_{num}"
            x = ext_array((2, nx), xd)
            w = rng.uniform(0.2, 1.0, nx)
            y = resample(x, num, axis=-1, window=w)
            lines.append(f"resample_win {name} num={num} axis=-1 domain=time window=values "
                         f"x={save(name, 'x', x)} w={save(name, 'w', w)} y={save(name, 'y', y)}")
    for xd in ["complex128", "complex64", "float64"]:
        for nx, num in [(16, 24), (15, 10), (12, 12), (7, 20)]:
            for win in [None, "hann"]:
                name = f"fftf_{xd}_{win or 'none'}_{nx}_{num}"
                x = ext_array((2, nx), xd)
                if xd.startswith("complex"):
                    x = np.fft.fft(x, axis=-1).astype(xd)
                xf = save(name, "x", x)  # before: SciPy applies the window to x itself here
                y = resample(x, num, axis=-1, window=win, domain="freq")
                lines.append(f"resample_win {name} num={num} axis=-1 domain=freq "
                             f"window={win or 'none'} x={xf} y={save(name, 'y', y)}")
    for axis in (0, -2):
        name = f"fftw_axis_{axis}".replace("-", "m")
        x = ext_array((6, 5, 4), "float64")
        y = resample(x, 9, axis=axis, window=("kaiser", 5.0))
        lines.append(f"resample_win {name} num=9 axis={axis} domain=time window=kaiser:5.0 "
                     f"x={save(name, 'x', x)} y={save(name, 'y', y)}")


def add_fft_cases():
    # resample: up and down, even and odd lengths on both sides (the Nyquist-bin rules), N == 2,
    # primes, every dtype, N-d along an axis.
    sizes = [(16, 24), (16, 10), (15, 24), (15, 10), (17, 17), (2, 7), (7, 2), (1, 5), (5, 1),
             (12, 13), (13, 12), (31, 64), (64, 31), (4, 2), (3, 2), (101, 37)]
    for xd in ["float64", "complex128", "float32", "complex64"]:
        for nx, num in sizes:
            name = f"fft_{xd}_{nx}_{num}"
            x = ext_array((2, nx), xd)
            y = resample(x, num, axis=-1)
            lines.append(f"resample {name} num={num} axis=-1 x={save(name, 'x', x)} "
                         f"y={save(name, 'y', y)}")
    for xd in ["int16", "uint8"]:
        name = f"fft_{xd}"
        x = ext_array((20,), xd)
        y = resample(x, 33)
        lines.append(f"resample {name} num=33 axis=-1 x={save(name, 'x', x)} y={save(name, 'y', y)}")
    for axis in (0, 1, -3):
        name = f"fft_axis_{axis}".replace("-", "m")
        x = ext_array((6, 5, 4), "float64")
        y = resample(x, 9, axis=axis)
        lines.append(f"resample {name} num=9 axis={axis} x={save(name, 'x', x)} "
                     f"y={save(name, 'y', y)}")
    # decimate (FIR): default and explicit orders, zero_phase both ways, dtypes, axes.
    for i, (q, n, zp, xd, shape, axis) in enumerate([
            (2, None, True, "float64", (2, 100), -1), (3, None, True, "float32", (97,), -1),
            (4, 30, True, "complex128", (2, 64), -1), (5, None, False, "float64", (2, 101), -1),
            (2, 11, False, "complex64", (50,), -1), (3, None, True, "int16", (90,), -1),
            (2, None, True, "float64", (40, 3), 0), (7, 40, False, "float32", (3, 200), 1),
            (10, None, True, "float64", (300,), -1)]):
        name = f"dec_{i}"
        x = ext_array(shape, xd)
        y = decimate(x, q, n=n, ftype="fir", axis=axis, zero_phase=zp)
        lines.append(f"decimate {name} q={q} n={0 if n is None else n} zero_phase={int(zp)} "
                     f"axis={axis} x={save(name, 'x', x)} y={save(name, 'y', y)}")


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))

    # upfirdn: rates, filter lengths (even/odd, shorter than up, longer than the signal), sizes.
    geometry = [  # up, down, taps, n
        (1, 1, 1, 5), (1, 1, 7, 20), (2, 1, 8, 17), (3, 1, 12, 10), (4, 1, 64, 100),
        (8, 1, 33, 9), (1, 3, 9, 31), (2, 3, 5, 3), (3, 2, 40, 12), (5, 7, 21, 50),
        (7, 5, 3, 4), (4, 4, 10, 23), (1, 5, 1, 23), (3, 1, 2, 6), (6, 1, 5, 7),
        (2, 1, 1, 10), (1, 1, 30, 4), (4, 1, 128, 40), (3, 8, 50, 64), (1, 2, 64, 1),
        (5, 1, 6, 1), (1, 1, 2, 2),
    ]
    for i, (up, down, ntaps, n) in enumerate(geometry):
        add_upfirdn(f"ufd_f64_{i}", up, down, ntaps, n, "float64")
    for i, (up, down, ntaps, n) in enumerate(geometry[::2]):
        add_upfirdn(f"ufd_f32_{i}", up, down, ntaps, n, "float32")
    for i, (up, down, ntaps, n) in enumerate(geometry[1::3]):
        add_upfirdn(f"ufd_c64_{i}", up, down, ntaps, n, "complex64")
    add_upfirdn("ufd_multi_f64", 3, 2, 11, 20, "float64", channels=3)
    add_upfirdn("ufd_multi_c64", 4, 1, 16, 9, "complex64", channels=2)
    add_upfirdn("ufd_cval", 2, 3, 9, 12, "float64", cval=0.75)
    add_upfirdn("ufd_cval_f32", 4, 1, 24, 7, "float32", cval=-1.5, channels=2)
    # The classic recipe: interpolate by L with L * firwin(12, 1/L, hamming).
    for L in (2, 3, 4):
        h = L * firwin(12, 1.0 / L, window="hamming")
        add_upfirdn(f"ufd_recipe_{L}", L, 1, 12, 25, "float32", h=h)

    # Every extension mode, including signals shorter than the filter (several reflections).
    mode_geometry = [(1, 1, 6, 5), (3, 2, 11, 4), (2, 3, 30, 7), (4, 1, 16, 2), (1, 2, 9, 13)]
    for mode in MODES:
        for i, (up, down, ntaps, n) in enumerate(mode_geometry):
            add_upfirdn(f"ufd_mode_{mode}_{i}", up, down, ntaps, n, "float64", mode=mode,
                        cval=0.5 if mode == "constant" else 0.0)
        add_upfirdn(f"ufd_mode_{mode}_multi", 2, 1, 7, 6, "complex64", mode=mode, channels=2)
        add_upfirdn(f"ufd_mode_{mode}_f32", 3, 1, 20, 9, "float32", mode=mode)

    # resample_poly with the default Kaiser filter.
    rates = [(2, 1), (1, 2), (3, 2), (2, 3), (5, 3), (6, 4), (7, 7), (1, 10), (10, 1), (4, 3),
             (160, 147)]
    for up, down in rates:
        add_resample(f"rp_{up}_{down}", up, down, 57, "float64")
    add_resample("rp_160_147_long", 160, 147, 300, "float64")
    add_resample("rp_f32_3_2", 3, 2, 64, "float32")
    add_resample("rp_f32_160_147", 160, 147, 200, "float32")
    add_resample("rp_c64_5_3", 5, 3, 40, "complex64")
    add_resample("rp_multi", 3, 4, 33, "float64", channels=3)
    add_resample("rp_short_1", 3, 2, 1, "float64")
    add_resample("rp_short_5", 2, 7, 5, "float64")
    add_resample("rp_cval", 3, 2, 25, "float64", cval=2.5)
    # Windows and explicit taps.
    for win in ["boxcar", "hamming", "hann", "blackman", ("kaiser", 8.6)]:
        wname = win if isinstance(win, str) else "kaiser"
        add_resample(f"rp_win_{wname}", 3, 2, 40, "float64", window=win)
    add_resample("rp_taps_odd", 3, 2, 30, "float64", window=rng.uniform(-1, 1, 15))
    add_resample("rp_taps_even", 2, 5, 31, "float64", window=rng.uniform(-1, 1, 12))
    add_resample("rp_taps_short", 4, 3, 20, "float64", window=np.array([0.25, 0.5, 0.25]))
    # Padtypes (background subtraction and the upfirdn modes).
    for pad in ["mean", "median", "maximum", "minimum"] + MODES:
        add_resample(f"rp_pad_{pad}", 3, 2, 40, "float64", padtype=pad)
        add_resample(f"rp_pad_{pad}_b", 2, 5, 24, "float64", padtype=pad, channels=2)
    add_resample("rp_pad_median_even_c64", 5, 4, 16, "complex64", padtype="mean")
    add_resample("rp_pad_line_f32", 4, 3, 30, "float32", padtype="line")

    # firwin.
    for numtaps in (1, 2, 11, 12, 64, 101):
        for cutoff in (0.1, 0.25, 0.5, 0.9):
            for win in ["boxcar", "hamming", "hann", "blackman", ("kaiser", 5.0),
                        ("kaiser", 0.5)]:
                wname = win if isinstance(win, str) else f"{win[0]}:{win[1]!r}"
                name = f"fw_{numtaps}_{cutoff}_{wname.replace(':', '_')}"
                y = firwin(numtaps, cutoff, window=win)
                lines.append(f"firwin {name} numtaps={numtaps} cutoff={cutoff!r} "
                             f"window={wname} y={save(name, 'y', y)}")

    # Signal extension itself.
    for n in (2, 3, 5):
        x = rng.uniform(-1, 1, n)
        for mode in MODES:
            name = f"pad_{mode}_{n}"
            y = _pad_test(x, 13, 11, mode, 0.25)
            lines.append(f"pad {name} npre=13 npost=11 mode={mode} cval=0.25 "
                         f"x={save(name, 'x', x)} y={save(name, 'y', y)}")

    add_ext_cases()
    add_fft_cases()
    add_fft_window_cases()

    with open(os.path.join(OUT, "manifest.txt"), "w") as f:
        f.write(f"# generated by make_golden.py with scipy {scipy.__version__}, "
                f"numpy {np.__version__}\n")
        f.write("\n".join(lines) + "\n")
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"{len(lines)} cases, {len(os.listdir(OUT))} files, {total / 1e6:.2f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
