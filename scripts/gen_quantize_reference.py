#!/usr/bin/env python3
"""Reference ranges for nnc's calibration methods (compiler/src/quantize/ranges.rs).

Usage (from the repository root, with numpy, e.g. target/bench-venv):

    python3 scripts/gen_quantize_reference.py

Writes testdata/quantize/ranges.json. For a few seeded distributions it builds the
calibration histogram and computes each method's clipping range (minmax, percentile at
99.999 and 99, entropy, mse), the asymmetric int8 parameters of that range and the
expected squared error under them. The arithmetic is the one ranges.rs documents,
implemented a second time, plainly: per-candidate NumPy arrays where the Rust code uses
prefix sums, the search procedures step for step the same. The Rust test rebuilds each
histogram from the stored samples (or counts) and checks ranges within one bin width and
parameters exactly.

Deterministic: each case seeds its own generator from its name. Samples are rounded to
3 decimals to keep the file small; the histogram is built from the rounded values.
"""

import json
import math
import pathlib
import zlib

import numpy as np

BINS = 2048
MIN_SCALE = 2.0**-24
LEVELS = 256
OUT = pathlib.Path(__file__).resolve().parent.parent / "testdata" / "quantize" / "ranges.json"


def improves(a, b, absolute):
    return a < b - (1e-9 * abs(b) + absolute)


# ---- int8 parameters ----


def asymmetric_int8(lo, hi):
    lo = min(float(np.float32(lo)), 0.0)
    hi = max(float(np.float32(hi)), 0.0)
    scale = np.float32((hi - lo) / 255.0)
    if not (scale >= MIN_SCALE and np.isfinite(scale)):
        scale = np.float32(MIN_SCALE)
    zp = int(np.clip(np.rint(-128.0 - lo / float(scale)), -128, 127))
    return float(scale), zp


def covered(lo, hi):
    s, zp = asymmetric_int8(lo, hi)
    return s, s * (-128.0 - zp), s * (127.0 - zp)


# ---- histogram ----


class Hist:
    def __init__(self, lo, hi, counts):
        self.lo = float(lo)
        self.hi = float(hi)
        self.counts = np.asarray(counts, dtype=np.int64)
        self.bins = len(self.counts)
        self.span = self.hi - self.lo
        self.total = float(self.counts.sum())
        idx = np.arange(self.bins + 1, dtype=np.float64)
        self.edges = self.lo + self.span * idx / self.bins
        self.edges[-1] = self.hi


def histogram(values32, bins):
    lo, hi = values32.min(), values32.max()
    x = values32.astype(np.float64)
    span = float(hi) - float(lo)
    counts = np.zeros(bins, dtype=np.int64)
    if span == 0:
        counts[0] = len(x)
    else:
        t = np.floor((x - float(lo)) * bins / span)
        counts = np.bincount(np.clip(t, 0, bins - 1).astype(np.int64), minlength=bins)
    return Hist(lo, hi, counts)


# ---- expected error ----


def expected_error(h, lo, hi):
    s, a, b = covered(lo, hi)
    noise = s * s / 12.0
    if h.total == 0:
        return 0.0
    if h.span == 0:
        x = h.lo
        return (a - x) ** 2 if x < a else (x - b) ** 2 if x > b else noise
    u, v = h.edges[:-1], h.edges[1:]
    w = v - u
    centre = (u + v) / 2
    inside = np.clip(np.minimum(v, b) - np.maximum(u, a), 0.0, None) / w
    above = np.where(u >= b, (centre - b) ** 2 + w * w / 12, np.where(v > b, (v - b) ** 3 / 3 / w, 0.0))
    below = np.where(v <= a, (a - centre) ** 2 + w * w / 12, np.where(u < a, (a - u) ** 3 / 3 / w, 0.0))
    return float(np.sum(h.counts * (inside * noise + above + below)) / h.total)


# ---- methods ----


def percentile_range(h, pct):
    cum = np.concatenate([[0], np.cumsum(h.counts)])

    def quantile(target):
        if target <= 0:
            return h.lo
        i = int(np.searchsorted(cum[1:], target, side="left"))
        if i >= h.bins:
            return h.hi
        u, v = h.edges[i], h.edges[i + 1]
        return u + (v - u) * ((target - cum[i]) / h.counts[i])

    upper = quantile(h.total * (pct / 100.0)) if h.hi > 0 else h.hi
    lower = quantile(h.total * ((100.0 - pct) / 100.0)) if h.lo < 0 else h.lo
    return lower, upper


