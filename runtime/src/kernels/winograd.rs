//! Winograd F(m x m, 3x3) for float 3x3 stride-1 convolutions (NHWC, one group), in two
//! tilings: F(4x4, 3x3) and F(2x2, 3x3).
//!
//! Each m x m block of output pixels (a tile) is computed from the (m + 2)^2 input patch
//! under it as `Y = A^T [(G g G^T) . (B^T d B)] A` (Lavin and Gray, "Fast Algorithms for
//! Convolutional Neural Networks", 2016): F(4x4, 3x3) with the interpolation points 0,
//! +-1, +-2 and infinity takes 36 multiplications per tile and channel pair instead of
//! 144, F(2x2, 3x3) with 0, +-1 and infinity 16 instead of 36. Over a block of tiles,
//! the elementwise products summed over input channels are (m + 2)^2 independent matrix
//! products `M_p = V_p U_p`, (tiles x Cin) by (Cin x Cout), which run on the packed
//! micro-kernels of [`super::gemm_f32`].
//!
//! - Filters are transformed (`U = G g G^T`, in f64, rounded once) and packed when the
//!   weights are prepared: 4x the memory of the filter for F(4x4), 16/9 for F(2x2).
//!   That, and tiles that overhang small outputs, is why [`choose`] takes F(4x4) only for
//!   outputs of at least 8x8 and filters of at most [`MAX_TRANSFORMED_FILTER`] bytes,
//!   and F(2x2) for the smaller outputs of deep layers (ResNet's 7x7 of 512 channels),
//!   where F(4x4)'s four tiles would stream 4x the filter for 49 pixels.
//! - Input and output transforms run over channel vectors (16 lanes on AVX-512, 8 on
//!   AVX2) with zero padding read as zeros, and the output transform adds the bias and
//!   applies the fused activation as it stores.
//! - Accuracy: the products are summed over transformed values, which are larger than
//!   the inputs and filters (F(4x4)'s coefficients reach 8 and 1/24), so F(4x4)'s errors
//!   are about ten times a direct sum's: on a layer of random values scaled like a
//!   trained one's they stay inside NNAPI's float32 tolerance (the test below), but not
//!   on every layer (a 3x3 layer of 64 unnormalized channels in `tests/conv.rs` exceeds
//!   it by 5%). That is why the path runs only under [`super::FloatMath::Fast`], or for
//!   models that allow relaxed computation, where NNAPI's float16 tolerance is hundreds
//!   of times wider.

use crate::buffer::AlignedBuf;
use crate::error::{Result, RuntimeError};
use crate::kernels::Clamp;
use crate::kernels::gemm_f32::{self, Epilogue};
use crate::kernels::window::Geometry;

/// Which Winograd algorithm a convolution runs (chosen once, when its kernel is built).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tiling {
    /// F(2x2, 3x3): 4x4 input patches, 16 products per tile and channel pair.
    F2x2,
    /// F(4x4, 3x3): 6x6 input patches, 36 products per tile and channel pair.
    F4x4,
}

impl Tiling {
    /// Output pixels per tile side.
    fn tile(self) -> usize {
        match self {
            Tiling::F2x2 => 2,
            Tiling::F4x4 => 4,
        }
    }

    /// Elementwise products per tile: (tile + 2)^2.
    fn positions(self) -> usize {
        (self.tile() + 2) * (self.tile() + 2)
    }

    /// Transformed filter bytes for `cin x cout` channels (before panel padding).
    fn filter_bytes(self, cin: usize, cout: usize) -> Option<usize> {
        self.positions()
            .checked_mul(cin)?
            .checked_mul(cout)?
            .checked_mul(4)
    }

