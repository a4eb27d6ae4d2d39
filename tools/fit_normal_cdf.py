"""Fit the exact GELU's normal CDF for the CUDA kernels (gelu_math.cuh, normal_cdf_log2_odds).

Phi(x) = sigmoid(g(x)) with g the log-odds of the standard normal CDF. g is odd and grows
like x^2 / 2, so g(x) log2(e) = x q(x^2) with q a polynomial in s = x^2 on [0, 36] (past
|x| = 6 the kernels clamp s, Phi is within 1e-9 of 0 or 1 there). The fit minimizes the
largest error of Phi itself (the log-odds error weighted by Phi (1 - Phi)) by iterated
reweighted least squares, then evaluates the float32 kernel (Horner with the float32
coefficients, the float32 sigmoid) against float64 over [-9, 9], beside the erff form
0.5 x (1 + erf(x / sqrt 2)) it replaced. Prints the C literals.

    python tools/fit_normal_cdf.py [--degree 6]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

LOG2E = 1.0 / math.log(2.0)
S_MAX = 36.0

_erfc = np.vectorize(math.erfc)
_erf = np.vectorize(math.erf)


def normal_cdf(x):
    return 0.5 * _erfc(-x / math.sqrt(2.0))


def fit(degree: int) -> np.ndarray:
    x = np.linspace(1e-4, math.sqrt(S_MAX), 40000)
    phi, tail = normal_cdf(x), 0.5 * _erfc(x / math.sqrt(2.0))  # Phi(x), 1 - Phi(x)
    q = np.log(phi / tail) * LOG2E / x
    weight = phi * tail * x  # d Phi = Phi (1 - Phi) d g and d g = x d q (natural-log units aside)
    t = x * x / S_MAX  # fit in [0, 1], then rescale: better conditioned
    V = np.vander(t, degree + 1, increasing=True)
    w = np.ones_like(x)
    for _ in range(200):
        c, *_ = np.linalg.lstsq(V * (w * weight)[:, None], q * w * weight, rcond=None)
        err = np.abs((V @ c - q) * weight)
        w = w * np.maximum(err / err.max(), 1e-4) ** 0.3
        w /= w.max()
    return (c / S_MAX ** np.arange(degree + 1)).astype(np.float32)


def kernel_gelu(x32: np.ndarray, c32: np.ndarray) -> np.ndarray:
    s = np.minimum(x32 * x32, np.float32(S_MAX))
    q = np.full_like(x32, c32[-1])
    for ck in c32[-2::-1]:
        q = (q.astype(np.float64) * s + ck).astype(np.float32)  # one rounding per fma
    a = (x32 * q).astype(np.float32)
    return (x32 * (1.0 / (1.0 + np.exp2(-a.astype(np.float64)))).astype(np.float32)).astype(np.float32)


def erff_gelu(x32: np.ndarray) -> np.ndarray:
    e = _erf((x32 * np.float32(1 / math.sqrt(2.0))).astype(np.float64)).astype(np.float32)
    return (np.float32(0.5) * x32 * (np.float32(1.0) + e)).astype(np.float32)


def report(name: str, y32: np.ndarray, x64: np.ndarray, ref: np.ndarray) -> None:
    err = np.abs(y32.astype(np.float64) - ref)
    rel = err / np.maximum(np.abs(ref), 1e-38)
    cols = "  ".join(f"x>{lo}: {rel[x64 > lo].max():.1e}" for lo in (-3, -4, -5))
    print(f"{name:28s} abs {err.max():.1e}   relative {cols}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--degree", type=int, default=6)
    degree = ap.parse_args().degree
    c32 = fit(degree)
    x32 = np.linspace(-9, 9, 360001).astype(np.float32)
    x64 = x32.astype(np.float64)
    ref = x64 * normal_cdf(x64)
    report(f"log-odds polynomial, deg {degree}", kernel_gelu(x32, c32), x64, ref)
    report("0.5 x (1 + erff(x/sqrt2))", erff_gelu(x32), x64, ref)
    print("Horner, highest coefficient first:")
    for ck in c32[::-1]:
        print(f"  {float(ck):.9e}f")


if __name__ == "__main__":
    main()
