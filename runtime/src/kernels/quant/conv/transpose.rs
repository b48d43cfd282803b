//! TRANSPOSE_CONV_2D: a GEMM of the input with the repacked filter, scatter-added into
//! an i32 accumulator of the output, then requantized.

use super::*;

use crate::kernels::window::col2im;
pub(super) use crate::kernels::window::{TransposeParams, decode_transpose};

pub(super) struct TransposeConv {
    pub(super) params: TransposeParams,
    pub(super) oq: OutputQuant,
    pub(super) fq: FilterQuant,
    pub(super) filter_dims: Option<[usize; 4]>,
}

/// Packs a filter `[O, KH, KW, C]` as the GEMM right operand `[C, KH * KW * O]`
/// (`B[c][(t, o)] = w[o][t][c] - w_zp`).
fn pack_transpose_filter(
    filter: &[u8],
    [o, kh, kw, c]: [usize; 4],
    fq: &FilterQuant,
) -> Result<zeroize::Zeroizing<Vec<i16>>> {
    if filter.len() != o * kh * kw * c {
        return Err(RuntimeError::kernel("filter does not match its shape"));
    }
    let cols = kh * kw * o;
    let len = packed_len(c, cols).ok_or_else(|| RuntimeError::kernel("filter too large"))?;
    let mut packed = zeroize::Zeroizing::new(crate::kernels::util::filled(len, 0i16)?);
    pack_rhs(
        c,
        cols,
        |cc, j| {
            let (t, oo) = (j / o, j % o);
            widen(fq.qt, fq.zp, filter[(oo * kh * kw + t) * c + cc])
        },
        &mut packed,
    );
    Ok(packed)
}

impl Kernel for TransposeConv {
    fn prepare_weights(&self, weights: &[Option<&[u8]>]) -> Result<PreparedWeights> {
        let mut prepared = PreparedWeights::empty();
        if let (Some(Some(bytes)), Some(dims)) = (weights.get(1), self.filter_dims) {
            prepared.push(i16_buffer(&pack_transpose_filter(bytes, dims, &self.fq)?)?);
        }
        prepared.add_raw(weights, &[1])?;
        Ok(prepared)
    }

    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let p = &self.params;
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let in_shape = rank4(input.shape, "input")?;
        let fdims = run_filter_dims(self.filter_dims, ctx, 1)?;
        let packed: Cow<[i16]> = if self.filter_dims.is_some() {
            Cow::Borrowed(prepared_i16(ctx.weights, 0)?)
        } else {
            let f = ctx.input(1)?;
            Cow::Owned(pack_transpose_filter(q8_bytes(&f, "filter")?, fdims, &self.fq)?.to_vec())
        };
        let bias = bias_values(ctx, fdims[0])?;
        let stage = self
            .fq
            .stage(0, fdims[0], Some(bias), self.oq.out_zp, self.oq.range)?;
        let oq = &self.oq;
        let out_t = ctx.output(0)?;
        let out_shape = rank4(out_t.shape, "output")?;
        let out = q8_bytes_mut(out_t, "output")?;
        with_nhwc(
            p.nchw,
            x,
            in_shape,
            out,
            out_shape,
            |x, [n, ih, iw, ic], out, [on, oh, ow, oc]| {
                let [fo, kh, kw, fc] = fdims;
                if fo != oc || fc != ic || on != n {
                    return Err(RuntimeError::kernel(format!(
                        "filter {fdims:?}, input channels {ic} and output {:?} do not fit",
                        [on, oh, ow, oc]
                    )));
                }
                if x.len() != n * ih * iw * ic || out.len() != n * oh * ow * oc {
                    return Err(RuntimeError::kernel("input or output has the wrong size"));
                }
                let g = p.geometry([n, ih, iw, ic], (kh, kw), [on, oh, ow, oc])?;
                let cols = kh * kw * oc;
                let kp = padded_depth(ic);
                let mut acc = crate::kernels::util::filled(n * oh * ow * oc, 0i32)?;
                let pixels = n * ih * iw;
                let tile = (A_TILE_BUDGET / cols.max(kp).max(1)).clamp(1, pixels.max(1));
                let mut a = crate::kernels::util::filled(tile * kp, 0i16)?;
                let mut col = crate::kernels::util::filled(tile * cols, 0i32)?;
                let rhs = PackedRhs {
                    data: &packed,
                    k: ic,
                    n: cols,
                };
                let mut p0 = 0;
                while p0 < pixels {
                    let p1 = (p0 + tile).min(pixels);
                    let t = p1 - p0;
                    for (r, dst) in a.chunks_exact_mut(kp).take(t).enumerate() {
                        let src = &x[(p0 + r) * ic..(p0 + r + 1) * ic];
                        for (d, &v) in dst.iter_mut().zip(src) {
                            *d = widen(oq.in_qt, oq.in_zp, v);
                        }
                        dst[ic..].fill(0);
                    }
                    gemm::gemm(
                        &a[..t * kp],
                        kp,
                        t,
                        &rhs,
                        Dst::I32 {
                            out: &mut col[..t * cols],
                            ld: cols,
                        },
                    )?;
                    col2im(&g, &col[..t * cols], p0, cols, &mut acc, |dst, src| {
                        for (d, s) in dst.iter_mut().zip(src) {
                            *d = d.wrapping_add(*s);
                        }
                    })?;
                    p0 = p1;
                }
                let isa = gemm::best_isa();
                let signed = oq.out_qt == QType::I8;
                for (a_row, o_row) in acc.chunks_exact(oc).zip(out.chunks_exact_mut(oc)) {
                    gemm::requantize_row(isa, a_row, &stage, o_row, signed);
                }
                Ok(())
            },
        )
    }
}
