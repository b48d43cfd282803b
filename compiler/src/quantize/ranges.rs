//! Calibration statistics and clipping-range selection for post-training int8
//! quantization, and the int8 parameter arithmetic.
//!
//! Calibration runs twice over the samples: pass 1 feeds each activation tensor's values
//! to a [`MinMax`]; pass 2 fills a [`Histogram`] over that `[min, max]`. A
//! [`CalibrationMethod`] then picks the clipping range `[lo, hi]` from the histogram
//! ([`choose_range`]), and [`asymmetric_int8`] turns it into a scale and zero point
//! (TENSOR_QUANT8_ASYMM_SIGNED: `q` in `[-128, 127]`, `real = scale * (q - zero_point)`).
//! Weights are symmetric per output channel ([`symmetric_int8_scale`]).
//!
//! Every method treats the mass of a bin as spread uniformly over the bin. A reference
//! implementation of the same arithmetic in NumPy (`scripts/gen_quantize_reference.py`)
//! writes `testdata/quantize/ranges.json`, which the tests below check against.

use serde::Serialize;
use thiserror::Error;

/// Bins of the pass-2 histogram unless the caller asks otherwise.
pub const DEFAULT_BINS: usize = 2048;

/// The smallest scale [`asymmetric_int8`] and [`symmetric_int8_scale`] return (2^-24):
/// a degenerate range gets it, and a finite scale keeps every requantization multiplier
/// (`s_in * s_w / s_out`) representable.
pub const MIN_SCALE: f32 = 1.0 / 16_777_216.0;

/// The int8 values a clipping range is spread over (the entropy method's level count).
const INT8_LEVELS: usize = 256;

/// Errors of the calibration statistics.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum RangeError {
    /// Two histograms over different ranges or bin counts.
    #[error(
        "cannot merge histograms over different bins ([{lo}, {hi}] in {bins} bins and [{other_lo}, {other_hi}] in {other_bins})"
    )]
    HistogramMismatch {
        lo: f32,
        hi: f32,
        bins: usize,
        other_lo: f32,
        other_hi: f32,
        other_bins: usize,
    },
    /// A percentile outside `(50, 100]`.
    #[error("the calibration percentile must be in (50, 100], not {0}")]
    InvalidPercentile(f64),
}

/// How an activation tensor's clipping range is chosen from its calibration histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CalibrationMethod {
    /// The full observed range: the histogram's `[lo, hi]`, which is pass 1's min and max.
    /// Nothing is clipped; one outlier stretches the step for every other value.
    MinMax,
    /// Clips each tail at [`RangeOptions::percentile`] of the mass: the upper end is the
    /// value below which that share of the mass lies, the lower end the value below which
    /// `100 - percentile` lies (linear within a bin). A tensor with min >= 0 clips only the
    /// upper tail, one with max <= 0 only the lower.
    Percentile,
    /// The window of bins whose clipped distribution loses the least information, in KL
    /// divergence, when quantized to 256 levels: TensorRT's entropy calibration adapted to
    /// an asymmetric range. Adaptation: the candidate window `[edge_j, edge_k)` is searched
    /// at both ends (only the upper end when min >= 0, only the lower when max <= 0) by
    /// coordinate descent on a grid of bins/256 bins, then refined bin by bin. The
    /// reference `P` is the window with the mass outside folded into its edge bins; the
    /// candidate `Q` groups the unfolded window into as many buckets as int8 levels cover
    /// it (256 when it straddles 0, fewer when the range must be stretched to reach 0),
    /// bucket `b` holding bins `[b*n/m, (b+1)*n/m)`, each bucket's mass spread evenly over
    /// its bins where `P` is non-zero. Windows narrower than 256 bins are not candidates
    /// (a bin per level makes `Q` copy `P`), nor are windows whose edge bucket holds none
    /// of the window's own mass (infinite divergence). Because 0 is exactly representable,
    /// a spike of exact zeros (ReLU) costs nothing, yet would dominate the divergence: the
    /// bin holding 0 is capped at its larger neighbour's count first.
    Entropy,
    /// The range minimizing [`expected_error`]: rounding noise `scale^2 / 12` for the mass
    /// inside the representable range plus the squared distance to the nearest end for
    /// the mass outside, integrated exactly over each bin. Searched over both ends as
    /// shrink factors `2^(-t/1024)` of the observed min and max (`t` on a grid of 64 up to
    /// ten octaves, jointly over both ends), then by a pattern search halving the step
    /// down to `t` +- 1. The grid includes the full range, so the result is never worse
    /// than [`CalibrationMethod::MinMax`] under this measure.
    Mse,
}

