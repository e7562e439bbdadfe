#!/usr/bin/env python3
"""Writes tests/golden/float8.txt: PyTorch 2.x's conversions between float32 and its two 8-bit
float formats (torch.float8_e4m3fn, torch.float8_e5m2), for every input. tests/test_float8.cpp
converts the same inputs with engine/float8.h and must match bit for bit.

Needs PyTorch 2.x (Debian's 1.13 has no float8), e.g. in a virtual environment:
    python3 -m venv /tmp/torch-venv && /tmp/torch-venv/bin/pip install torch numpy
    /tmp/torch-venv/bin/python scripts/golden/make_float8.py

File format, one line each:
  torch VERSION
  decode FORMAT b0 ... b255      the float32 bits (hex) of each of the 256 codes
  encode FORMAT d0 ... d255      a digest (hex) of the codes of every float32 bit pattern, one per
                                 chunk of 2^24 consecutive patterns: chunk c's digest is the sum,
                                 modulo 2^64, of code(u) * (u * 0x9E3779B97F4A7C15 mod 2^64 | 1)
                                 over its patterns u. Each weight is odd, so a single code that
                                 differs changes the digest.
"""
import os

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "float8.txt")
FORMATS = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
CHUNK = 1 << 24
K = np.uint64(0x9E3779B97F4A7C15)


def decode(dt):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dt)
    bits = codes.float().view(torch.int32).numpy().astype(np.uint32)
    return ["%08x" % b for b in bits]


def encode_digests(dt):
    digests = []
    for c in range((1 << 32) // CHUNK):
        u = np.arange(c * CHUNK, (c + 1) * CHUNK, dtype=np.uint64)
        x = torch.from_numpy(u.astype(np.uint32).view(np.float32))
        codes = x.to(dt).view(torch.uint8).numpy().astype(np.uint64)
        weights = (u * K) | np.uint64(1)
        digests.append("%016x" % int(np.sum(codes * weights, dtype=np.uint64)))
    return digests


def main():
    with np.errstate(over="ignore"):
        lines = ["torch " + torch.__version__]
        for name, dt in FORMATS.items():
            lines.append("decode %s %s" % (name, " ".join(decode(dt))))
        for name, dt in FORMATS.items():
            lines.append("encode %s %s" % (name, " ".join(encode_digests(dt))))
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
