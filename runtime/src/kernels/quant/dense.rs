//! Quantized FULLY_CONNECTED and BATCH_MATMUL on the [`super::gemm`] GEMM.
//!
//! FULLY_CONNECTED (TFLite's quantized fully-connected, per-channel too): `acc[b][u] =
//! sum_k (x[b][k] - x_zp) * (w[u][k] - w_zp) + bias[u]`, requantized by `input_scale *
//! weight_scale_u / output_scale` (see [`filter_quant`] for the precision) with *single*
//! rounding, `(acc * M + 2^(30 - shift)) >> (31 - shift)`: TFLite's FULLY_CONNECTED
//! requantizes through ruy even under the reference resolver (checked against TFLite
//! 2.21, whose convolutions round twice). Plus the output zero point, clamped to the
//! fused activation's range. The
//! input is flattened to `[elements / K, K]`; the weights are packed when prepared.
//!
//! BATCH_MATMUL (`reference_ops::BatchMatMul`, quantized): per batch `lhs x rhs` with
//! both zero points subtracted, requantized by `lhs_scale * rhs_scale / output_scale`
//! (the product in float, as TFLite's `GetQuantizedConvolutionMultipler` computes it),
//! with the adjoint flags transposing an operand while it is widened.

use std::borrow::Cow;

use nnc_formats::nn::FusedActivation;

use super::arith::{Multiplier, QType, activation_range};
use super::conv::{FilterQuant, filter_quant};
use super::gemm::{self, Dst, MR, PackedRhs, Stage, pack_rhs, packed_len, padded_depth};
use super::{activation_type, check_scale, for_row_tiles, output_type, q8_bytes, q8_bytes_mut, qp};
use crate::buffer::AlignedBuf;
use crate::error::{Result, RuntimeError};
use crate::kernels::{Kernel, KernelContext, OpInfo, PreparedWeights, Requantization};

/// i16 values of A per GEMM tile.
const A_TILE_BUDGET: usize = 1 << 17;

struct FullyConnected {
    in_qt: QType,
    in_zp: i32,
    out_qt: QType,
    out_zp: i32,
    range: (i32, i32),
    fq: FilterQuant,
    weight_dims: Option<[usize; 2]>,
}

pub(crate) fn build_fully_connected(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let in_qt = activation_type(info, 0)?;
    let out_qt = output_type(info, 0)?;
    if in_qt != out_qt {
        return Err(info.unsupported("input and output of different 8-bit types"));
    }
    let weight_dims = if info.is_weight(1) {
        match info.dims(1).as_deref() {
            Some(&[u, k]) => Some([u, k]),
            _ => return Err(info.invalid("constant weights must be 2-D with known dimensions")),
        }
    } else {
        None
    };
    if info.present(2) && info.input_type(2)? != nnc_formats::nn::OperandType::TensorInt32 {
        return Err(info.unsupported("quantized FULLY_CONNECTED needs a TENSOR_INT32 bias"));
    }
    let units = info.dims(1).map(|d| d[0]);
    let fq = filter_quant(info, 1, 0, units)?;
    let out = qp(info.output_operand(0)?);
    Ok(Box::new(FullyConnected {
        in_qt,
        in_zp: info.operand(0)?.zero_point,
        out_qt,
        out_zp: out.zp,
        range: activation_range(info.activation(3)?, out, out_qt),
        fq,
        weight_dims,
    }))
}

/// Packs weights `[U, K]` as the GEMM right operand `B[k][u] = w[u][k] - w_zp`.
fn pack_weights(
    w: &[u8],
    [u, k]: [usize; 2],
    fq: &FilterQuant,
) -> Result<zeroize::Zeroizing<Vec<i16>>> {
    if w.len() != u * k {
        return Err(RuntimeError::kernel("weights do not match their shape"));
    }
    let len = packed_len(k, u).ok_or_else(|| RuntimeError::kernel("weights too large"))?;
    let mut packed = zeroize::Zeroizing::new(crate::kernels::util::filled(len, 0i16)?);
    pack_rhs(
        k,
        u,
        |kk, j| (fq.qt.load(w[j * k + kk]) - fq.zp) as i16,
        &mut packed,
    );
    Ok(packed)
}