    /// `G` (alpha x 3), whose rows interpolate the filter at the tiling's points.
    fn g(self) -> &'static [[f64; 3]] {
        match self {
            Tiling::F2x2 => &[
                [1.0, 0.0, 0.0],
                [0.5, 0.5, 0.5],
                [0.5, -0.5, 0.5],
                [0.0, 0.0, 1.0],
            ],
            Tiling::F4x4 => &[
                [1.0 / 4.0, 0.0, 0.0],
                [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
                [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
                [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
                [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
                [0.0, 0.0, 1.0],
            ],
        }
    }
}

/// Largest F(4x4) transformed filter (bytes) this path prepares: 256 x 256 channels
/// (9.4 MB). Beyond it the 4x larger filter costs more memory than the layer gains.
const MAX_TRANSFORMED_FILTER: usize = 10 << 20;

/// Largest F(2x2) transformed filter (bytes): 512 x 512 channels (16.8 MB, 16/9 of the
/// filter it replaces).
const MAX_TRANSFORMED_FILTER_2X2: usize = 17 << 20;

/// Bytes of transformed input and products a block of tiles may take (per thread): the
/// block's products stay in L2 between the matrix products and the output transform.
const BLOCK_BYTES: usize = 2 << 20;

/// The shape of a convolution as [`choose`] judges it.
pub(crate) struct Candidate {
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub dilation: (usize, usize),
    pub groups: usize,
    pub in_channels: usize,
    pub out_channels: usize,
    /// Output height and width, when known when the model is prepared.
    pub output: Option<(usize, usize)>,
    /// Whether the kernel options allow it ([`super::FloatMath::Fast`]).
    pub fast_math: bool,
}

/// Which tiling a convolution takes, if any (decided once, when the kernel is built):
/// only under [`super::FloatMath::Fast`]; F(4x4) from 8x8 outputs up (2.25 products per
/// output against F(2x2)'s 4; ResNet18 4% faster than with F(2x2) throughout), F(2x2)
/// for smaller outputs and for filters too large for F(4x4).
///
/// Why F(2x2) is not taken under `Strict` although on random layers its error is below
/// a direct sum's (it sums over input channels only, with coefficients of 1 and 1/2):
/// its output pixels are differences of products that share an input pixel, so one
/// large input next to a small filter tap leaves an error proportional to that input,
/// where the direct sum's error is bounded by the sum of the products it adds.
pub(crate) fn choose(c: &Candidate) -> Option<Tiling> {
    let shape_fits = c.fast_math
        && gemm_f32::available()
        && c.kernel == (3, 3)
        && c.stride == (1, 1)
        && c.dilation == (1, 1)
        && c.groups == 1
        && c.in_channels >= 16
        && c.out_channels >= 16;
    let (h, w) = c.output.filter(|_| shape_fits)?;
    let fits = |t: Tiling, cap: usize| {
        t.filter_bytes(c.in_channels, c.out_channels)
            .is_some_and(|b| b <= cap)
    };
    if h >= 8 && w >= 8 && fits(Tiling::F4x4, MAX_TRANSFORMED_FILTER) {
        Some(Tiling::F4x4)
    } else if h >= 4 && w >= 4 && fits(Tiling::F2x2, MAX_TRANSFORMED_FILTER_2X2) {
        Some(Tiling::F2x2)
    } else {
        None
    }
}

/// Values of the prepared (transformed and packed) filter.
fn prepared_len(tiling: Tiling, cin: usize, cout: usize) -> Option<usize> {
    gemm_f32::packed_len(cin, cout)?.checked_mul(tiling.positions())
}

/// Transforms a filter `[O, 3, 3, C]` into the matrices `U_p` (C x O), each packed for
/// [`gemm_f32::gemm`], concatenated, written straight into the aligned storage the
/// kernel reads (no second copy of a buffer up to 4x the filter's size).
pub(crate) fn prepare_filter(
    filter: &[f32],
    [o, kh, kw, c]: [usize; 4],
    tiling: Tiling,
) -> Result<AlignedBuf> {
    if (kh, kw) != (3, 3) || o.checked_mul(9).and_then(|v| v.checked_mul(c)) != Some(filter.len()) {
        return Err(RuntimeError::kernel(format!(
            "Winograd filter: {} values do not make a [{o}, {kh}, {kw}, {c}] 3x3 filter",
            filter.len()
        )));
    }
    let per = gemm_f32::packed_len(c, o).ok_or_else(|| RuntimeError::kernel("filter too large"))?;
    let total =
        prepared_len(tiling, c, o).ok_or_else(|| RuntimeError::kernel("filter too large"))?;
    // Each U_p[c][o] goes straight to its place in the packed layout of
    // [`gemm_f32::pack`] (panels of NR output channels, one row of NR per input
    // channel); columns past `o` stay zero.
    let bytes = total
        .checked_mul(4)
        .ok_or_else(|| RuntimeError::kernel("filter too large"))?;
    let mut storage = AlignedBuf::zeroed(bytes)?;
    let packed = storage.as_f32_mut();
    let nr = gemm_f32::NR;
    let mut u = vec![0.0f64; tiling.positions()];
    for oc in 0..o {
        let (panel, lane) = (oc / nr, oc % nr);
        for ic in 0..c {
            let g: [[f64; 3]; 3] = std::array::from_fn(|y| {
                std::array::from_fn(|x| filter[((oc * 3 + y) * 3 + x) * c + ic] as f64)
            });
            transform_filter(tiling.g(), &g, &mut u);
            for (p, v) in u.iter().enumerate() {
                packed[p * per + (panel * c + ic) * nr + lane] = *v as f32;
            }
        }
    }
    Ok(storage)
}

/// `G g G^T` for one 3x3 filter slice, row-major into `u` (alpha x alpha).
fn transform_filter(gm: &[[f64; 3]], g: &[[f64; 3]; 3], u: &mut [f64]) {
    let alpha = gm.len();
    for i in 0..alpha {
        // Row i of G g.
        let gg: [f64; 3] = std::array::from_fn(|j| (0..3).map(|k| gm[i][k] * g[k][j]).sum());
        for j in 0..alpha {
            u[i * alpha + j] = (0..3).map(|k| gg[k] * gm[j][k]).sum();
        }
    }
}

/// `out = clamp(conv(x, filter) + bias)` with the filter prepared by [`prepare_filter`]
/// for `tiling`; tile rows split over the current rayon pool when `threads > 1`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv(
    g: &Geometry,
    tiling: Tiling,
    x: &[f32],
    prepared: &[f32],
    bias: &[f32],
    clamp: Clamp,
    out: &mut [f32],
    threads: usize,
) -> Result<()> {
    match tiling {
        Tiling::F2x2 => conv_tiled::<2, 4>(g, x, prepared, bias, clamp, out, threads),
        Tiling::F4x4 => conv_tiled::<4, 6>(g, x, prepared, bias, clamp, out, threads),
    }
}

/// [`conv`] for tiles of `T x T` outputs from `A x A` input patches (`A = T + 2`).
fn conv_tiled<const T: usize, const A: usize>(
    g: &Geometry,
    x: &[f32],
    prepared: &[f32],
    bias: &[f32],
    clamp: Clamp,
    out: &mut [f32],
    threads: usize,
) -> Result<()> {
    const { assert!(A == T + 2 && (T == 2 || T == 4)) };
    let tiling = if T == 2 { Tiling::F2x2 } else { Tiling::F4x4 };
    let positions = A * A;
    let bad = |what: &str| RuntimeError::Internal(format!("Winograd convolution: {what}"));
    if (g.kh, g.kw, g.sh, g.sw, g.dh, g.dw) != (3, 3, 1, 1, 1, 1) {
        return Err(bad("not a 3x3 stride-1 convolution"));
    }
    let (cin, cout) = (g.ic, g.oc);
    let per = gemm_f32::packed_len(cin, cout).ok_or_else(|| bad("filter too large"))?;
    if prepared_len(tiling, cin, cout) != Some(prepared.len()) {
        return Err(bad("prepared filter has the wrong size"));
    }
    if bias.len() != cout
        || x.len() != g.n * g.ih * g.iw * cin
        || out.len() != g.n * g.oh * g.ow * cout
    {
        return Err(bad("operand sizes do not match the geometry"));
    }
    if !gemm_f32::available() {
        return Err(bad("AVX2 and FMA requested on a processor without them"));
    }
    if out.is_empty() {
        return Ok(());
    }
    let tiles_w = g.ow.div_ceil(T);
    let tile_rows = g.oh.div_ceil(T);
    let per_tile = positions * (cin + cout) * 4;
    let cap = (BLOCK_BYTES / per_tile / tiles_w).clamp(1, tile_rows);
    let rows_per_block = balanced_block(tile_rows, cap, threads);
    let zeros = vec![0.0f32; cout];
    let ctx = Ctx::<T, A> {
        g,
        prepared,
        per,
        zeros: &zeros,
        bias,
        clamp,
        tiles_w,
    };
    let image_in = g.ih * g.iw * cin;
    let image_out = g.oh * g.ow * cout;
    let block_out = rows_per_block * T * g.ow * cout;
    let scratch_len = rows_per_block * tiles_w * positions * (cin + cout);
    for (b, out_img) in out.chunks_exact_mut(image_out).enumerate() {
        let x_img = &x[b * image_in..(b + 1) * image_in];
        let block = |i: usize, out_rows: &mut [f32]| {
            super::util::with_scratch(scratch_len, |s: &mut [f32]| {
                ctx.block(x_img, i * rows_per_block, out_rows, s)
            })
        };
        if threads > 1 && tile_rows > rows_per_block {
            use rayon::prelude::*;
            out_img
                .par_chunks_mut(block_out)
                .enumerate()
                .try_for_each(|(i, o)| block(i, o))?;
        } else {
            for (i, o) in out_img.chunks_mut(block_out).enumerate() {
                block(i, o)?;
            }
        }
    }
    Ok(())
}
/// Tile rows per block: at most `cap`, and with several threads the largest size whose
/// blocks spread most evenly over them (ResNet's 14 tile rows on 2 threads: 7 blocks of
/// 1 row each per thread, not 4 + 4 against 4 + 2).
fn balanced_block(rows: usize, cap: usize, threads: usize) -> usize {
    if threads <= 1 {
        return cap;
    }
    let load = |per: usize| rows.div_ceil(per).div_ceil(threads) * per;
    (1..=cap)
        .min_by_key(|&per| (load(per), std::cmp::Reverse(per)))
        .unwrap_or(1)
}

struct Ctx<'a, const T: usize, const A: usize> {
    g: &'a Geometry,
    prepared: &'a [f32],
    /// Values of one packed `U_p`.
    per: usize,
    zeros: &'a [f32],
    bias: &'a [f32],
    clamp: Clamp,
    tiles_w: usize,
}

impl<const T: usize, const A: usize> Ctx<'_, T, A> {
    /// One block: tile rows `row0..` whose output rows are `out_rows` (whole rows of
    /// the image, the last block's possibly fewer).
    fn block(
        &self,
        x: &[f32],
        row0: usize,
        out_rows: &mut [f32],
        scratch: &mut [f32],
    ) -> Result<()> {
        let g = self.g;
        let (cin, cout) = (g.ic, g.oc);
        let pixel_rows = out_rows.len() / (g.ow * cout);
        let rows = pixel_rows.div_ceil(T);
        let tiles = rows * self.tiles_w;
        let (v, rest) = scratch.split_at_mut((A * A) * tiles * cin);
        let m = &mut rest[..(A * A) * tiles * cout];
        let block = Block {
            row0,
            tiles,
            pixel_rows,
        };
        self.transform_inputs(x, &block, v);
        let epilogue = Epilogue {
            bias: self.zeros,
            clamp: Clamp::none(),
        };
        for p in 0..(A * A) {
            gemm_f32::gemm(
                &v[p * tiles * cin..(p + 1) * tiles * cin],
                cin,
                tiles,
                cin,
                &self.prepared[p * self.per..(p + 1) * self.per],
                cout,
                &mut m[p * tiles * cout..(p + 1) * tiles * cout],
                cout,
                epilogue,
                1,
            )?;
        }
        self.transform_outputs(m, &block, out_rows);
        Ok(())
    }