impl CalibrationMethod {
    /// Every method, in a fixed order.
    pub const ALL: [Self; 4] = [Self::MinMax, Self::Percentile, Self::Entropy, Self::Mse];

    /// The method's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::MinMax => "minmax",
            Self::Percentile => "percentile",
            Self::Entropy => "entropy",
            Self::Mse => "mse",
        }
    }

    /// The method named `name` (ASCII case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(name))
    }
}

/// Running min/max of a tensor (pass 1).
///
/// Non-finite values are not part of the range; they are counted in `non_finite` so the
/// caller can refuse to calibrate a tensor that produced them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MinMax {
    /// Smallest finite value seen (+inf before any).
    pub min: f32,
    /// Largest finite value seen (-inf before any).
    pub max: f32,
    /// NaNs and infinities seen.
    pub non_finite: u64,
    /// Finite values seen.
    pub count: u64,
}

impl Default for MinMax {
    fn default() -> Self {
        Self::new()
    }
}

impl MinMax {
    /// No values seen yet.
    pub fn new() -> Self {
        Self {
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
            non_finite: 0,
            count: 0,
        }
    }

    /// Records `values`.
    pub fn add(&mut self, values: &[f32]) {
        for &v in values {
            if v.is_finite() {
                if v < self.min {
                    self.min = v;
                }
                if v > self.max {
                    self.max = v;
                }
                self.count += 1;
            } else {
                self.non_finite += 1;
            }
        }
    }

    /// Folds in the statistics of another share of the samples.
    pub fn merge(&mut self, other: &MinMax) {
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.non_finite += other.non_finite;
        self.count += other.count;
    }

    /// `(min, max)` of the finite values, `None` before any.
    pub fn range(&self) -> Option<(f32, f32)> {
        (self.count > 0).then_some((self.min, self.max))
    }
}

/// Fixed-range histogram of a tensor's values (pass 2), [`DEFAULT_BINS`] bins by default.
///
/// Bin `i` covers `[lo + (hi - lo) * i / bins, lo + (hi - lo) * (i + 1) / bins)`, the last
/// bin including `hi`. Values outside `[lo, hi]` count in the end bins; non-finite values
/// are skipped (pass 1 counted them). With `lo == hi` every value counts in bin 0.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    pub lo: f32,
    pub hi: f32,
    pub counts: Vec<u64>,
}

impl Histogram {
    /// An empty histogram over `[lo, hi]`. A range that is not finite or has `lo > hi`
    /// becomes `[0, 0]`; `bins` is at least 1.
    pub fn new(lo: f32, hi: f32, bins: usize) -> Self {
        let (lo, hi) = if lo.is_finite() && hi.is_finite() && lo <= hi {
            // `+ 0.0` turns -0.0 into 0.0.
            (lo + 0.0, hi + 0.0)
        } else {
            (0.0, 0.0)
        };
        Self {
            lo,
            hi,
            counts: vec![0; bins.max(1)],
        }
    }

    /// An empty histogram over pass 1's range (`[0, 0]` when it saw no finite value).
    pub fn from_min_max(min_max: &MinMax, bins: usize) -> Self {
        let (lo, hi) = min_max.range().unwrap_or((0.0, 0.0));
        Self::new(lo, hi, bins)
    }

    /// Number of bins.
    pub fn bins(&self) -> usize {
        self.counts.len()
    }