impl Kernel for FullyConnected {
    fn prepare_weights(&self, weights: &[Option<&[u8]>]) -> Result<PreparedWeights> {
        let mut prepared = PreparedWeights::empty();
        if let (Some(Some(bytes)), Some(dims)) = (weights.get(1), self.weight_dims) {
            let packed = pack_weights(bytes, dims, &self.fq)?;
            prepared.push(AlignedBuf::from_bytes(bytemuck::cast_slice(&packed))?);
        }
        prepared.add_raw(weights, &[1])?;
        Ok(prepared)
    }

    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let [units, k] = match (self.weight_dims, ctx.optional_input(1)) {
            (Some(d), _) => d,
            (None, Some(w)) => match w.shape {
                [u, k] => [*u, *k],
                other => {
                    return Err(RuntimeError::kernel(format!(
                        "weights must be 2-D, got {other:?}"
                    )));
                }
            },
            (None, None) => return Err(RuntimeError::kernel("weights are missing")),
        };
        if k == 0 || units == 0 || x.len() % k != 0 {
            return Err(RuntimeError::kernel(format!(
                "input of {} values is not a whole number of rows of {k}",
                x.len()
            )));
        }
        let packed: Cow<[i16]> = if self.weight_dims.is_some() {
            let buf = ctx
                .weights
                .buffer(0)
                .ok_or_else(|| RuntimeError::kernel("prepared weights are missing"))?;
            Cow::Borrowed(
                bytemuck::try_cast_slice(buf.as_bytes())
                    .map_err(|e| RuntimeError::Internal(format!("prepared weights: {e:?}")))?,
            )
        } else {
            let w = ctx.input(1)?;
            Cow::Owned(pack_weights(q8_bytes(&w, "weights")?, [units, k], &self.fq)?.to_vec())
        };
        let bias = match ctx.optional_input(2) {
            Some(b) => Some(b.i32()?),
            None => None,
        };
        if self.fq.multipliers.len() != 1 && self.fq.multipliers.len() != units {
            return Err(RuntimeError::kernel(
                "per-channel scales do not match the weights",
            ));
        }
        let stage = self.fq.stage(0, units, bias, self.out_zp, self.range)?;
        // TFLite's FULLY_CONNECTED requantizes through ruy: single rounding.
        let stage = if self.fq.is_float() {
            stage
        } else {
            stage.single_rounding()?
        };
        let batch = x.len() / k;
        let kp = padded_depth(k);
        let threads = ctx.threads;
        let (in_qt, in_zp) = (self.in_qt, self.in_zp);
        let signed = self.out_qt == QType::I8;
        let out = q8_bytes_mut(ctx.output(0)?, "output")?;
        if out.len() != batch * units {
            return Err(RuntimeError::kernel(format!(
                "output holds {} values, expected {batch} x {units}",
                out.len()
            )));
        }
        let rhs = PackedRhs {
            data: &packed,
            k,
            n: units,
        };
        let tile = ((A_TILE_BUDGET / kp).max(MR) / MR * MR).min(batch);
        for_row_tiles(threads, out, units, tile, tile * kp, |r0, rows, a| {
            let t = rows.len() / units;
            let a = &mut a[..t * kp];
            for (r, dst) in a.chunks_exact_mut(kp).enumerate() {
                for (d, &b) in dst.iter_mut().zip(&x[(r0 + r) * k..(r0 + r + 1) * k]) {
                    *d = (in_qt.load(b) - in_zp) as i16;
                }
                dst[k..].fill(0);
            }
            gemm::gemm(
                a,
                kp,
                t,
                &rhs,
                Dst::Q8 {
                    out: rows,
                    ld: units,
                    stage: &stage,
                    signed,
                },
            )
        })
    }
}

struct BatchMatmul {
    qt: QType,
    lhs_zp: i32,
    rhs_zp: i32,
    out_zp: i32,
    multiplier: Multiplier,
    float_scale: Option<f32>,
    adj_lhs: bool,
    adj_rhs: bool,
}