    /// [`Ctx::inputs`] compiled for this processor's widest float vectors: 16 lanes
    /// under AVX-512, 8 under AVX2+FMA (the processors [`applies`] admits; the last
    /// call is a fallback for the compiler's baseline).
    fn transform_inputs(&self, x: &[f32], block: &Block, v: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            if super::isa::float_avx512() {
                // SAFETY: AVX-512F, AVX2 and FMA (`float_avx512`) were just checked, and
                // that is all `inputs_avx512` needs.
                return unsafe { self.inputs_avx512(x, block, v) };
            }
            if super::isa::float_avx2_fma() {
                // SAFETY: AVX2 and FMA (`float_avx2_fma`) were just checked, and that is
                // all `inputs_avx2` needs.
                return unsafe { self.inputs_avx2(x, block, v) };
            }
        }
        self.inputs::<8>(x, block, v)
    }

    /// [`Ctx::outputs`] compiled as [`Ctx::transform_inputs`] is.
    fn transform_outputs(&self, m: &[f32], block: &Block, out_rows: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            if super::isa::float_avx512() {
                // SAFETY: AVX-512F, AVX2 and FMA (`float_avx512`) were just checked, and
                // that is all `outputs_avx512` needs.
                return unsafe { self.outputs_avx512(m, block, out_rows) };
            }
            if super::isa::float_avx2_fma() {
                // SAFETY: AVX2 and FMA (`float_avx2_fma`) were just checked, and that is
                // all `outputs_avx2` needs.
                return unsafe { self.outputs_avx2(m, block, out_rows) };
            }
        }
        self.outputs::<8>(m, block, out_rows)
    }

    /// [`Self::inputs`] compiled for AVX-512 (inlined here).
    ///
    /// # Safety
    /// The CPU supports AVX-512F, AVX2 and FMA (`isa::float_avx512`); there is no other
    /// requirement: the body is safe code.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn inputs_avx512(&self, x: &[f32], block: &Block, v: &mut [f32]) {
        self.inputs::<16>(x, block, v)
    }

    /// [`Self::inputs`] compiled for AVX2 and FMA (inlined here).
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA (`isa::float_avx2_fma`); there is no other
    /// requirement: the body is safe code.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn inputs_avx2(&self, x: &[f32], block: &Block, v: &mut [f32]) {
        self.inputs::<8>(x, block, v)
    }

    /// [`Self::outputs`] compiled for AVX-512 (inlined here).
    ///
    /// # Safety
    /// The CPU supports AVX-512F, AVX2 and FMA (`isa::float_avx512`); there is no other
    /// requirement: the body is safe code.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn outputs_avx512(&self, m: &[f32], block: &Block, out_rows: &mut [f32]) {
        self.outputs::<16>(m, block, out_rows)
    }

    /// [`Self::outputs`] compiled for AVX2 and FMA (inlined here).
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA (`isa::float_avx2_fma`); there is no other
    /// requirement: the body is safe code.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn outputs_avx2(&self, m: &[f32], block: &Block, out_rows: &mut [f32]) {
        self.outputs::<8>(m, block, out_rows)
    }

    /// Transforms the input patch of every tile of the block into `v[p][t][..cin]`.
    #[inline(always)]
    fn inputs<const W: usize>(&self, x: &[f32], block: &Block, v: &mut [f32]) {
        for t in 0..block.tiles {
            let at = TileAt {
                index: t,
                count: block.tiles,
                oy: (block.row0 + t / self.tiles_w) * T,
                ox: (t % self.tiles_w) * T,
            };
            input_tile_lanes::<W, A>(self.g, x, &at, v);
        }
    }

    /// Transforms every tile's products back to its (up to) 4x4 output pixels in
    /// `out_rows`, with the bias and activation.
    #[inline(always)]
    fn outputs<const W: usize>(&self, m: &[f32], block: &Block, out_rows: &mut [f32]) {
        for t in 0..block.tiles {
            // Output rows count from the block's first.
            let at = TileAt {
                index: t,
                count: block.tiles,
                oy: (t / self.tiles_w) * T,
                ox: (t % self.tiles_w) * T,
            };
            output_tile_lanes::<W, T, A>(self, m, &at, block.pixel_rows, out_rows);
        }
    }
}