    /// Number of values counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &c| a.saturating_add(c))
    }

    /// Counts `values`.
    pub fn add(&mut self, values: &[f32]) {
        let bins = self.counts.len();
        if bins == 0 {
            return;
        }
        let (lo, hi) = bounds(self.lo, self.hi);
        let span = hi - lo;
        let k = bins as f64;
        for &v in values {
            if !v.is_finite() {
                continue;
            }
            let idx = if span > 0.0 {
                // The same expression as the NumPy reference, so both bin identically.
                let t = ((v as f64 - lo) * k / span).floor();
                if t <= 0.0 {
                    0
                } else if t >= k {
                    bins - 1
                } else {
                    t as usize
                }
            } else {
                0
            };
            self.counts[idx] = self.counts[idx].saturating_add(1);
        }
    }

    /// Adds another histogram over the same bins.
    pub fn merge(&mut self, other: &Histogram) -> Result<(), RangeError> {
        if self.lo != other.lo || self.hi != other.hi || self.bins() != other.bins() {
            return Err(RangeError::HistogramMismatch {
                lo: self.lo,
                hi: self.hi,
                bins: self.bins(),
                other_lo: other.lo,
                other_hi: other.hi,
                other_bins: other.bins(),
            });
        }
        for (a, &b) in self.counts.iter_mut().zip(&other.counts) {
            *a = a.saturating_add(b);
        }
        Ok(())
    }
}

/// Options of [`choose_range`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RangeOptions {
    /// The share of the mass, in percent, that [`CalibrationMethod::Percentile`] keeps
    /// below its upper end (and above its lower end). Default 99.999.
    pub percentile: f64,
}

impl Default for RangeOptions {
    fn default() -> Self {
        Self { percentile: 99.999 }
    }
}

impl RangeOptions {
    /// Checks the options. [`choose_range`] never fails: it clamps a percentile to
    /// `[50, 100]` and replaces NaN by the default.
    pub fn validate(&self) -> Result<(), RangeError> {
        if self.percentile > 50.0 && self.percentile <= 100.0 {
            Ok(())
        } else {
            Err(RangeError::InvalidPercentile(self.percentile))
        }
    }
}

/// Asymmetric int8 quantization parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantParams {
    pub scale: f32,
    pub zero_point: i32,
}

/// The clipping range `method` picks from `hist`. The range always contains 0 (it is
/// widened to include it), is finite and has `lo <= hi`; it is `[0, 0]` only when every
/// value is 0 or there are none. An empty or zero-width histogram gives its own range.
pub fn choose_range(
    method: CalibrationMethod,
    hist: &Histogram,
    options: &RangeOptions,
) -> (f32, f32) {
    let b = Bins::of(hist);
    let (lo, hi) = if !b.searchable() {
        (b.lo, b.hi)
    } else {
        match method {
            CalibrationMethod::MinMax => (b.lo, b.hi),
            CalibrationMethod::Percentile => percentile_range(&b, options.percentile),
            CalibrationMethod::Entropy => {
                let (j, k, _) = entropy_window(&b);
                (b.edge(j), b.edge(k))
            }
            CalibrationMethod::Mse => mse_range(&b),
        }
    };
    widen(lo, hi)
}

/// Asymmetric int8 parameters for `[lo, hi]` (TENSOR_QUANT8_ASYMM_SIGNED).
///
/// The range is widened to include 0; `scale = (hi - lo) / 255` (at least [`MIN_SCALE`],
/// which a degenerate `lo == hi == 0` gets) and `zero_point = round(-128 - lo / scale)`
/// (half to even) in `[-128, 127]`, so 0 is exactly `q = zero_point`. The covered range
/// `[scale * (-128 - zp), scale * (127 - zp)]` is the requested one nudged by under half
/// a step. NaN counts as 0 and infinities as the largest finite values.
pub fn asymmetric_int8(lo: f32, hi: f32) -> QuantParams {
    let lo = finite_or_clamped(lo).min(0.0);
    let hi = finite_or_clamped(hi).max(0.0);
    let range = hi as f64 - lo as f64;
    let mut scale = (range / 255.0) as f32;
    if !(scale >= MIN_SCALE && scale.is_finite()) {
        scale = MIN_SCALE;
    }
    let zero_point = (-128.0 - lo as f64 / scale as f64)
        .round_ties_even()
        .clamp(-128.0, 127.0) as i32;
    QuantParams { scale, zero_point }
}