pub(crate) fn build_batch_matmul(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let qt = activation_type(info, 0)?;
    if activation_type(info, 1)? != qt || output_type(info, 0)? != qt {
        return Err(info.unsupported("operands of different 8-bit types"));
    }
    let (lhs, rhs, out) = (info.operand(0)?, info.operand(1)?, info.output_operand(0)?);
    check_scale(info, "lhs", lhs.scale)?;
    check_scale(info, "rhs", rhs.scale)?;
    check_scale(info, "output", out.scale)?;
    // GetQuantizedConvolutionMultipler: the float product, divided in double.
    let multiplier = Multiplier::new(f64::from(lhs.scale * rhs.scale) / f64::from(out.scale))
        .map_err(|e| info.invalid(e.to_string()))?;
    let float_scale =
        (info.requantization == Requantization::Float).then(|| lhs.scale * rhs.scale / out.scale);
    Ok(Box::new(BatchMatmul {
        qt,
        lhs_zp: lhs.zero_point,
        rhs_zp: rhs.zero_point,
        out_zp: out.zero_point,
        multiplier,
        float_scale,
        adj_lhs: info.bool(2, "adj_lhs")?,
        adj_rhs: info.bool(3, "adj_rhs")?,
    }))
}

impl Kernel for BatchMatmul {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let lhs_t = ctx.input(0)?;
        let rhs_t = ctx.input(1)?;
        let lhs = q8_bytes(&lhs_t, "lhs")?;
        let rhs = q8_bytes(&rhs_t, "rhs")?;
        let (ls, rs) = (lhs_t.shape, rhs_t.shape);
        let r = ls.len();
        if r < 2 || rs.len() != r || ls[..r - 2] != rs[..r - 2] {
            return Err(RuntimeError::kernel(format!(
                "lhs {ls:?} and rhs {rs:?} do not batch-multiply"
            )));
        }
        let (m, k) = if self.adj_lhs {
            (ls[r - 1], ls[r - 2])
        } else {
            (ls[r - 2], ls[r - 1])
        };
        let (k2, n) = if self.adj_rhs {
            (rs[r - 1], rs[r - 2])
        } else {
            (rs[r - 2], rs[r - 1])
        };
        if k != k2 {
            return Err(RuntimeError::kernel(format!(
                "inner dimensions {k} and {k2} differ"
            )));
        }
        let batches: usize = ls[..r - 2].iter().product();
        let stage = Stage::new(
            n,
            None,
            &[self.multiplier],
            self.out_zp,
            activation_range(
                FusedActivation::None,
                super::arith::Qp { scale: 1.0, zp: 0 },
                self.qt,
            ),
        )?;
        let stage = match self.float_scale {
            Some(scale) => stage.float_scales(&[scale])?,
            None => stage,
        };
        let signed = self.qt == QType::I8;
        let out = q8_bytes_mut(ctx.output(0)?, "output")?;
        if out.len() != batches * m * n
            || lhs.len() != batches * m * k
            || rhs.len() != batches * k * n
        {
            return Err(RuntimeError::kernel(
                "operand sizes do not match their shapes",
            ));
        }
        let kp = padded_depth(k);
        let mut a = crate::kernels::util::filled(m * kp, 0i16)?;
        let len = packed_len(k, n).ok_or_else(|| RuntimeError::kernel("rhs too large"))?;
        let mut packed = crate::kernels::util::filled(len, 0i16)?;
        let qt = self.qt;
        for bt in 0..batches {
            let l = &lhs[bt * m * k..(bt + 1) * m * k];
            let rr = &rhs[bt * k * n..(bt + 1) * k * n];
            for i in 0..m {
                for kk in 0..k {
                    let v = if self.adj_lhs {
                        l[kk * m + i]
                    } else {
                        l[i * k + kk]
                    };
                    a[i * kp + kk] = (qt.load(v) - self.lhs_zp) as i16;
                }
            }
            let (adj, zp) = (self.adj_rhs, self.rhs_zp);
            pack_rhs(
                k,
                n,
                |kk, j| {
                    let v = if adj { rr[j * k + kk] } else { rr[kk * n + j] };
                    (qt.load(v) - zp) as i16
                },
                &mut packed,
            );
            let rhs_packed = PackedRhs {
                data: &packed,
                k,
                n,
            };
            gemm::gemm(
                &a,
                kp,
                m,
                &rhs_packed,
                Dst::Q8 {
                    out: &mut out[bt * m * n..(bt + 1) * m * n],
                    ld: n,
                    stage: &stage,
                    signed,
                },
            )?;
        }
        Ok(())
    }
}