/// Tile `index` of a block of `count`, whose top-left output pixel is (oy, ox).
struct TileAt {
    index: usize,
    count: usize,
    oy: usize,
    ox: usize,
}

/// One block of tiles: tile rows from `row0`, `tiles` tiles, `pixel_rows` output rows.
struct Block {
    row0: usize,
    tiles: usize,
    pixel_rows: usize,
}

/// One tile's input transform over channel vectors of `W` lanes, then one channel at a
/// time.
#[inline(always)]
fn input_tile_lanes<const W: usize, const A: usize>(
    g: &Geometry,
    x: &[f32],
    at: &TileAt,
    v: &mut [f32],
) {
    // Input rows and columns of the patch (None: padding).
    let patch = Patch {
        iy: std::array::from_fn(|r| (at.oy + r).checked_sub(g.pad_top).filter(|&y| y < g.ih)),
        ix: std::array::from_fn(|c| (at.ox + c).checked_sub(g.pad_left).filter(|&x| x < g.iw)),
    };
    let mut c0 = 0;
    while c0 + W <= g.ic {
        input_channels::<W, A>(g, x, &patch, at, c0, v);
        c0 += W;
    }
    while c0 < g.ic {
        input_channels::<1, A>(g, x, &patch, at, c0, v);
        c0 += 1;
    }
}