def window_levels(h, j, k):
    lo, hi = h.edges[j], h.edges[k]
    if lo <= 0 <= hi:
        return LEVELS
    frac = (hi - lo) / (max(hi, 0.0) - min(lo, 0.0))
    return min(max(int(math.floor(LEVELS * frac + 0.5)), 1), LEVELS)


def capped_counts(h):
    c = h.counts.astype(np.float64)
    if h.lo <= 0 <= h.hi and h.bins >= 2:
        z = min(int(math.floor(-h.lo * h.bins / h.span)), h.bins - 1)
        left = c[z - 1] if z > 0 else 0.0
        right = c[z + 1] if z + 1 < h.bins else 0.0
        c[z] = min(c[z], max(left, right))
    return c


def kl_divergence(h, c, j, k):
    """KL(P || Q) of window [j, k), or None (not a candidate / infinite)."""
    n = k - j
    if k <= j or (n < LEVELS and not (j == 0 and k == h.bins)):
        return None
    total = c.sum()
    t_in = c[j:k].sum()
    if t_in <= 0:
        return None
    m = window_levels(h, j, k)
    p = c[j:k].copy()
    p[0] += c[:j].sum()
    p[-1] += c[k:].sum()
    q = np.zeros(n)
    for level in range(m):
        s, e = level * n // m, (level + 1) * n // m
        if s == e:
            continue
        nonzero = p[s:e] > 0
        if not nonzero.any():
            continue
        own = c[j + s : j + e].sum()
        if own <= 0:
            return None
        q[s:e][nonzero] = own / nonzero.sum()
    P = p / total
    Q = q / t_in
    mask = P > 0
    return float(np.sum(P[mask] * np.log(P[mask] / Q[mask])))