/// Symmetric int8 scale for a weight channel whose largest magnitude is `abs_max`
/// (`q` in `[-127, 127]`, zero point 0): `abs_max / 127`, at least [`MIN_SCALE`]. An
/// all-zero (or NaN) channel gets 1.0, so a bias over it (scale `s_in * s_w`) stays
/// representable in int32.
pub fn symmetric_int8_scale(abs_max: f32) -> f32 {
    let m = abs_max.abs();
    if m.is_nan() || m == 0.0 {
        return 1.0;
    }
    if !m.is_finite() {
        return f32::MAX / 127.0;
    }
    (m / 127.0).max(MIN_SCALE)
}

/// `x` quantized with `p`: `saturate(round(x / scale) + zero_point)`, ONNX's
/// QuantizeLinear (round half to even, in f32). NaN gives the zero point.
pub fn quantize_value(x: f32, p: QuantParams) -> i8 {
    let q = (x / p.scale).round_ties_even() as i32; // `as` saturates; NaN -> 0
    q.saturating_add(p.zero_point).clamp(-128, 127) as i8
}

/// `scale * (q - zero_point)`.
pub fn dequantize_value(q: i8, p: QuantParams) -> f32 {
    p.scale * (q as i32 - p.zero_point) as f32
}

/// Mean squared quantization error of the histogram's values under
/// `asymmetric_int8(lo, hi)`: values inside the covered range `[a, b]` contribute the
/// rounding noise of a uniform error within a step, `scale^2 / 12`; values outside the
/// squared distance to the nearest end. Each bin's mass is uniform over the bin, and the
/// split and the tails are integrated exactly. 0 for an empty histogram.
pub fn expected_error(hist: &Histogram, lo: f32, hi: f32) -> f64 {
    let b = Bins::of(hist);
    if b.total <= 0.0 {
        return 0.0;
    }
    let (s, a, top) = covered(lo, hi);
    let noise = s * s / 12.0;
    if b.span <= 0.0 {
        let x = b.lo;
        return if x < a {
            (a - x) * (a - x)
        } else if x > top {
            (x - top) * (x - top)
        } else {
            noise
        };
    }
    let mut sum = 0.0;
    for (i, &c) in b.counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let (u, v) = (b.edge(i), b.edge(i + 1));
        let w = v - u;
        let centre = 0.5 * (u + v);
        let inside = (v.min(top) - u.max(a)).max(0.0) / w;
        let above = if u >= top {
            (centre - top) * (centre - top) + w * w / 12.0
        } else if v > top {
            (v - top).powi(3) / 3.0 / w
        } else {
            0.0
        };
        let below = if v <= a {
            (a - centre) * (a - centre) + w * w / 12.0
        } else if u < a {
            (a - u).powi(3) / 3.0 / w
        } else {
            0.0
        };
        sum += c as f64 * (inside * noise + above + below);
    }
    sum / b.total
}

/// `(scale, a, b)`: the step and covered range of `asymmetric_int8(lo, hi)`.
fn covered(lo: f32, hi: f32) -> (f64, f64, f64) {
    let p = asymmetric_int8(lo, hi);
    let s = p.scale as f64;
    let zp = p.zero_point as f64;
    (s, s * (-128.0 - zp), s * (127.0 - zp))
}

/// NaN -> 0, infinities -> the largest finite values.
fn finite_or_clamped(x: f32) -> f32 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(f32::MIN, f32::MAX)
    }
}