/// The input pixels under a tile: rows `iy`, columns `ix` (None: padding).
struct Patch<const A: usize> {
    iy: [Option<usize>; A],
    ix: [Option<usize>; A],
}

/// Input channels `c0..c0 + W` of one tile into `v[p][tile][c0..]`.
#[inline(always)]
fn input_channels<const W: usize, const A: usize>(
    g: &Geometry,
    x: &[f32],
    patch: &Patch<A>,
    at: &TileAt,
    c0: usize,
    v: &mut [f32],
) {
    // B^T d column by column, each column loaded as it is transformed (padding reads as
    // zeros), then (B^T d) B row by row. The arrays are built element by element, so
    // none is zero-filled first (a 2.3 KB memset per tile and channel vector otherwise).
    let column = |c: usize| -> [[f32; W]; A] {
        std::array::from_fn(|r| match (patch.iy[r], patch.ix[c]) {
            (Some(y), Some(xx)) => {
                let i = (y * g.iw + xx) * g.ic + c0;
                let mut lanes = [0.0f32; W];
                lanes.copy_from_slice(&x[i..i + W]);
                lanes
            }
            _ => [0.0f32; W],
        })
    };
    let bd: [[[f32; W]; A]; A] = std::array::from_fn(|c| input_transform::<W, A>(column(c)));
    let stride = at.count * g.ic;
    #[allow(clippy::needless_range_loop)] // r indexes bd's inner arrays (its rows)
    for r in 0..A {
        let row = input_transform::<W, A>(std::array::from_fn(|c| bd[c][r]));
        for (c, vals) in row.iter().enumerate() {
            let i = (r * A + c) * stride + at.index * g.ic + c0;
            v[i..i + W].copy_from_slice(vals);
        }
    }
}

