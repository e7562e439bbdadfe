#!/usr/bin/env python3
"""Fits the polynomial of kernels/vectorizable_math.h's normal_cdf_f32.

erfc(z) = t * exp(-z^2 + P(t)) for z >= 0, t = 1 / (1 + z/2); P is fitted in u, t mapped from
[1/6, 1] (z in [0, 10]) onto [-1, 1], by least squares on Chebyshev nodes reweighted towards the
minimax error (Lawson's iteration), against mpmath's erfc at 40 digits. Prints the fit's maximum
error and the coefficients, highest degree first (the order of the Horner scheme in the header).

    /usr/bin/python3 scripts/fit_erfc.py [degree]   # degree 9 by default
"""
import sys

import mpmath as mp
import numpy as np

mp.mp.dps = 40
degree = int(sys.argv[1]) if len(sys.argv) > 1 else 9
t_lo, t_hi = 1 / (1 + 5.0), 1.0
nodes = 600
u = np.cos(np.pi * (np.arange(nodes) + 0.5) / nodes)
t = (t_lo + t_hi) / 2 + (t_hi - t_lo) / 2 * u


def target(tv):
    tv = mp.mpf(tv)
    z = 2 * (1 / tv - 1)
    return mp.log(mp.erfc(z) / tv) + z * z


y = np.array([float(target(tv)) for tv in t])
A = np.vander(u, degree + 1, increasing=True)
weights = np.ones(nodes)
for _ in range(40):
    coeffs = np.linalg.lstsq(A * weights[:, None], y * weights, rcond=None)[0]
    residual = np.abs(A @ coeffs - y)
    weights *= np.sqrt(residual / residual.max() + 1e-3)
print("max error of the fit: %.3g" % np.abs(A @ coeffs - y).max())
for c in coeffs.astype(np.float32)[::-1]:
    print("%.9gf" % c)