/// A histogram's range in f64, `[0, 0]` when its fields are not a valid range.
fn bounds(lo: f32, hi: f32) -> (f64, f64) {
    if lo.is_finite() && hi.is_finite() && lo <= hi {
        (lo as f64, hi as f64)
    } else {
        (0.0, 0.0)
    }
}

/// `[lo, hi]` widened to include 0, as finite f32 without negative zeros.
fn widen(lo: f64, hi: f64) -> (f32, f32) {
    let to_f32 = |x: f64| {
        if x.is_nan() {
            0.0
        } else {
            (x.clamp(f32::MIN as f64, f32::MAX as f64) as f32) + 0.0
        }
    };
    (to_f32(lo).min(0.0) + 0.0, to_f32(hi).max(0.0) + 0.0)
}

/// The histogram as the methods see it.
struct Bins<'a> {
    lo: f64,
    hi: f64,
    span: f64,
    counts: &'a [u64],
    total: f64,
}

impl<'a> Bins<'a> {
    fn of(hist: &'a Histogram) -> Self {
        let (lo, hi) = bounds(hist.lo, hist.hi);
        Self {
            lo,
            hi,
            span: hi - lo,
            counts: &hist.counts,
            total: hist.counts.iter().map(|&c| c as f64).sum(),
        }
    }

    fn n(&self) -> usize {
        self.counts.len()
    }

    /// Whether there is a spread of values to choose a range from.
    fn searchable(&self) -> bool {
        self.total > 0.0 && self.span > 0.0 && !self.counts.is_empty()
    }

    /// Left edge of bin `i`; `edge(n)` is `hi`.
    fn edge(&self, i: usize) -> f64 {
        if i >= self.n() {
            self.hi
        } else {
            self.lo + self.span * i as f64 / self.n() as f64
        }
    }
}

/// Whether objective value `a` improves on `b` by more than rounding: the Rust and NumPy
/// implementations sum in different orders, and must agree on which candidate wins.
fn improves(a: f64, b: f64, absolute: f64) -> bool {
    a < b - (1e-9 * b.abs() + absolute)
}

fn percentile_range(b: &Bins, percentile: f64) -> (f64, f64) {
    let pct = if percentile.is_nan() {
        RangeOptions::default().percentile
    } else {
        percentile.clamp(50.0, 100.0)
    };
    let upper = if b.hi > 0.0 {
        quantile(b, b.total * (pct / 100.0))
    } else {
        b.hi
    };
    let lower = if b.lo < 0.0 {
        quantile(b, b.total * ((100.0 - pct) / 100.0))
    } else {
        b.lo
    };
    (lower, upper)
}

/// The value below which `target` of the mass lies, linear within a bin.
fn quantile(b: &Bins, target: f64) -> f64 {
    if target <= 0.0 {
        return b.lo;
    }
    let mut cum = 0.0;
    for (i, &c) in b.counts.iter().enumerate() {
        let c = c as f64;
        if c > 0.0 && cum + c >= target {
            let (u, v) = (b.edge(i), b.edge(i + 1));
            return u + (v - u) * ((target - cum) / c);
        }
        cum += c;
    }
    b.hi
}

fn xlnx(x: f64) -> f64 {
    if x > 0.0 { x * x.ln() } else { 0.0 }
}

/// Prefix sums for O(levels) KL divergences of windows of bins.
struct KlTable {
    /// Counts, the bin holding 0 capped at its larger neighbour.
    c: Vec<f64>,
    /// `cum[i]`: sum of `c[..i]`.
    cum: Vec<f64>,
    /// `nonzero[i]`: number of non-zero `c[..i]`.
    nonzero: Vec<u32>,
    /// `clc[i]`: sum of `c ln c` over `c[..i]`.
    clc: Vec<f64>,
}