/// `B^T d` for one column of `A` lane vectors (`A` = 4 or 6: the tiling's).
#[inline(always)]
fn input_transform<const W: usize, const A: usize>(d: [[f32; W]; A]) -> [[f32; W]; A] {
    let mut out = [[0.0f32; W]; A];
    for l in 0..W {
        let d = |k: usize| d[k][l];
        if A == 4 {
            // F(2x2): points 0, 1, -1, infinity.
            out[0][l] = d(0) - d(2);
            out[1][l] = d(1) + d(2);
            out[2][l] = d(2) - d(1);
            out[3][l] = d(1) - d(3);
        } else {
            // F(4x4): points 0, 1, -1, 2, -2, infinity.
            let [d0, d1, d2, d3, d4, d5] = [d(0), d(1), d(2), d(3), d(4), d(5)];
            out[0][l] = 4.0 * d0 - 5.0 * d2 + d4;
            out[1][l] = -4.0 * (d1 + d2) + d3 + d4;
            out[2][l] = 4.0 * (d1 - d2) - d3 + d4;
            out[3][l] = 2.0 * (d3 - d1) - d2 + d4;
            out[4][l] = 2.0 * (d1 - d3) - d2 + d4;
            out[5][l] = 4.0 * d1 - 5.0 * d3 + d5;
        }
    }
    out
}

/// `A^T m` for one column of `A` lane vectors: `T` outputs.
#[inline(always)]
fn output_transform<const W: usize, const T: usize, const A: usize>(
    m: [[f32; W]; A],
) -> [[f32; W]; T] {
    let mut out = [[0.0f32; W]; T];
    for l in 0..W {
        let m = |k: usize| m[k][l];
        if T == 2 {
            out[0][l] = m(0) + m(1) + m(2);
            out[1][l] = m(1) - m(2) - m(3);
        } else {
            let [m0, m1, m2, m3, m4, m5] = [m(0), m(1), m(2), m(3), m(4), m(5)];
            let (s12, d12) = (m1 + m2, m1 - m2);
            let (s34, d34) = (m3 + m4, m3 - m4);
            out[0][l] = m0 + s12 + s34;
            out[1][l] = d12 + 2.0 * d34;
            out[2][l] = s12 + 4.0 * s34;
            out[3][l] = d12 + 8.0 * d34 + m5;
        }
    }
    out
}

/// One tile's output transform over channel vectors of `W` lanes, then one channel at
/// a time.
#[inline(always)]
fn output_tile_lanes<const W: usize, const T: usize, const A: usize>(
    ctx: &Ctx<T, A>,
    m: &[f32],
    at: &TileAt,
    pixel_rows: usize,
    out_rows: &mut [f32],
) {
    let cout = ctx.g.oc;
    let mut o0 = 0;
    while o0 + W <= cout {
        output_channels::<W, T, A>(ctx, m, at, pixel_rows, o0, out_rows);
        o0 += W;
    }
    while o0 < cout {
        output_channels::<1, T, A>(ctx, m, at, pixel_rows, o0, out_rows);
        o0 += 1;
    }
}

