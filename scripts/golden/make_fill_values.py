#!/usr/bin/env python3
"""Writes tests/golden/fill_values.txt: which numbers PyTorch 2.x stores, and which it refuses
("value cannot be converted to type ... without overflow"), when full, fill_ and masked_fill_ put
them into a tensor of each dtype (PyTorch has no masked_fill for the float8 dtypes).
tests/test_pointwise.cpp (FillValues) runs the same on mantissa.

Needs PyTorch 2.x (float8 dtypes), e.g. python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch.

Tensors of 4 elements: PyTorch's CPU fill of a single element skips the check for floating
dtypes (torch.full((1,), 1e5, dtype=torch.float16) is inf), which mantissa does not copy.

  case DTYPE_I DTYPE KIND VALUE    KIND: float (a Python float), int or bool
  stores V                         the value all three store, as float64 (%.17g)
  raises                           all three refuse it
  end
"""
import math
import os

import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "fill_values.txt")
INF, NAN = math.inf, math.nan
DTYPES = {
    "float32": (torch.float32, [3.4028234663852886e38, 3.4028235e38, -3.4028235e38, 1e39, INF, -INF,
                                NAN, 1e-46, 2**63 - 1, -5]),
    "float64": (torch.float64, [1.7976931348623157e308, INF, NAN, 2**63 - 1]),
    "float16": (torch.float16, [65504.0, 65504.5, -65505.0, 65519.0, 65520.0, 1e5, INF, -INF, NAN,
                                1e-10, 65504, 65505, -70000, True]),
    "bfloat16": (torch.bfloat16, [3.3895313892515355e38, 3.39e38, -3.4e38, INF, NAN, 2**63 - 1]),
    "float8_e4m3fn": (torch.float8_e4m3fn, [448.0, 448.5, 449.0, -449.0, 464.0, INF, -INF, NAN,
                                            448, 449, -500, 0.3]),
    "float8_e5m2": (torch.float8_e5m2, [57344.0, 57344.5, 61440.0, INF, -INF, NAN, 57345, -60000,
                                        0.3]),
    "uint8": (torch.uint8, [255, 256, -1, -255, -256, 255.5, 255.9, 256.0, -0.5, -1.0, NAN, INF,
                            1e30, True]),
    "int32": (torch.int32, [2**31 - 1, 2**31, -2**31, -2**31 - 1, 2147483647.5, 2147483648.0,
                            -2147483648.9, -2147483649.0, INF, NAN]),
    "int64": (torch.int64, [2**63 - 1, -2**63, 9.2233720368547e18, float(2**63), -float(2**63),
                            -9.3e18, 2.5, -2.5, INF, NAN]),
    "bool": (torch.bool, [2, -1, 0.5, NAN, INF, 0, False]),
}


def kind(v):
    return "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "float"


def stored(dt, v):
    """What full, fill_ and masked_fill_ store (None if they refuse); they must agree."""
    results = []
    makes = [lambda: torch.full((4,), v, dtype=dt), lambda: torch.zeros(4, dtype=dt).fill_(v)]
    if dt not in (torch.float8_e4m3fn, torch.float8_e5m2):  # no masked_fill for float8
        makes.append(
            lambda: torch.zeros(4, dtype=dt).masked_fill(torch.ones(4, dtype=torch.bool), v))
    for make in makes:
        try:
            results.append(make().to(torch.float64)[0].item())
        except RuntimeError as e:
            assert "without overflow" in str(e), str(e)
            results.append(None)
    same = all((a is None) == (results[0] is None) and
               (a is None or a == results[0] or (math.isnan(a) and math.isnan(results[0])))
               for a in results)
    assert same, "full, fill_ and masked_fill_ disagree on %r for %s: %r" % (v, dt, results)
    return results[0]


def main():
    lines = ["# made by scripts/golden/make_fill_values.py with torch " + torch.__version__]
    for name, (dt, values) in DTYPES.items():
        for i, v in enumerate(values):
            text = str(v).lower() if isinstance(v, bool) else "%d" % v if kind(v) == "int" \
                else "%.17g" % v
            lines.append("case %s_%d %s %s %s" % (name, i, name, kind(v), text))
            s = stored(dt, v)
            lines.append("raises" if s is None else "stores %.17g" % s)
            lines.append("end")
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s" % os.path.normpath(OUT))


if __name__ == "__main__":
    main()
