#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer harnesses to tests/fuzz/corpus/<name>/ (standard
library only; protobuf seeds are written in text format and encoded with `protoc --encode`).
The inputs mirror the tests' own (tests/kernels/*, tests/server/*): small valid files and
requests of every kind each harness reads, a few KiB at most. Rerun after changing a format:
    python3 tests/fuzz/make_corpus.py
"""
import math
import os
import struct
import subprocess
import sys
import wave
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")
PROTO = os.path.join(ROOT, "proto")


def put(name, seed, data):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, seed), "wb") as f:
        f.write(data)


def esc(b):
    return '"' + "".join("\\%03o" % c for c in b) + '"'


def encode(message, text, proto):
    return subprocess.run(
        ["protoc", "--encode=fresnel.v1." + message, "-I", PROTO, "fresnel/v1/%s.proto" % proto],
        input=text.encode(), stdout=subprocess.PIPE, check=True, cwd=PROTO).stdout


def frames(*messages):
    """The message-sequence format of fuzz_util.h SplitMessages."""
    return b"".join(struct.pack("<H", len(m)) + m for m in messages)


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def f64(values):
    return struct.pack("<%dd" % len(values), *values)


def ndarray(dtype, shape, data):
    return "dtype: %s %s data: %s" % (dtype, " ".join("shape: %d" % s for s in shape), esc(data))


# ---- file readers -------------------------------------------------------------------------

def npy(descr, shape, data, version=1):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d," % s for s in shape) if len(shape) == 1 else ", ".join(map(str, shape)))
    magic = b"\x93NUMPY" + bytes([version, 0])
    lenfmt = "<H" if version == 1 else "<I"
    pre = len(magic) + struct.calcsize(lenfmt)
    pad = (64 - (pre + len(header) + 1) % 64) % 64
    h = (header + " " * pad + "\n").encode()
    return magic + struct.pack(lenfmt, len(h)) + h + data


def corpus_npy():
    put("npy", "f32_1d", npy("<f4", [5], f32([0, 1, 2, 3, 4])))
    put("npy", "f64_2d", npy("<f8", [2, 3], f64([1, 2, 3, 4, 5, 6])))
    put("npy", "c64", npy("<c8", [2], f32([1, 0, 0, 1])))
    put("npy", "u8_v2", npy("|u1", [2, 2], bytes([1, 2, 3, 4]), version=2))
    put("npy", "i32_scalar", npy("<i4", [], struct.pack("<i", 7)))
    golden = os.path.join(ROOT, "tests", "kernels", "interp", "golden")
    for name in sorted(os.listdir(golden))[:4]:
        path = os.path.join(golden, name)
        if name.endswith(".npy") and os.path.getsize(path) <= 4096:
            put("npy", name, open(path, "rb").read())


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width, height, bit_depth, color_type, rows, palette=None):
    raw = b"".join(b"\x00" + r for r in rows)
    out = b"\x89PNG\r\n\x1a\n"
    out += png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0))
    if palette:
        out += png_chunk(b"PLTE", palette)
    out += png_chunk(b"IDAT", zlib.compress(raw))
    return out + png_chunk(b"IEND", b"")


def corpus_png():
    put("png", "gray8", png(4, 3, 8, 0, [bytes([i * 16 + j for j in range(4)]) for i in range(3)]))
    put("png", "rgb8", png(2, 2, 8, 2, [bytes(range(6)), bytes(range(6, 12))]))
    put("png", "rgba8", png(2, 1, 8, 6, [bytes(range(8))]))
    put("png", "depth16", png(3, 2, 16, 0, [struct.pack(">3H", 1000, 2000, 0)] * 2))
    put("png", "palette4", png(4, 1, 4, 3, [bytes([0x01, 0x23])], palette=bytes(range(12))))


def corpus_ply():
    ascii_ply = (b"ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\n"
                 b"property float z\nproperty float intensity\nelement face 2\n"
                 b"property list uchar int vertex_indices\nend_header\n"
                 b"0 0 0 1\n1 0 0 0.5\n0 1 0 0.25\n0 0 1 1\n3 0 1 2\n4 0 1 2 3\n")
    put("ply", "ascii_faces", ascii_ply)
    verts = b"".join(struct.pack("<3d", *v) for v in [(0, 0, 0), (1, 0, 0), (0, 1, 0)])
    binary = (b"ply\nformat binary_little_endian 1.0\ncomment fuzz seed\nelement vertex 3\n"
              b"property double x\nproperty double y\nproperty double z\nelement face 1\n"
              b"property list uint8 uint32 vertex_indices\nend_header\n" + verts +
              b"\x03" + struct.pack("<3I", 0, 1, 2))
    put("ply", "binary_le", binary)
    points = (b"ply\nformat ascii 1.0\nelement vertex 2\nproperty int x\nproperty int y\n"
              b"property int z\nproperty uchar red\nend_header\n1 2 3 255\n4 5 6 0\n")
    put("ply", "ascii_points", points)


def vtk42(binary):
    pts = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 1)]
    cells = [[4, 0, 1, 2, 3], [4, 1, 2, 3, 4]]
    out = b"# vtk DataFile Version 4.2\nfuzz seed\n" + (b"BINARY\n" if binary else b"ASCII\n")
    out += b"DATASET UNSTRUCTURED_GRID\nPOINTS 5 float\n"
    if binary:
        out += b"".join(struct.pack(">3f", *p) for p in pts) + b"\n"
        out += b"CELLS 2 10\n" + b"".join(struct.pack(">5i", *c) for c in cells) + b"\n"
        out += b"CELL_TYPES 2\n" + struct.pack(">2i", 10, 10) + b"\n"
        out += b"POINT_DATA 5\nSCALARS s float 1\nLOOKUP_TABLE default\n"
        out += struct.pack(">5f", 0, 0.25, 0.5, 0.75, 1) + b"\n"
    else:
        out += b"".join(b"%g %g %g\n" % p for p in pts)
        out += b"CELLS 2 10\n" + b"".join(b" ".join(b"%d" % v for v in c) + b"\n" for c in cells)
        out += b"CELL_TYPES 2\n10\n10\n"
        out += b"POINT_DATA 5\nSCALARS s float 1\nLOOKUP_TABLE default\n0 0.25 0.5 0.75 1\n"
        out += b"VECTORS v float\n" + b"1 0 0\n" * 5
    return out


def corpus_vtk():
    put("vtk", "ascii42", vtk42(False))
    put("vtk", "binary42", vtk42(True))
    hexa = (b"# vtk DataFile Version 5.1\nhex\nASCII\nDATASET UNSTRUCTURED_GRID\nPOINTS 8 double\n"
            b"0 0 0 1 0 0 1 1 0 0 1 0 0 0 1 1 0 1 1 1 1 0 1 1\n"
            b"CELLS 2 8\nOFFSETS vtktypeint64\n0 8\nCONNECTIVITY vtktypeint64\n0 1 2 3 4 5 6 7\n"
            b"CELL_TYPES 1\n12\nPOINT_DATA 8\nFIELD FieldData 1\nt 1 8 float\n0 1 2 3 4 5 6 7\n"
            b"SCALARS temp float\nLOOKUP_TABLE default\n0 1 2 3 4 5 6 7\n")
    put("vtk", "hex51", hexa)
    cube = "/work/shared/data/volume/cube_tets.vtk"
    data_dir = os.environ.get("FRESNEL_DATA_DIR", os.path.join(ROOT, "..", "shared", "data"))
    cube = os.path.join(data_dir, "volume", "cube_tets.vtk")
    if os.path.exists(cube):
        put("vtk", "cube_tets", open(cube, "rb").read())


def tiff(width, height, sample_format, bits, data):
    """A little-endian baseline TIFF: one strip, one sample per pixel."""
    entries = [(256, 3, 1, width), (257, 3, 1, height), (258, 3, 1, bits), (259, 3, 1, 1),
               (262, 3, 1, 1), (273, 4, 1, 0), (277, 3, 1, 1), (278, 3, 1, height),
               (279, 4, 1, len(data)), (339, 3, 1, sample_format)]
    ifd_offset = 8
    data_offset = ifd_offset + 2 + 12 * len(entries) + 4
    out = b"II*\x00" + struct.pack("<I", ifd_offset) + struct.pack("<H", len(entries))
    for tag, typ, count, value in entries:
        if tag == 273:
            value = data_offset
        packed = struct.pack("<H", value) + b"\0\0" if typ == 3 else struct.pack("<I", value)
        out += struct.pack("<HHI", tag, typ, count) + packed
    return out + struct.pack("<I", 0) + data


def corpus_tiff():
    phase = [math.sin(0.7 * i) * 3 for i in range(12)]
    put("tiff", "float32", tiff(4, 3, 3, 32, f32(phase)))
    put("tiff", "float64", tiff(3, 2, 3, 64, f64(phase[:6])))
    put("tiff", "uint16", tiff(2, 2, 1, 16, struct.pack("<4H", 0, 1, 2, 65535)))
    put("tiff", "int16", tiff(2, 2, 2, 16, struct.pack("<4h", -2, -1, 1, 2)))
    put("tiff", "uint8", tiff(3, 1, 1, 8, bytes([0, 128, 255])))


def corpus_wav():
    import io
    for name, channels, width in [("pcm16_mono", 1, 2), ("pcm16_stereo", 2, 2), ("pcm8", 1, 1)]:
        b = io.BytesIO()
        with wave.open(b, "wb") as w:
            w.setnchannels(channels)
            w.setsampwidth(width)
            w.setframerate(8000)
            n = 32
            if width == 2:
                w.writeframes(struct.pack("<%dh" % (n * channels),
                                          *[int(1e4 * math.sin(i / 3)) for i in range(n * channels)]))
            else:
                w.writeframes(bytes(128 + int(100 * math.sin(i / 3)) for i in range(n)))
        put("wav", name, b.getvalue())
    # IEEE float WAV (format 3), as WriteWav writes it.
    samples = f32([math.sin(i / 4) for i in range(16)])
    fmt = struct.pack("<HHIIHH", 3, 1, 16000, 64000, 4, 32)
    riff = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + \
        struct.pack("<I", len(samples)) + samples
    put("wav", "float32", b"RIFF" + struct.pack("<I", len(riff)) + riff)


def corpus_pose():
    eye = "1 0 0 0 0 1 0 0 0 0 1 0 0 0 0 1"
    put("pose", "poses_txt", b"\x00" + ("0 %s\n1 1 0 0 0.1 0 1 0 0 0 0 1 0 0 0 0 1\n" % eye).encode())
    log = "0 0 1\n1 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0 1\n1 1 2\n1 0 0 0.5\n0 1 0 0\n0 0 1 0\n0 0 0 1\n"
    put("pose", "trajectory_log", b"\x01" + log.encode())
    tum = "# timestamp tx ty tz qx qy qz qw\n1305031102.1758 1.3405 0.6266 1.6575 0.6574 0.6126 -0.2949 -0.3248\n1305031102.2 1.3 0.6 1.6 0 0 0 1\n"
    put("pose", "tum", b"\x02" + tum.encode())
    poses = os.path.join(os.environ.get("FRESNEL_DATA_DIR", os.path.join(ROOT, "..", "shared", "data")),
                         "fusion", "nvblox_human", "poses.txt")
    if os.path.exists(poses):
        put("pose", "nvblox_poses", b"\x00" + open(poses, "rb").read()[:2048])


# ---- requests -----------------------------------------------------------------------------

def corpus_requests():
    x = ndarray("FLOAT32", [8], f32([math.sin(i) for i in range(8)]))
    x2 = ndarray("FLOAT64", [2, 4], f64(range(8)))
    taps = ndarray("FLOAT64", [3], f64([0.25, 0.5, 0.25]))
    up = encode("UpfirdnRequest", "x { %s } taps { %s } up: 3 down: 2" % (x, taps), "interpolation")
    put("interp_params", "upfirdn_taps", b"\x00" + up)
    put("interp_params", "upfirdn_design", b"\x00" + encode(
        "UpfirdnRequest", "x { %s } design { numtaps: 15 cutoff: 0.3 window: KAISER kaiser_beta: 6 }"
        " up: 2 mode: PAD_SYMMETRIC" % x2, "interpolation"))
    put("interp_params", "resample_poly", b"\x01" + encode(
        "ResamplePolyRequest", "x { %s } up: 3 down: 2 window: HANN padtype: PAD_MEAN" % x,
        "interpolation"))
    put("interp_params", "resample_poly_taps", b"\x01" + encode(
        "ResamplePolyRequest", "x { %s } up: 1 down: 2 taps { %s }" % (x2, taps), "interpolation"))
    put("interp_params", "resample_fft_window", b"\xff" + encode(
        "ResampleRequest", "x { %s } num: 11 window_name: \"kaiser\" window_params: 8" % x,
        "interpolation"))
    put("interp_params", "resample_fft_values_freq", b"\xff" + encode(
        "ResampleRequest", "x { %s } num: 3 window_values: [1, 0.5, 0.25, 0.5] freq_domain: true"
        % x2, "interpolation"))

    cfg = encode("ResampleStreamRequest", "config { upfirdn { x { dtype: FLOAT32 shape: 1 shape: 0 }"
                 " taps { %s } up: 2 down: 3 } }" % taps, "interpolation")
    chunk = encode("ResampleStreamRequest", "chunk { %s }" % ndarray(
        "FLOAT32", [1, 6], f32([1, 2, 3, 4, 5, 6])), "interpolation")
    end = encode("ResampleStreamRequest", "end: true", "interpolation")
    put("resample_stream", "upfirdn_two_chunks", frames(cfg, chunk, chunk, end))
    cfg2 = encode("ResampleStreamRequest", "config { resample_poly { x { dtype: FLOAT64 shape: 2"
                  " shape: 0 } up: 5 down: 3 } }", "interpolation")
    chunk2 = encode("ResampleStreamRequest", "chunk { %s } end: true" % x2, "interpolation")
    put("resample_stream", "resample_poly_end", frames(cfg2, chunk2))

    hcfg = ("config { width: 64 height: 48 pitch_m: 8e-6 wavelength_m: 5.32e-7 "
            "outputs { field: true phase: true } reconstruction { depth_m: 0.05 } }")
    pts = ndarray("FLOAT32", [2, 4], f32([0, 0, 0.05, 1, 1e-5, -1e-5, 0.06, 0.5]))
    pts5 = ndarray("FLOAT64", [1, 5], f64([0, 1e-5, 0.04, 1, 0.3]))
    f0 = encode("HologramFrameRequest", "%s points { %s }" % (hcfg, pts), "hologram")
    f1 = encode("HologramFrameRequest", "points { %s } overrides { algorithm: HOLOGRAM_ALGORITHM_"
                "REFERENCE reconstruction_depth_m: 0.06 }" % pts5, "hologram")
    f2 = encode("HologramFrameRequest", "points { %s } points_continue: true" % pts, "hologram")
    f3 = encode("HologramFrameRequest", "points { %s }" % pts, "hologram")
    img = encode("HologramFrameRequest", "image { image { %s } spacing_m: 1e-5 depth_m: 0.05 }" %
                 ndarray("UINT8", [2, 3], bytes([0, 10, 20, 30, 40, 250])), "hologram")
    put("hologram", "stream_frames", frames(f0, f1, f2, f3, img))
    put("hologram", "render", frames(f0))

    phase = f32([((0.9 * i) % 6.2) - 3.1 for i in range(16)])
    put("unwrap_params", "goldstein", encode("UnwrapRequest", "phase { %s } options { seed { row: 1 "
        "col: 2 } iterations_per_radius: 4 }" % ndarray("FLOAT32", [4, 4], phase), "unwrap"))
    put("unwrap_params", "wls_mask", encode("UnwrapRequest", "phase { %s } mask { %s } quality { %s }"
        " method: UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES" % (
            ndarray("FLOAT32", [4, 4], phase), ndarray("UINT8", [4, 4], bytes([0] * 15 + [1])),
            ndarray("FLOAT64", [4, 4], f64(range(16)))), "unwrap"))
    put("unwrap_params", "least_squares", encode("UnwrapRequest", "phase { %s } method: "
        "UNWRAP_METHOD_LEAST_SQUARES options { congruent: false }" % ndarray(
            "FLOAT64", [2, 3], f64([0, 1, 2, -1, -2, 3])), "unwrap"))

    hdr = encode("UploadMeshRequest", "header { num_points: 5 num_tets: 2 }", "volume")
    pts_b = f32([0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1])
    tets_b = struct.pack("<8i", 0, 1, 2, 3, 1, 2, 3, 4)
    sc_b = f32([0, 0.25, 0.5, 0.75, 1])

    def chunk_msg(array, dtype, shape, data, offset, total, last):
        return encode("UploadMeshRequest", "chunk { array: %s chunk { dtype: %s %s offset_bytes: %d "
                      "total_bytes: %d data: %s last: %s } }" % (
                          array, dtype, " ".join("shape: %d" % s for s in shape), offset, total,
                          esc(data), "true" if last else "false"), "volume")
    up_seq = frames(hdr,
                    chunk_msg("MESH_ARRAY_POINTS", "FLOAT32", [5, 3], pts_b[:24], 0, 60, False),
                    chunk_msg("MESH_ARRAY_POINTS", "FLOAT32", [5, 3], pts_b[24:], 24, 60, True),
                    chunk_msg("MESH_ARRAY_TETS", "INT32", [2, 4], tets_b, 0, 32, True),
                    chunk_msg("MESH_ARRAY_SCALARS", "FLOAT32", [5], sc_b, 0, 20, True))
    put("volume", "upload", b"\x00" + up_seq)
    put("volume", "render_camera", b"\x01" + encode("VolumeRenderRequest", "mesh_id: \"m\" "
        "transfer_function { points { scalar: 0 r: 1 extinction_per_unit: 2 } points { scalar: 1 "
        "g: 1 extinction_per_unit: 4 } background: 0 background: 0 background: 0 background: 1 } "
        "camera { eye: 3 eye: 3 eye: 3 target: 0 target: 0 target: 0 up: 0 up: 1 up: 0 "
        "vertical_fov_deg: 40 width: 32 height: 24 }", "volume"))
    put("volume", "render_orbit", b"\x01" + encode("VolumeRenderRequest", "mesh_id: \"m\" orbit { "
        "azimuth_deg: 30 elevation_deg: 20 width: 16 height: 16 }", "volume"))

    cam = "camera { fx: 50 fy: 50 cx: 7.5 cy: 5.5 width: 16 height: 12 }"
    fcfg = encode("FusionRequest", "config { %s depth_scale: 1000 voxel_size_m: 0.01 truncation_m: "
                  "0.04 brick_budget_bytes: 1048576 icp_iterations: 3 icp_iterations: 2 }" % cam,
                  "fusion")
    depth = struct.pack("<%dH" % (16 * 12), *([1000] * (16 * 12)))
    eye = " ".join("m: %g" % v for v in [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0])
    ff = encode("FusionRequest", "frame { depth: %s pose_prior { %s } timestamp_s: 0.5 }" % (
        esc(depth), eye), "fusion")
    ff2 = encode("FusionRequest", "frame { depth: %s fixed_pose { %s } integrate: false }" % (
        esc(depth), eye), "fusion")
    fr = encode("FusionRequest", "render { t_world_camera { %s } mode: FUSION_RENDER_NORMALS }" % eye,
                "fusion")
    fc = encode("FusionRequest", "close { }", "fusion")
    put("fusion_params", "session", frames(fcfg, ff, ff2, fr, fc))
    fcfg2 = encode("FusionRequest", "config { %s depth_format: FUSION_DEPTH_FLOAT32 color: true "
                   "tracking: false }" % cam, "fusion")
    put("fusion_params", "float_depth", frames(fcfg2, encode("FusionRequest", "frame { depth: %s }"
        % esc(f32([1.5] * 192)), "fusion")))


def main():
    corpus_npy()
    corpus_png()
    corpus_ply()
    corpus_vtk()
    corpus_tiff()
    corpus_wav()
    corpus_pose()
    corpus_requests()
    for name in sorted(os.listdir(OUT)):
        files = os.listdir(os.path.join(OUT, name))
        print("%-16s %d seeds" % (name, len(files)))


if __name__ == "__main__":
    sys.exit(main())