/// Output channels `o0..o0 + W` of one tile: its products `m[p][tile][o0..]` transformed
/// back, the bias added and the activation applied, stored where they fall inside the
/// `pixel_rows` rows of `out_rows`.
#[inline(always)]
fn output_channels<const W: usize, const T: usize, const A: usize>(
    ctx: &Ctx<T, A>,
    m: &[f32],
    at: &TileAt,
    pixel_rows: usize,
    o0: usize,
    out_rows: &mut [f32],
) {
    let g = ctx.g;
    let cout = g.oc;
    let stride = at.count * cout;
    let load = |p: usize| -> [f32; W] {
        let i = p * stride + at.index * cout + o0;
        let mut lanes = [0.0f32; W];
        lanes.copy_from_slice(&m[i..i + W]);
        lanes
    };
    // A^T m, column by column (T x A, built without zero-filling), then (A^T m) A, row by
    // row (T x T).
    let am: [[[f32; W]; T]; A] = std::array::from_fn(|c| {
        output_transform::<W, T, A>(std::array::from_fn(|r| load(r * A + c)))
    });
    let mut bias = [0.0f32; W];
    bias.copy_from_slice(&ctx.bias[o0..o0 + W]);
    #[allow(clippy::needless_range_loop)] // r indexes am's inner arrays (its rows)
    for r in 0..T {
        let y = at.oy + r;
        if y >= pixel_rows {
            break;
        }
        let vals = output_transform::<W, T, A>(std::array::from_fn(|c| am[c][r]));
        for (c, vals) in vals.iter().enumerate() {
            let x = at.ox + c;
            if x >= g.ow {
                break;
            }
            let i = (y * g.ow + x) * cout + o0;
            for ((dst, &v), &b) in out_rows[i..i + W].iter_mut().zip(vals).zip(&bias) {
                *dst = ctx.clamp.apply(v + b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        crate::kernels::util::test_rng::Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).f32s(n)
    }

    /// Direct convolution in f64 (NHWC input, [O, 3, 3, C] filter).
    fn reference(g: &Geometry, x: &[f32], w: &[f32], bias: &[f32], clamp: Clamp) -> Vec<f64> {
        let mut out = vec![0.0f64; g.n * g.oh * g.ow * g.oc];
        for b in 0..g.n {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    for o in 0..g.oc {
                        let mut acc = bias[o] as f64;
                        for ky in 0..3 {
                            for kx in 0..3 {
                                let (Some(y), Some(xx)) = (
                                    (oy + ky).checked_sub(g.pad_top).filter(|&y| y < g.ih),
                                    (ox + kx).checked_sub(g.pad_left).filter(|&v| v < g.iw),
                                ) else {
                                    continue;
                                };
                                for c in 0..g.ic {
                                    acc += x[((b * g.ih + y) * g.iw + xx) * g.ic + c] as f64
                                        * w[((o * 3 + ky) * 3 + kx) * g.ic + c] as f64;
                                }
                            }
                        }
                        let v = acc.max(clamp.lo as f64).min(clamp.hi as f64);
                        out[((b * g.oh + oy) * g.ow + ox) * g.oc + o] = v;
                    }
                }
            }
        }
        out
    }

    fn geometry(n: usize, (ih, iw): (usize, usize), ic: usize, oc: usize, pad: usize) -> Geometry {
        Geometry {
            n,
            ih,
            iw,
            ic,
            oh: ih + 2 * pad - 2,
            ow: iw + 2 * pad - 2,
            oc,
            kh: 3,
            kw: 3,
            sh: 1,
            sw: 1,
            dh: 1,
            dw: 1,
            pad_top: pad,
            pad_left: pad,
        }
    }

    /// Within NNAPI's float32 tolerance of a direct convolution computed in f64, at
    /// every border (sizes not multiples of 4, padding or none), with channel counts
    /// that leave vector tails, two images, an activation, on 1 and 2 threads.
    #[test]
    fn matches_direct_convolution_within_float32_tolerance() {
        if !gemm_f32::available() {
            return;
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for (i, &(n, hw, ic, oc, pad, relu)) in [
            (1, (8, 8), 16, 16, 1, false),
            (2, (9, 11), 19, 21, 1, true),
            (1, (14, 14), 64, 40, 1, false),
            (1, (13, 10), 24, 33, 0, true),
            (1, (30, 17), 32, 48, 1, false),
            (1, (7, 7), 64, 32, 1, true),
            (1, (5, 6), 16, 17, 0, false),
        ]
        .iter()
        .enumerate()
        {
            let g = geometry(n, hw, ic, oc, pad);
            let x = values(n * hw.0 * hw.1 * ic, 3 * i as u64 + 1);
            let scale = 1.0 / ((9 * ic) as f32).sqrt();
            let w: Vec<f32> = values(oc * 9 * ic, 3 * i as u64 + 2)
                .iter()
                .map(|v| v * scale)
                .collect();
            let bias = values(oc, 3 * i as u64 + 3);
            let clamp = if relu {
                Clamp { lo: 0.0, hi: 6.0 }
            } else {
                Clamp::none()
            };
            let expected = reference(&g, &x, &w, &bias, clamp);
            for tiling in [Tiling::F2x2, Tiling::F4x4] {
                let prepared = prepare_filter(&w, [oc, 3, 3, ic], tiling).unwrap();
                let prepared = prepared.as_f32();
                for threads in [1, 2] {
                    let mut out = vec![f32::NAN; expected.len()];
                    pool.install(|| {
                        conv(&g, tiling, &x, prepared, &bias, clamp, &mut out, threads)
                    })
                    .unwrap();
                    for (j, (&a, &e)) in out.iter().zip(&expected).enumerate() {
                        let tol = 1e-5 + 5.0 * f32::EPSILON as f64 * e.abs();
                        assert!(
                            (a as f64 - e).abs() <= tol,
                            "case {i}, {tiling:?}, {threads} threads, element {j}: {a} against {e}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn chooses_the_tiling_by_option_output_and_filter_size() {
        let candidate = |fast_math, (cin, cout), output| Candidate {
            kernel: (3, 3),
            stride: (1, 1),
            dilation: (1, 1),
            groups: 1,
            in_channels: cin,
            out_channels: cout,
            output: Some(output),
            fast_math,
        };
        if !gemm_f32::available() {
            assert_eq!(choose(&candidate(true, (64, 64), (56, 56))), None);
            return;
        }
        // Strict float math keeps direct sums.
        assert_eq!(choose(&candidate(false, (64, 64), (56, 56))), None);
        assert_eq!(choose(&candidate(false, (512, 512), (7, 7))), None);
        assert_eq!(
            choose(&candidate(true, (64, 64), (56, 56))),
            Some(Tiling::F4x4)
        );
        assert_eq!(
            choose(&candidate(true, (256, 256), (8, 8))),
            Some(Tiling::F4x4)
        );
        // Small outputs, and filters too large for F(4x4) (37.7 MB), take F(2x2).
        assert_eq!(
            choose(&candidate(true, (512, 512), (7, 7))),
            Some(Tiling::F2x2)
        );
        assert_eq!(
            choose(&candidate(true, (512, 512), (14, 14))),
            Some(Tiling::F2x2)
        );
        // Too small an output, too few channels, a filter too large for either.
        assert_eq!(choose(&candidate(true, (64, 64), (3, 9))), None);
        assert_eq!(choose(&candidate(true, (8, 64), (56, 56))), None);
        assert_eq!(choose(&candidate(true, (1024, 1024), (7, 7))), None);
        let mut strided = candidate(true, (64, 64), (56, 56));
        strided.stride = (2, 2);
        assert_eq!(choose(&strided), None);
    }

    #[test]
    fn blocks_spread_evenly_over_threads() {
        assert_eq!(balanced_block(14, 4, 1), 4);
        assert_eq!(balanced_block(14, 4, 2), 1);
        assert_eq!(balanced_block(16, 8, 2), 8);
        assert_eq!(balanced_block(4, 4, 2), 2);
        assert_eq!(balanced_block(1, 1, 2), 1);
    }

    #[test]
    fn refuses_what_it_does_not_compute() {
        let mut g = geometry(1, (8, 8), 16, 16, 1);
        let w = values(16 * 9 * 16, 1);
        let f4 = prepare_filter(&w, [16, 3, 3, 16], Tiling::F4x4).unwrap();
        let f4 = f4.as_f32();
        let x = values(8 * 8 * 16, 2);
        let mut out = vec![0.0; 8 * 8 * 16];
        let bias = vec![0.0; 16];
        let run = |g: &Geometry, t: Tiling, p: &[f32], out: &mut [f32]| {
            conv(g, t, &x, p, &bias, Clamp::none(), out, 1)
        };
        assert!(run(&g, Tiling::F4x4, &f4[1..], &mut out).is_err());
        // A filter prepared for one tiling is refused by the other.
        assert!(run(&g, Tiling::F2x2, f4, &mut out).is_err());
        g.sh = 2;
        assert!(run(&g, Tiling::F4x4, f4, &mut out).is_err());
        assert!(prepare_filter(&w[1..], [16, 3, 3, 16], Tiling::F2x2).is_err());
    }
}