impl KlTable {
    fn new(b: &Bins) -> Self {
        let n = b.n();
        let mut c: Vec<f64> = b.counts.iter().map(|&x| x as f64).collect();
        if b.lo <= 0.0 && b.hi >= 0.0 && n >= 2 {
            let z = (((-b.lo) * n as f64 / b.span).floor() as usize).min(n - 1);
            let left = if z > 0 { c[z - 1] } else { 0.0 };
            let right = if z + 1 < n { c[z + 1] } else { 0.0 };
            c[z] = c[z].min(left.max(right));
        }
        let mut cum = Vec::with_capacity(n + 1);
        let mut nonzero = Vec::with_capacity(n + 1);
        let mut clc = Vec::with_capacity(n + 1);
        let (mut s, mut z, mut l) = (0.0, 0u32, 0.0);
        for &x in &c {
            cum.push(s);
            nonzero.push(z);
            clc.push(l);
            s += x;
            z += u32::from(x > 0.0);
            l += xlnx(x);
        }
        cum.push(s);
        nonzero.push(z);
        clc.push(l);
        Self {
            c,
            cum,
            nonzero,
            clc,
        }
    }

    fn total(&self) -> f64 {
        self.cum[self.c.len()]
    }

    /// KL(P || Q) of window `[j, k)` quantized to `m` levels (see
    /// [`CalibrationMethod::Entropy`]); `None` when the divergence is infinite or the
    /// window holds no mass of its own.
    fn kl(&self, j: usize, k: usize, m: usize) -> Option<f64> {
        let n = k - j;
        let total = self.total();
        let below = self.cum[j];
        let above = total - self.cum[k];
        let t_in = self.cum[k] - self.cum[j];
        if t_in <= 0.0 {
            return None;
        }
        // Folded edge bins: the mass outside the window joins its end bins.
        let (cj, ck) = (self.c[j], self.c[k - 1]);
        let fj = cj + below + if n == 1 { above } else { 0.0 };
        let fk = ck + above;
        let mut flnf = self.clc[k] - self.clc[j] - xlnx(cj) + xlnx(fj);
        if n > 1 {
            flnf += xlnx(fk) - xlnx(ck);
        }
        let extra_j = cj == 0.0 && fj > 0.0;
        let extra_k = n > 1 && ck == 0.0 && fk > 0.0;
        let mut cross = 0.0;
        for level in 0..m {
            let s = j + level * n / m;
            let e = j + (level + 1) * n / m;
            if s == e {
                continue;
            }
            let own = self.cum[e] - self.cum[s];
            let mut folded = own;
            let mut nonzero = (self.nonzero[e] - self.nonzero[s]) as f64;
            if s == j {
                folded += fj - cj;
                nonzero += f64::from(u8::from(extra_j));
            }
            if e == k && n > 1 {
                folded += fk - ck;
                nonzero += f64::from(u8::from(extra_k));
            }
            if folded <= 0.0 {
                continue;
            }
            if own <= 0.0 {
                return None;
            }
            cross += folded * (own / (nonzero * t_in)).ln();
        }
        Some((flnf - cross) / total - total.ln())
    }
}

/// Int8 levels over window `[edge(j), edge(k)]`: all 256 when it contains 0, otherwise
/// the share of the range stretched to reach 0 that the window covers.
fn window_levels(b: &Bins, j: usize, k: usize) -> usize {
    let (lo, hi) = (b.edge(j), b.edge(k));
    if lo <= 0.0 && hi >= 0.0 {
        return INT8_LEVELS;
    }
    let frac = (hi - lo) / (hi.max(0.0) - lo.min(0.0));
    ((INT8_LEVELS as f64 * frac + 0.5).floor() as usize).clamp(1, INT8_LEVELS)
}

