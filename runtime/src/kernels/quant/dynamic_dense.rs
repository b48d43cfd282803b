//! DYNAMIC_FULLY_CONNECTED (nnc extension, docs/EXTENSIONS.md): float rows times int8
//! weights, each row quantized to 8 bits when the operation runs. What ONNX Runtime's
//! `quantize_dynamic` does for transformers (its MatMulInteger with a per-tensor scale;
//! here one scale per row, which follows each token's own range).
//!
//! Per input row `x` of depth k, in f32 unless said otherwise:
//! - `lo = min(0, min x)`, `hi = max(0, max x)`, `scale = (hi - lo) / 255`, `inv = 1 /
//!   scale`, `zp = clamp(round(-lo * inv), 0, 255)`;
//! - `a_i = clamp(round(x_i * inv + zp), 0, 255) - zp` (rounding half to even), exact
//!   products `a_i * w_ji` summed in i32;
//! - `y_j = act(acc_j * (scale * w_scale_j) + bias_j)`.
//!
//! A row of zeros (or one whose range underflows `scale` to zero) gives `act(bias)`; a
//! row holding NaN or an infinity gives NaN throughout. `a_i` and `w_ji` lie in
//! [-255, 255] and [-127, 127]; the depth is limited to what an i32 sum of such products
//! cannot overflow, so every sum is exact. Where the processor has 8-bit dot products
//! (AVX512-VNNI, AVX-VNNI) the rows stay bytes `q` for [`super::gemm_u8i8::gemm_i32`] and
//! `zp * sum_i w_ji` (summed when the weights are packed) is subtracted after; otherwise
//! `q - zp` is widened for the i16 GEMM of [`super::gemm`]. Both give the same sums, so
//! the outputs are the same floats (tested against the definition on every path).

use super::gemm::{self, Dst, MR, PackedRhs, pack_rhs, packed_len, padded_depth};
use super::{for_row_tiles, gemm_u8i8};
use crate::buffer::AlignedBuf;
use crate::error::{Result, RuntimeError};
use crate::kernels::{Clamp, Kernel, KernelContext, OpInfo, PreparedWeights};
use nnc_formats::nn::OperandType;

/// The deepest row whose worst-case sum, `255 * 127 * k`, fits an i32 (the operation's
/// definition refuses deeper weights).
const MAX_DEPTH: usize = nnc_formats::nn::ops::DYNAMIC_FULLY_CONNECTED_MAX_DEPTH as usize;

/// i16 values of A per GEMM tile (as the quantized FULLY_CONNECTED's).
const A_TILE_BUDGET: usize = 1 << 17;

struct DynamicFullyConnected {
    units: usize,
    depth: usize,
    /// The 8-bit dot-product GEMM ([`gemm_u8i8::gemm_i32`]) rather than the i16 one.
    bytes: bool,
    /// Each unit's weight scale.
    scales: Vec<f32>,
    clamp: Clamp,
}

pub(crate) fn build(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    if !info.is_weight(1) {
        return Err(info.unsupported("DYNAMIC_FULLY_CONNECTED with weights computed at run time"));
    }
    let [units, depth] = match info.dims(1).as_deref() {
        Some(&[u, k]) => [u, k],
        _ => return Err(info.invalid("weights must be 2-D with known dimensions")),
    };
    if depth > MAX_DEPTH {
        return Err(info.unsupported(format!(
            "a depth of {depth} (above {MAX_DEPTH} the int32 sums could overflow)"
        )));
    }
    let w = info.operand(1)?;
    let scales = match (w.operand_type, &w.channel_quant) {
        (OperandType::TensorQuant8SymmPerChannel, Some(q)) if q.scales.len() == units => {
            q.scales.clone()
        }
        (OperandType::TensorQuant8Symm, _) => vec![w.scale; units],
        _ => return Err(info.invalid("weights need one scale per unit or one per tensor")),
    };
    if scales.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
        return Err(info.invalid("weight scales must be positive and finite"));
    }
    Ok(Box::new(DynamicFullyConnected {
        units,
        depth,
        bytes: gemm_u8i8::i32_available(),
        scales,
        clamp: Clamp::new(info.activation(3)?),
    }))
}

