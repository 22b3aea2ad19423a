#!/usr/bin/env python3
"""Writes a stereo 16-bit WAV: a linear chirp (left) and a two-tone signal (right).

Standard library only, so the demo needs no NumPy: make_demo_signal.py OUT.wav RATE SECONDS
"""
import math
import struct
import sys
import wave

out, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
n = int(rate * seconds)
f0, f1 = 100.0, rate * 0.45
frames = bytearray()
for i in range(n):
    t = i / rate
    chirp = math.sin(2 * math.pi * (f0 * t + (f1 - f0) * t * t / (2 * seconds)))
    tones = 0.5 * math.sin(2 * math.pi * 440 * t) + 0.3 * math.sin(2 * math.pi * 3000 * t)
    frames += struct.pack("<hh", int(0.8 * 32767 * chirp), int(0.8 * 32767 * tones))
with wave.open(out, "wb") as w:
    w.setnchannels(2)
    w.setsampwidth(2)
    w.setframerate(rate)
    w.writeframes(bytes(frames))
print(f"wrote {out}: {n} samples x 2 channels at {rate} Hz")