/// The entropy method's window `(j, k, kl)`: the range is `[edge(j), edge(k)]`.
fn entropy_window(b: &Bins) -> (usize, usize, f64) {
    let bins = b.n();
    let table = KlTable::new(b);
    let eval = |j: usize, k: usize| -> Option<f64> {
        if k <= j || (k - j < INT8_LEVELS && !(j == 0 && k == bins)) {
            return None;
        }
        table.kl(j, k, window_levels(b, j, k))
    };
    let Some(mut best) = eval(0, bins) else {
        return (0, bins, 0.0);
    };
    let (mut j, mut k) = (0, bins);
    let upper_free = b.hi > 0.0;
    let lower_free = b.lo < 0.0;
    // The window keeps 0 inside it (or its end on the data's side of 0).
    let jmax = (0..=bins).rev().find(|&i| b.edge(i) <= 0.0).unwrap_or(0);
    let kmin = (0..=bins).find(|&i| b.edge(i) >= 0.0).unwrap_or(bins);
    let stride = (bins / INT8_LEVELS).max(1);
    let coarse_k: Vec<usize> = (0..=bins / stride)
        .map(|t| bins - t * stride)
        .filter(|&x| x >= kmin)
        .collect();
    let coarse_j: Vec<usize> = (0..=bins / stride)
        .map(|t| t * stride)
        .filter(|&x| x <= jmax)
        .collect();
    let sweep_k = |cands: &[usize], j: usize, k: &mut usize, best: &mut f64| {
        for &kk in cands {
            if let Some(v) = eval(j, kk)
                && improves(v, *best, 1e-12)
            {
                *best = v;
                *k = kk;
            }
        }
    };
    // Coordinate descent on the coarse grid, widest windows first so ties keep them.
    for _ in 0..3 {
        let before = (j, k);
        if upper_free {
            sweep_k(&coarse_k, j, &mut k, &mut best);
        }
        if lower_free {
            for &jj in &coarse_j {
                if let Some(v) = eval(jj, k)
                    && improves(v, best, 1e-12)
                {
                    best = v;
                    j = jj;
                }
            }
        }
        if (j, k) == before {
            break;
        }
    }
    // Bin-by-bin refinement around the coarse optimum.
    let span = stride - 1;
    if upper_free {
        let cands: Vec<usize> = (k.saturating_sub(span)..=(k + span).min(bins))
            .rev()
            .filter(|&x| x >= kmin)
            .collect();
        sweep_k(&cands, j, &mut k, &mut best);
    }
    if lower_free {
        for jj in j.saturating_sub(span)..=(j + span).min(jmax) {
            if let Some(v) = eval(jj, k)
                && improves(v, best, 1e-12)
            {
                best = v;
                j = jj;
            }
        }
    }
    (j, k, best)
}

/// Prefix moments for O(1) evaluation of [`expected_error`] during the MSE search, in
/// bin units (`t = (x - lo) / width`, bin `i` is `[i, i + 1]`).
struct MseTable {
    lo: f64,
    width: f64,
    c: Vec<f64>,
    /// Prefix sums of `c`, `c * (i + 1/2)` and `c * (i^2 + i + 1/3)` (the bin's mean of
    /// `t` and `t^2`).
    m0: Vec<f64>,
    m1: Vec<f64>,
    m2: Vec<f64>,
    total: f64,
}

impl MseTable {
    fn new(b: &Bins) -> Self {
        let n = b.n();
        let c: Vec<f64> = b.counts.iter().map(|&x| x as f64).collect();
        let (mut m0, mut m1, mut m2) = (vec![0.0; n + 1], vec![0.0; n + 1], vec![0.0; n + 1]);
        for (i, &x) in c.iter().enumerate() {
            let t = i as f64;
            m0[i + 1] = m0[i] + x;
            m1[i + 1] = m1[i] + x * (t + 0.5);
            m2[i + 1] = m2[i] + x * (t * t + t + 1.0 / 3.0);
        }
        Self {
            lo: b.lo,
            width: b.span / n as f64,
            total: m0[n],
            c,
            m0,
            m1,
            m2,
        }
    }

    /// `sum over bins [from, to) of c * mean((t - p)^2)`.
    fn square_moment(&self, from: usize, to: usize, p: f64) -> f64 {
        if to <= from {
            return 0.0;
        }
        let s0 = self.m0[to] - self.m0[from];
        let s1 = self.m1[to] - self.m1[from];
        let s2 = self.m2[to] - self.m2[from];
        (s2 - 2.0 * p * s1 + p * p * s0).max(0.0)
    }