impl Kernel for DynamicFullyConnected {
    fn prepare_weights(&self, weights: &[Option<&[u8]>]) -> Result<PreparedWeights> {
        let mut prepared = PreparedWeights::empty();
        if let Some(Some(w)) = weights.get(1) {
            let (u, k) = (self.units, self.depth);
            if w.len() != u * k {
                return Err(RuntimeError::kernel("weights do not match their shape"));
            }
            let too_large = || RuntimeError::kernel("weights too large");
            if self.bytes {
                let len = gemm_u8i8::packed_len(k, u).ok_or_else(too_large)?;
                let mut packed = zeroize::Zeroizing::new(crate::kernels::util::filled(len, 0u8)?);
                let sums = gemm_u8i8::pack_rhs(k, u, |kk, j| w[j * k + kk] as i8, &mut packed);
                prepared.push(AlignedBuf::from_bytes(&packed)?);
                prepared.push(AlignedBuf::from_bytes(bytemuck::cast_slice(&sums))?);
            } else {
                let len = packed_len(k, u).ok_or_else(too_large)?;
                let mut packed = zeroize::Zeroizing::new(crate::kernels::util::filled(len, 0i16)?);
                pack_rhs(k, u, |kk, j| i16::from(w[j * k + kk] as i8), &mut packed);
                prepared.push(AlignedBuf::from_bytes(bytemuck::cast_slice(&packed))?);
            }
        }
        prepared.add_raw(weights, &[1])?;
        Ok(prepared)
    }

    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let (units, k) = (self.units, self.depth);
        let x = ctx.input(0)?.f32()?;
        if k == 0 || units == 0 || x.len() % k != 0 {
            return Err(RuntimeError::kernel(format!(
                "input of {} values is not a whole number of rows of {k}",
                x.len()
            )));
        }
        let buffer = |i: usize| {
            ctx.weights
                .buffer(i)
                .map(|b| b.as_bytes())
                .ok_or_else(|| RuntimeError::kernel("prepared weights are missing"))
        };
        let prepared = buffer(0)?;
        let sums: &[i32] = if self.bytes {
            bytemuck::try_cast_slice(buffer(1)?)
                .map_err(|e| RuntimeError::Internal(format!("prepared weight sums: {e:?}")))?
        } else {
            &[]
        };
        let bias = match ctx.optional_input(2) {
            Some(b) => Some(b.f32()?),
            None => None,
        };
        if bias.is_some_and(|b| b.len() != units) {
            return Err(RuntimeError::kernel(
                "bias does not hold one value per unit",
            ));
        }
        let rows = x.len() / k;
        let threads = ctx.threads;
        let out = ctx.output(0)?.f32_mut()?;
        if out.len() != rows * units {
            return Err(RuntimeError::kernel(format!(
                "output holds {} values, expected {rows} x {units}",
                out.len()
            )));
        }
        // Bytes of a widened (i16) or 8-bit row of A.
        let row_bytes = if self.bytes {
            gemm_u8i8::quad_depth(k)
        } else {
            2 * padded_depth(k)
        };
        let mut tile = (2 * A_TILE_BUDGET / row_bytes).max(MR) / MR * MR;
        if threads > 1 {
            tile = tile.min(rows.div_ceil(threads * 2).div_ceil(MR) * MR);
        }
        let tile = tile.clamp(1, rows.max(1));
        // Scratch per task, as i32: the tile's rows of A and its accumulators.
        let a_len = (tile * row_bytes).div_ceil(4);
        let scratch = a_len + tile * units;
        let (scales, clamp) = (&self.scales, &self.clamp);
        for_row_tiles(
            threads,
            out,
            units,
            tile,
            scratch,
            |r0, out_rows, s: &mut [i32]| {
                let t = out_rows.len() / units;
                let (a, acc) = s.split_at_mut(a_len);
                let acc = &mut acc[..t * units];
                let x = &x[r0 * k..(r0 + t) * k];
                let row_scales = if self.bytes {
                    let a: &mut [u8] = &mut bytemuck::cast_slice_mut(a)[..t * row_bytes];
                    // The bytes `q` (the zero point is subtracted after the products).
                    let params = quantize_rows(x, k, a, row_bytes, |q, _| q as u8);
                    let rhs = gemm_u8i8::PackedRhs {
                        data: prepared,
                        k,
                        n: units,
                    };
                    gemm_u8i8::gemm_i32(true, a, 0, row_bytes, t, &rhs, acc, units)?;
                    // `sum q * w - zp * sum w` is the sum of `(q - zp) * w`, exactly.
                    for (row, &(_, zp)) in acc.chunks_exact_mut(units).zip(&params) {
                        for (v, &colsum) in row.iter_mut().zip(sums) {
                            *v = v.wrapping_sub(zp.wrapping_mul(colsum));
                        }
                    }
                    params
                } else {
                    let kp = padded_depth(k);
                    let a: &mut [i16] = &mut bytemuck::cast_slice_mut(a)[..t * kp];
                    let params = quantize_rows(x, k, a, kp, |q, zp| (q - zp) as i16);
                    let packed: &[i16] = bytemuck::try_cast_slice(prepared)
                        .map_err(|e| RuntimeError::Internal(format!("prepared weights: {e:?}")))?;
                    let rhs = PackedRhs {
                        data: packed,
                        k,
                        n: units,
                    };
                    gemm::gemm(
                        a,
                        kp,
                        t,
                        &rhs,
                        Dst::I32 {
                            out: acc,
                            ld: units,
                        },
                    )?;
                    params
                };
                for ((y, sums), &(scale, _)) in out_rows
                    .chunks_exact_mut(units)
                    .zip(acc.chunks_exact(units))
                    .zip(&row_scales)
                {
                    dequantize_row(sums, scale, scales, bias, clamp, y);
                }
                Ok(())
            },
        )
    }
}

