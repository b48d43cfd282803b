#!/usr/bin/env python3
"""Fits the tail polynomial of nnc's vectorized erf (runtime/src/kernels/vmath/approx.rs).

Above |x| = 0.9, erf x = 1 - e^{-x^2} P(t) with t = 1 / (1 + 0.47 x): P approximates the
scaled complementary error function erfc(x) e^{x^2}, which is smooth on [0.9, 3.92].
The fit is least squares on a fine grid, weighted by e^{-x^2} (the factor that carries
P's error into erf's). Prints P's coefficients (constant first, as float32) and the
largest error of the float32 evaluation against float64 erf, in ulps, emulated without
fused multiply-adds (the portable path; the SIMD paths round less).

Usage: fit_erf.py   (needs numpy)
"""
import math

import numpy as np

LO, HI, T_SCALE, DEGREE = 0.9, 3.92, 0.47, 7

xs = np.linspace(LO, HI, 20001)
t = 1 / (1 + T_SCALE * xs)
scaled_erfc = np.array([math.erfc(x) * math.exp(x * x) for x in xs])
coefficients = np.polynomial.polynomial.polyfit(t, scaled_erfc, DEGREE, w=np.exp(-xs * xs))
c32 = coefficients.astype(np.float32)
for c in c32:
    print(repr(float(c)))

x32 = xs.astype(np.float32)
t32 = (np.float32(1) / (np.float32(T_SCALE) * x32 + np.float32(1))).astype(np.float32)
p = np.full_like(t32, c32[-1])
for c in c32[-2::-1]:
    p = (p * t32 + c).astype(np.float32)
e = np.exp(-(x32 * x32).astype(np.float64)).astype(np.float32)
got = (np.float32(1) - (p * e).astype(np.float32)).astype(np.float64)
want = np.array([math.erf(float(x)) for x in x32])
ulps = np.abs(got - want) / np.spacing(want.astype(np.float32)).astype(np.float64)
print(f"largest error of the tail on [{LO}, {HI}]: {ulps.max():.2f} ulp")