    /// [`expected_error`] of `[lo, hi]`.
    fn error(&self, lo: f32, hi: f32) -> f64 {
        let n = self.c.len();
        let (s, a, b) = covered(lo, hi);
        let ta = (a - self.lo) / self.width;
        let tb = (b - self.lo) / self.width;
        // Mass and squared distance above b.
        let (mass_above, tail_above) = if tb >= n as f64 {
            (0.0, 0.0)
        } else if tb < 0.0 {
            (self.total, self.square_moment(0, n, tb))
        } else {
            let i = (tb.floor() as usize).min(n - 1);
            let part = (i as f64 + 1.0 - tb).max(0.0);
            (
                self.c[i] * part + self.m0[n] - self.m0[i + 1],
                self.c[i] * part.powi(3) / 3.0 + self.square_moment(i + 1, n, tb),
            )
        };
        let (mass_below, tail_below) = if ta <= 0.0 {
            (0.0, 0.0)
        } else if ta >= n as f64 {
            (self.total, self.square_moment(0, n, ta))
        } else {
            let i = (ta.floor() as usize).min(n - 1);
            let part = (ta - i as f64).max(0.0);
            (
                self.c[i] * part + self.m0[i],
                self.c[i] * part.powi(3) / 3.0 + self.square_moment(0, i, ta),
            )
        };
        let inside = (self.total - mass_above - mass_below).max(0.0);
        let w2 = self.width * self.width;
        (s * s / 12.0 * inside + w2 * (tail_above + tail_below)) / self.total
    }
}

/// Shrink exponents of the MSE search: factor `2^(-t / MSE_OCTAVE)`, `t <= MSE_T_MAX`.
const MSE_OCTAVE: f64 = 1024.0;
const MSE_T_MAX: i64 = 10 * 1024;
const MSE_COARSE: i64 = 64;

fn mse_range(b: &Bins) -> (f64, f64) {
    let table = MseTable::new(b);
    let lo_end = b.lo.min(0.0);
    let hi_end = b.hi.max(0.0);
    let upper_free = b.hi > 0.0;
    let lower_free = b.lo < 0.0;
    let range = |tl: i64, tu: i64| -> (f32, f32) {
        (
            (lo_end * (-(tl as f64) / MSE_OCTAVE).exp2()) as f32,
            (hi_end * (-(tu as f64) / MSE_OCTAVE).exp2()) as f32,
        )
    };
    let eval = |tl: i64, tu: i64| {
        let (lo, hi) = range(tl, tu);
        table.error(lo, hi)
    };
    let grid = |free: bool| -> Vec<i64> {
        if free {
            (0..=MSE_T_MAX / MSE_COARSE)
                .map(|i| i * MSE_COARSE)
                .collect()
        } else {
            vec![0]
        }
    };
    let (mut tl, mut tu) = (0, 0);
    let mut best = eval(0, 0);
    for &u in &grid(upper_free) {
        for &l in &grid(lower_free) {
            let v = eval(l, u);
            if improves(v, best, 0.0) {
                (best, tl, tu) = (v, l, u);
            }
        }
    }
    let mut step = MSE_COARSE / 2;
    while step >= 1 {
        for _ in 0..10_000 {
            let mut next = None;
            let mut next_val = best;
            let moves = [
                (upper_free, 0, -step),
                (upper_free, 0, step),
                (lower_free, -step, 0),
                (lower_free, step, 0),
            ];
            for (free, dl, du) in moves {
                let (l, u) = (tl + dl, tu + du);
                if !free || !(0..=MSE_T_MAX).contains(&l) || !(0..=MSE_T_MAX).contains(&u) {
                    continue;
                }
                let v = eval(l, u);
                if improves(v, next_val, 0.0) {
                    next = Some((l, u));
                    next_val = v;
                }
            }
            match next {
                Some((l, u)) => (tl, tu, best) = (l, u, next_val),
                None => break,
            }
        }
        step /= 2;
    }
    let (lo, hi) = range(tl, tu);
    (lo as f64, hi as f64)
}

#[cfg(test)]
mod tests;