/// Quantizes rows of `k` values of `x` into `a` (rows `stride` elements apart, the
/// padding past k zero), each value stored as `store(q, zp)`, and returns each row's
/// scale and zero point ([`row_quant`]; a row without values to quantize is all zeros
/// with zero point 0).
fn quantize_rows<T: Copy + Default>(
    x: &[f32],
    k: usize,
    a: &mut [T],
    stride: usize,
    store: impl Fn(i32, i32) -> T,
) -> Vec<(f32, i32)> {
    x.chunks_exact(k)
        .zip(a.chunks_exact_mut(stride))
        .map(|(src, dst)| {
            let (scale, q) = row_quant(src);
            match q {
                Some((inv, zp)) => {
                    let zp_int = zp as i32;
                    for (d, &v) in dst.iter_mut().zip(src) {
                        *d = store(quantized(v, inv, zp), zp_int);
                    }
                    dst[k..].fill(T::default());
                    (scale, zp_int)
                }
                None => {
                    dst.fill(T::default());
                    (scale, 0)
                }
            }
        })
        .collect()
}

/// A row's scale, and its `1 / scale` and zero point when it has values to quantize:
/// scale 0 for a row that contributes nothing (all zeros, or a range too small for f32
/// to divide by), NaN for one that holds a non-finite value or a range too wide for f32.
fn row_quant(x: &[f32]) -> (f32, Option<(f32, f32)>) {
    // Eight running extremes and a sum of `v * 0` (0, or NaN for an infinity or NaN),
    // written so that the loop vectorizes: `f32::min`'s NaN rule kept it scalar (a third
    // of a BERT's run).
    const L: usize = 8;
    let (mut lo, mut hi, mut bad) = ([0f32; L], [0f32; L], [0f32; L]);
    let mut chunks = x.chunks_exact(L);
    for c in &mut chunks {
        for i in 0..L {
            lo[i] = if c[i] < lo[i] { c[i] } else { lo[i] };
            hi[i] = if c[i] > hi[i] { c[i] } else { hi[i] };
            bad[i] += c[i] * 0.0;
        }
    }
    for (i, &v) in chunks.remainder().iter().enumerate() {
        lo[i] = if v < lo[i] { v } else { lo[i] };
        hi[i] = if v > hi[i] { v } else { hi[i] };
        bad[i] += v * 0.0;
    }
    let finite = bad.iter().all(|b| *b == 0.0);
    let lo = lo.iter().fold(0f32, |m, &v| if v < m { v } else { m });
    let hi = hi.iter().fold(0f32, |m, &v| if v > m { v } else { m });
    if !finite {
        return (f32::NAN, None);
    }
    let scale = (hi - lo) / 255.0;
    if scale == 0.0 {
        return (0.0, None);
    }
    if !scale.is_finite() {
        return (f32::NAN, None);
    }
    let inv = 1.0 / scale;
    (
        scale,
        Some((inv, (-lo * inv).round_ties_even().clamp(0.0, 255.0))),
    )
}