def entropy_window(h):
    c = capped_counts(h)
    bins = h.bins
    best = kl_divergence(h, c, 0, bins)
    if best is None:
        return 0, bins, 0.0
    j, k = 0, bins
    upper_free, lower_free = h.hi > 0, h.lo < 0
    jmax = int(np.nonzero(h.edges <= 0)[0].max()) if (h.edges <= 0).any() else 0
    kmin = int(np.nonzero(h.edges >= 0)[0].min()) if (h.edges >= 0).any() else bins
    stride = max(bins // LEVELS, 1)
    coarse_k = [bins - t * stride for t in range(bins // stride + 1) if bins - t * stride >= kmin]
    coarse_j = [t * stride for t in range(bins // stride + 1) if t * stride <= jmax]

    def sweep_k(cands, j, k, best):
        for kk in cands:
            v = kl_divergence(h, c, j, kk)
            if v is not None and improves(v, best, 1e-12):
                best, k = v, kk
        return k, best

    def sweep_j(cands, j, k, best):
        for jj in cands:
            v = kl_divergence(h, c, jj, k)
            if v is not None and improves(v, best, 1e-12):
                best, j = v, jj
        return j, best

    for _ in range(3):
        before = (j, k)
        if upper_free:
            k, best = sweep_k(coarse_k, j, k, best)
        if lower_free:
            j, best = sweep_j(coarse_j, j, k, best)
        if (j, k) == before:
            break
    r = stride - 1
    if upper_free:
        cands = [kk for kk in range(min(k + r, bins), max(k - r, 0) - 1, -1) if kk >= kmin]
        k, best = sweep_k(cands, j, k, best)
    if lower_free:
        j, best = sweep_j(list(range(max(j - r, 0), min(j + r, jmax) + 1)), j, k, best)
    return j, k, best


def mse_range(h):
    lo_end, hi_end = min(h.lo, 0.0), max(h.hi, 0.0)
    upper_free, lower_free = h.hi > 0, h.lo < 0
    t_max, coarse = 10 * 1024, 64

    def rng(tl, tu):
        return (
            float(np.float32(lo_end * np.exp2(-tl / 1024.0))),
            float(np.float32(hi_end * np.exp2(-tu / 1024.0))),
        )

    def ev(tl, tu):
        return expected_error(h, *rng(tl, tu))

    def grid(free):
        return list(range(0, t_max + 1, coarse)) if free else [0]

    tl, tu = 0, 0
    best = ev(0, 0)
    for u in grid(upper_free):
        for l in grid(lower_free):
            v = ev(l, u)
            if improves(v, best, 0.0):
                best, tl, tu = v, l, u
    step = coarse // 2
    while step >= 1:
        while True:
            nxt, nval = None, best
            for free, dl, du in [(upper_free, 0, -step), (upper_free, 0, step), (lower_free, -step, 0), (lower_free, step, 0)]:
                l, u = tl + dl, tu + du
                if not free or not (0 <= l <= t_max) or not (0 <= u <= t_max):
                    continue
                v = ev(l, u)
                if improves(v, nval, 0.0):
                    nxt, nval = (l, u), v
            if nxt is None:
                break
            (tl, tu), best = nxt, nval
        step //= 2
    return rng(tl, tu)


def widen(lo, hi):
    return min(float(np.float32(lo)), 0.0) + 0.0, max(float(np.float32(hi)), 0.0) + 0.0


def ranges_of(h):
    out = {}
    if h.total == 0 or h.span == 0:
        for key in ["minmax", "percentile", "percentile_99", "entropy", "mse"]:
            out[key] = widen(h.lo, h.hi)
        return out, None
    out["minmax"] = widen(h.lo, h.hi)
    out["percentile"] = widen(*percentile_range(h, 99.999))
    out["percentile_99"] = widen(*percentile_range(h, 99.0))
    j, k, kl = entropy_window(h)
    out["entropy"] = widen(h.edges[j], h.edges[k])
    out["mse"] = widen(*mse_range(h))
    return out, (j, k, kl)


# ---- cases ----


def draw(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    if name == "gaussian":
        x = rng.normal(0.3, 1.2, 1500)
    elif name == "relu_gaussian":
        x = np.maximum(rng.normal(0.5, 1.0, 1500), 0.0)
    elif name == "laplace_outliers":
        x = rng.laplace(0.2, 0.5, 1500)
        x[rng.choice(1500, 8, replace=False)] = rng.uniform(20, 40, 8) * rng.choice([-1, 1, 1], 8)
    elif name == "uniform":
        x = rng.uniform(-2.0, 5.0, 1500)
    elif name == "positive_uniform":
        x = rng.uniform(2.0, 5.0, 600)
    elif name == "negative_exponential":
        x = -rng.exponential(1.0, 600)
    elif name == "constant":
        x = np.full(50, 0.75)
    else:
        raise ValueError(name)
    return np.round(x, 3)


def sample_case(name):
    samples = draw(name)
    x32 = samples.astype(np.float32)
    h = histogram(x32, BINS)
    i = np.arange(BINS, dtype=np.int64)
    case = {
        "name": name,
        "bins": BINS,
        "samples": [float(v) for v in samples],
        "hist_range": [float(h.lo), float(h.hi)],
        "digest": [int(h.counts.sum()), int((i * h.counts).sum()), int((i * i * h.counts).sum())],
    }
    return case, h


def counts_case(name):
    """A dense histogram stored as counts: 200k Laplace values plus 0.05% outliers."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = rng.laplace(-0.3, 1.0, 200_000)
    x[rng.choice(len(x), 100, replace=False)] = rng.uniform(15, 30, 100) * rng.choice([-1, 1], 100)
    h = histogram(x.astype(np.float32), BINS)
    case = {
        "name": name,
        "bins": BINS,
        "hist_range": [float(h.lo), float(h.hi)],
        "counts": [int(c) for c in h.counts],
    }
    return case, h


def main():
    cases = []
    builders = [sample_case(n) for n in [
        "gaussian", "relu_gaussian", "laplace_outliers", "uniform",
        "positive_uniform", "negative_exponential", "constant",
    ]] + [counts_case("laplace_dense_counts")]
    for case, h in builders:
        ranges, window = ranges_of(h)
        case["ranges"] = {k: list(v) for k, v in ranges.items()}
        case["params"] = {k: list(asymmetric_int8(*v)) for k, v in ranges.items()}
        case["expected_error"] = {k: expected_error(h, *v) for k, v in ranges.items()}
        if window is not None:
            case["entropy_window"] = [window[0], window[1]]
            case["entropy_kl"] = window[2]
        cases.append(case)
        print(f"{case['name']:<22} " + "  ".join(f"{k} [{v[0]:.4g}, {v[1]:.4g}]" for k, v in ranges.items()))
    param_cases = []
    for lo, hi in [(0.0, 0.0), (-1.0, 0.0), (0.0, 1.0), (-3.7, 12.1), (2.0, 5.0), (-5.0, -2.0),
                   (-1e-30, 1e-30), (-1e-6, 3e-6), (-0.1, 1000.0), (-127.5, 127.5), (-0.0031, 0.0079)]:
        lo32, hi32 = float(np.float32(lo)), float(np.float32(hi))
        param_cases.append([lo32, hi32, *asymmetric_int8(lo32, hi32)])
    out = {
        "generator": "scripts/gen_quantize_reference.py",
        "min_scale": MIN_SCALE,
        "cases": cases,
        "param_cases": param_cases,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