/// `clamp(round(v * inv + zp), 0, 255)`, halves to even, as an integer. `f32::
/// round_ties_even` is a libm call on x86-64's baseline (it was a fifth of a BERT's run);
/// adding and subtracting 1.5 * 2^23 rounds the same way in the default rounding mode for
/// every |t| < 2^22, and the loop vectorizes. The clamp first keeps t in that range (a
/// finite row's values give finite t).
#[inline(always)]
fn quantized(v: f32, inv: f32, zp: f32) -> i32 {
    const ROUNDER: f32 = 12_582_912.0;
    let t = (v * inv + zp).clamp(-1.0, 256.0);
    let q = ((t + ROUNDER) - ROUNDER).clamp(0.0, 255.0);
    // SAFETY: q is an integer in [0, 255] (finite, representable as i32).
    unsafe { q.to_int_unchecked::<i32>() }
}

/// `y_j = act(acc_j * (scale * w_scale_j) + bias_j)`.
fn dequantize_row(
    acc: &[i32],
    scale: f32,
    w_scales: &[f32],
    bias: Option<&[f32]>,
    clamp: &Clamp,
    y: &mut [f32],
) {
    for (j, (y, &a)) in y.iter_mut().zip(acc).enumerate() {
        let b = bias.map_or(0.0, |b| b[j]);
        *y = clamp.apply(a as f32 * (scale * w_scales[j]) + b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module docs' definition, in f64 for the sums (exact there) and f32 where the
    /// definition says so.
    fn reference(x: &[f32], k: usize, w: &[i8], w_scales: &[f32], bias: &[f32]) -> Vec<f32> {
        let units = w_scales.len();
        let mut out = Vec::new();
        for row in x.chunks_exact(k) {
            let lo = row.iter().fold(0f32, |m, &v| m.min(v));
            let hi = row.iter().fold(0f32, |m, &v| m.max(v));
            let scale = (hi - lo) / 255.0;
            let inv = 1.0 / scale;
            let zp = (-lo * inv).round_ties_even().clamp(0.0, 255.0);
            let a: Vec<i64> = row
                .iter()
                .map(|&v| ((v * inv + zp).round_ties_even().clamp(0.0, 255.0) - zp) as i64)
                .collect();
            for j in 0..units {
                let acc: i64 = (0..k).map(|i| a[i] * i64::from(w[j * k + i])).sum();
                let acc = if scale == 0.0 { 0 } else { acc };
                let s = if scale == 0.0 { 0.0 } else { scale };
                out.push(acc as f32 * (s * w_scales[j]) + bias[j]);
            }
        }
        out
    }

    /// The kernel's arithmetic on one path: `bytes` picks the 8-bit GEMM (raw sums,
    /// then the zero-point correction) or the widened one; `simd` its fastest kernel.
    fn on_path(
        x: &[f32],
        k: usize,
        w: &[i8],
        w_scales: &[f32],
        bias: &[f32],
        bytes: bool,
        simd: bool,
    ) -> Vec<f32> {
        let (rows, units) = (x.len() / k, w_scales.len());
        let mut acc = vec![0i32; rows * units];
        let params = if bytes {
            let kq = gemm_u8i8::quad_depth(k);
            let mut packed = vec![0u8; gemm_u8i8::packed_len(k, units).unwrap()];
            let sums = gemm_u8i8::pack_rhs(k, units, |kk, j| w[j * k + kk], &mut packed);
            let mut a = vec![0u8; rows * kq];
            let params = quantize_rows(x, k, &mut a, kq, |q, _| q as u8);
            let rhs = gemm_u8i8::PackedRhs {
                data: &packed,
                k,
                n: units,
            };
            gemm_u8i8::gemm_i32(simd, &a, 0, kq, rows, &rhs, &mut acc, units).unwrap();
            for (row, &(_, zp)) in acc.chunks_exact_mut(units).zip(&params) {
                for (v, &s) in row.iter_mut().zip(&sums) {
                    *v = v.wrapping_sub(zp.wrapping_mul(s));
                }
            }
            params
        } else {
            let kp = padded_depth(k);
            let mut packed = vec![0i16; packed_len(k, units).unwrap()];
            pack_rhs(k, units, |kk, j| i16::from(w[j * k + kk]), &mut packed);
            let mut a = vec![0i16; rows * kp];
            let params = quantize_rows(x, k, &mut a, kp, |q, zp| (q - zp) as i16);
            let rhs = PackedRhs {
                data: &packed,
                k,
                n: units,
            };
            let isa = if simd {
                gemm::best_isa()
            } else {
                gemm::Isa::Portable
            };
            gemm::gemm_with(
                isa,
                &a,
                kp,
                rows,
                &rhs,
                Dst::I32 {
                    out: &mut acc,
                    ld: units,
                },
            )
            .unwrap();
            params
        };
        let mut got = vec![0f32; rows * units];
        for (r, &(scale, _)) in params.iter().enumerate() {
            dequantize_row(
                &acc[r * units..(r + 1) * units],
                scale,
                w_scales,
                Some(bias),
                &Clamp::none(),
                &mut got[r * units..(r + 1) * units],
            );
        }
        got
    }

    #[test]
    fn rows_follow_the_definition_on_every_path() {
        let mut rng = crate::kernels::util::test_rng::Rng(0xd1a_57a7_1c00_0001);
        let mut paths = vec![(false, false), (false, true), (true, false)];
        if gemm_u8i8::i32_available() {
            paths.push((true, true));
        }
        for case in 0..40 {
            let (rows, k, units) = (
                rng.range(1, 20) as usize,
                rng.range(1, 300) as usize,
                rng.range(1, 40) as usize,
            );
            let mut x: Vec<f32> = rng.f32s(rows * k).iter().map(|v| v * 8.0).collect();
            if case % 5 == 0 {
                // A row of zeros and a row of one sign.
                x[..k].fill(0.0);
                if rows > 1 {
                    for v in &mut x[k..2 * k] {
                        *v = v.abs() + 0.25;
                    }
                }
            }
            let w: Vec<i8> = (0..units * k).map(|_| rng.range(-127, 127) as i8).collect();
            let w_scales: Vec<f32> = (0..units)
                .map(|_| rng.range(1, 100) as f32 * 1e-3)
                .collect();
            let bias: Vec<f32> = rng.f32s(units);
            let want = reference(&x, k, &w, &w_scales, &bias);
            for &(bytes, simd) in &paths {
                let got = on_path(&x, k, &w, &w_scales, &bias, bytes, simd);
                assert_eq!(got, want, "case {case} bytes {bytes} simd {simd}");
            }
        }
    }

    #[test]
    fn non_finite_rows_give_nan_and_tiny_ranges_give_the_bias() {
        assert!(row_quant(&[1.0, f32::NAN, 2.0]).0.is_nan());
        assert!(row_quant(&[1.0, f32::INFINITY, 2.0]).0.is_nan());
        assert!(row_quant(&[f32::MAX, -f32::MAX, 0.0]).0.is_nan());
        assert_eq!(row_quant(&[0.0, 0.0, 0.0]), (0.0, None));
        assert_eq!(row_quant(&[1e-45, 0.0, 0.0]), (0.0, None));
        let mut a = [7i16; 4];
        let params = quantize_rows(&[1.0, f32::NAN, 2.0], 3, &mut a, 4, |q, zp| (q - zp) as i16);
        assert!(params[0].0.is_nan() && a == [0; 4]);
        let mut y = [0f32; 2];
        dequantize_row(
            &[5, -5],
            0.0,
            &[1.0, 1.0],
            Some(&[0.5, -0.5]),
            &Clamp::none(),
            &mut y,
        );
        assert_eq!(y, [0.5, -0.5]);
        // Extremes map to 0 and 255 exactly: the row's range is the int8 range.
        let mut q = [0u8; 4];
        let params = quantize_rows(&[-1.0, 0.0, 3.0], 3, &mut q, 4, |q, _| q as u8);
        assert_eq!(params, vec![(4.0 / 255.0, 64)]);
        assert_eq!(q, [0, 64, 255, 0]);
    }

    #[test]
    fn the_depth_bound_keeps_every_sum_in_i32() {
        assert!(255i64 * 127 * MAX_DEPTH as i64 <= i64::from(i32::MAX));
        assert!(255i64 * 127 * (MAX_DEPTH as i64 + 1) > i64::from(i32::MAX));
    }
}
