//! Small helpers shared by kernels: parallel loops, layout transposes, axis handling.

use rayon::prelude::*;

use crate::error::{Result, RuntimeError};

/// Runs `f(chunk_index, chunk)` over `data` split into chunks of `chunk` elements: on
/// rayon when `threads > 1` and there is more than one chunk, sequentially otherwise.
pub fn for_each_chunk<T: Send>(
    threads: usize,
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    let chunk = chunk.max(1);
    if threads > 1 && data.len() > chunk {
        data.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    } else {
        data.chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    }
}

/// Normalizes a possibly negative axis.
pub fn axis(axis: i32, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let a = i64::from(axis);
    if a < -r || a >= r {
        return Err(RuntimeError::kernel(format!(
            "axis {axis} is out of range for rank {rank}"
        )));
    }
    Ok(if a < 0 { (a + r) as usize } else { a as usize })
}

/// (product of dims before `axis`, dims[axis], product of dims after `axis`).
pub fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape.iter().take(axis).product();
    let mid = shape.get(axis).copied().unwrap_or(1);
    let inner = shape.iter().skip(axis + 1).product();
    (outer, mid, inner)
}

/// Requires a rank-4 shape and returns it as an array.
pub fn rank4(shape: &[usize], what: &str) -> Result<[usize; 4]> {
    match shape {
        [a, b, c, d] => Ok([*a, *b, *c, *d]),
        _ => Err(RuntimeError::kernel(format!(
            "{what} must have rank 4, got shape {shape:?}"
        ))),
    }
}

/// NCHW -> NHWC of a 4-D tensor, into `dst`.
pub fn nchw_to_nhwc<T: Copy>(src: &[T], dst: &mut [T], [n, c, h, w]: [usize; 4]) {
    let hw = h * w;
    for b in 0..n {
        let s = &src[b * c * hw..(b + 1) * c * hw];
        let d = &mut dst[b * c * hw..(b + 1) * c * hw];
        transpose_2d(s, d, c, hw);
    }
}

/// NHWC -> NCHW of a 4-D tensor given in NHWC dims, into `dst`.
pub fn nhwc_to_nchw<T: Copy>(src: &[T], dst: &mut [T], [n, h, w, c]: [usize; 4]) {
    let hw = h * w;
    for b in 0..n {
        let s = &src[b * c * hw..(b + 1) * c * hw];
        let d = &mut dst[b * c * hw..(b + 1) * c * hw];
        transpose_2d(s, d, hw, c);
    }
}

/// `dst[j * rows + i] = src[i * cols + j]`: transposes a row-major rows x cols matrix,
/// in cache-friendly tiles; 4-byte elements (float32, int32) in 8 x 8 register blocks
/// on AVX2 (a model's NCHW <-> NHWC boundary transposes: 1 ns per element before).
pub fn transpose_2d<T: Copy>(src: &[T], dst: &mut [T], rows: usize, cols: usize) {
    // The register path only where both slices hold the whole matrix (its callers
    // check the sizes; the element-by-element path indexes as it goes).
    let fits = rows
        .checked_mul(cols)
        .is_some_and(|len| src.len() >= len && dst.len() >= len);
    #[cfg(target_arch = "x86_64")]
    if fits
        && std::mem::size_of::<T>() == 4
        && rows >= 8
        && cols >= 8
        && super::isa::float_avx2_fma()
    {
        // SAFETY: AVX2 is available (checked); both slices hold rows * cols elements of
        // four bytes (checked above), which the kernel reads and writes as unaligned
        // 32-bit words, moving their bits unchanged.
        unsafe { transpose_4byte_avx2(src.as_ptr().cast(), dst.as_mut_ptr().cast(), rows, cols) };
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = fits;
    match rows {
        // An image's NCHW -> NHWC input transpose: channels interleaved pixel by pixel.
        3 => transpose_few_rows::<T, 3>(src, dst, cols),
        4 => transpose_few_rows::<T, 4>(src, dst, cols),
        _ => transpose_tiles(src, dst, rows, cols),
    }
}

/// [`transpose_2d`] of `R` rows: every column's `R` values written together (a loop the
/// compiler turns into interleaving shuffles, where the tiles moved one value at a time).
fn transpose_few_rows<T: Copy, const R: usize>(src: &[T], dst: &mut [T], cols: usize) {
    let rows: [&[T]; R] = std::array::from_fn(|i| &src[i * cols..(i + 1) * cols]);
    for (j, out) in dst[..R * cols].chunks_exact_mut(R).enumerate() {
        for (o, row) in out.iter_mut().zip(&rows) {
            *o = row[j];
        }
    }
}

/// [`transpose_2d`] element by element, in tiles.
fn transpose_tiles<T: Copy>(src: &[T], dst: &mut [T], rows: usize, cols: usize) {
    const TILE: usize = 32;
    for ti in (0..rows).step_by(TILE) {
        let ti1 = (ti + TILE).min(rows);
        for tj in (0..cols).step_by(TILE) {
            let tj1 = (tj + TILE).min(cols);
            for i in ti..ti1 {
                for j in tj..tj1 {
                    dst[j * rows + i] = src[i * cols + j];
                }
            }
        }
    }
}

/// [`transpose_2d`] of 4-byte elements: 8 x 8 blocks through registers (unpack, shuffle,
/// swap halves), the edges element by element.
///
/// # Safety
/// AVX2; `src` and `dst` valid for `rows * cols` 4-byte reads and writes (any alignment).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose_4byte_avx2(src: *const u32, dst: *mut u32, rows: usize, cols: usize) {
    use std::arch::x86_64::*;
    let (rows8, cols8) = (rows / 8 * 8, cols / 8 * 8);
    for i0 in (0..rows8).step_by(8) {
        for j0 in (0..cols8).step_by(8) {
            // SAFETY: AVX2 is this function's contract; every load reads 8 values of
            // src's rows i0..i0 + 8 <= rows at columns j0..j0 + 8 <= cols, every store
            // writes 8 values of dst's rows j0..j0 + 8 <= cols at columns i0..i0 + 8 <=
            // rows, inside the `rows * cols` values the caller guarantees.
            unsafe {
                let r: [__m256; 8] = std::array::from_fn(|k| {
                    _mm256_loadu_ps(src.add((i0 + k) * cols + j0).cast::<f32>())
                });
                let t0 = _mm256_unpacklo_ps(r[0], r[1]);
                let t1 = _mm256_unpackhi_ps(r[0], r[1]);
                let t2 = _mm256_unpacklo_ps(r[2], r[3]);
                let t3 = _mm256_unpackhi_ps(r[2], r[3]);
                let t4 = _mm256_unpacklo_ps(r[4], r[5]);
                let t5 = _mm256_unpackhi_ps(r[4], r[5]);
                let t6 = _mm256_unpacklo_ps(r[6], r[7]);
                let t7 = _mm256_unpackhi_ps(r[6], r[7]);
                // Columns (c, c + 4) of rows 0..4 and of rows 4..8.
                let s = [
                    _mm256_shuffle_ps::<0x44>(t0, t2),
                    _mm256_shuffle_ps::<0xEE>(t0, t2),
                    _mm256_shuffle_ps::<0x44>(t1, t3),
                    _mm256_shuffle_ps::<0xEE>(t1, t3),
                    _mm256_shuffle_ps::<0x44>(t4, t6),
                    _mm256_shuffle_ps::<0xEE>(t4, t6),
                    _mm256_shuffle_ps::<0x44>(t5, t7),
                    _mm256_shuffle_ps::<0xEE>(t5, t7),
                ];
                for c in 0..4 {
                    let lo = _mm256_permute2f128_ps::<0x20>(s[c], s[c + 4]);
                    let hi = _mm256_permute2f128_ps::<0x31>(s[c], s[c + 4]);
                    _mm256_storeu_ps(dst.add((j0 + c) * rows + i0).cast::<f32>(), lo);
                    _mm256_storeu_ps(dst.add((j0 + c + 4) * rows + i0).cast::<f32>(), hi);
                }
            }
        }
    }
    // The edges: columns past the last block for the blocked rows, then the last rows.
    let edge = |i: usize, j: usize| {
        // SAFETY: every caller below passes i < rows and j < cols, so both offsets are
        // inside the `rows * cols` values of the contract (unaligned accesses).
        unsafe {
            dst.add(j * rows + i)
                .write_unaligned(src.add(i * cols + j).read_unaligned())
        };
    };
    for i in 0..rows8 {
        for j in cols8..cols {
            edge(i, j);
        }
    }
    for i in rows8..rows {
        for j in 0..cols {
            edge(i, j);
        }
    }
}

/// Shape `[n, c, h, w]` viewed as NHWC `[n, h, w, c]`.
pub fn nchw_dims_to_nhwc([n, c, h, w]: [usize; 4]) -> [usize; 4] {
    [n, h, w, c]
}

/// The rows of the next micro-kernel block when `left` rows remain and a block holds at
/// most `mr`: the remaining rows split evenly over the fewest blocks (49 rows in blocks
/// of 8 are seven blocks of 7, not six of 8 and one of 1, whose single row reads as many
/// weights as eight would).
pub(crate) fn block_rows(left: usize, mr: usize) -> usize {
    let blocks = left.div_ceil(mr.max(1)).max(1);
    left.div_ceil(blocks)
}

/// Which panels of `nr` columns a GEMM micro-kernel block computes from panel `t` (of
/// `panels` covering `n` columns): one, a pair, or a pair whose second panel holds at
/// most `nr / 2` columns (16k + 8 outputs, MobileNetV2's 24-channel projections), which
/// the kernels run on half-width registers: a quarter of the pair's products were on
/// zeros.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Panels {
    One,
    Two,
    OneAndHalf,
}

#[cfg(target_arch = "x86_64")]
impl Panels {
    pub(crate) fn from(t: usize, panels: usize, n: usize, nr: usize) -> Panels {
        if t + 1 >= panels {
            Panels::One
        } else if n.saturating_sub((t + 1) * nr) <= nr / 2 {
            Panels::OneAndHalf
        } else {
            Panels::Two
        }
    }

    /// How many panels from `t` the block covers.
    pub(crate) fn count(self) -> usize {
        match self {
            Panels::One => 1,
            Panels::Two | Panels::OneAndHalf => 2,
        }
    }
}

/// Elements a row-major matrix of `rows` rows of `cols` values, `ld` apart, spans (None
/// on overflow): what a slice must hold for it.
pub(crate) fn matrix_extent(rows: usize, ld: usize, cols: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1).checked_mul(ld)?.checked_add(cols)
}

/// A zeroed f32 vector, with allocation failure as an error.
pub fn zeroed_f32(n: usize) -> Result<Vec<f32>> {
    filled(n, 0.0)
}

/// Whether the float kernels take their AVX2+FMA paths (see [`super::isa`]; kernels with
/// hand-vectorizable loops compile a second copy for them).
#[cfg(target_arch = "x86_64")]
pub fn has_avx2_fma() -> bool {
    super::isa::float_avx2_fma()
}

/// Runs an NHWC computation on NCHW data when `nchw` is set, by transposing the input in
/// and the output back out (correctness over speed for the NCHW layout).
pub fn with_nhwc<T: Copy + Default>(
    nchw: bool,
    input: &[T],
    in_shape: [usize; 4],
    output: &mut [T],
    out_shape: [usize; 4],
    f: impl FnOnce(&[T], [usize; 4], &mut [T], [usize; 4]) -> Result<()>,
) -> Result<()> {
    if !nchw {
        return f(input, in_shape, output, out_shape);
    }
    let in_nhwc = nchw_dims_to_nhwc(in_shape);
    let out_nhwc = nchw_dims_to_nhwc(out_shape);
    if input.len() != in_shape.iter().product::<usize>()
        || output.len() != out_shape.iter().product::<usize>()
    {
        return Err(RuntimeError::kernel(
            "tensor sizes do not match their shapes",
        ));
    }
    let mut tin = filled(input.len(), T::default())?;
    nchw_to_nhwc(input, &mut tin, in_shape);
    let mut tout = filled(output.len(), T::default())?;
    f(&tin, in_nhwc, &mut tout, out_nhwc)?;
    nhwc_to_nchw(&tout, output, out_nhwc);
    Ok(())
}

/// A vector of `n` copies of `value`, with allocation failure as an error.
pub fn filled<T: Copy>(n: usize, value: T) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| RuntimeError::OutOfMemory {
            bytes: n.saturating_mul(std::mem::size_of::<T>()),
        })?;
    v.resize(n, value);
    Ok(v)
}

/// `index` along an axis of size `dim`, negative ones counted from the end (ONNX's
/// gathers and scatters); out of range is an error naming `what`.
pub fn resolve_index(index: i32, dim: usize, what: &str) -> Result<usize> {
    let i = i64::from(index);
    let resolved = if i < 0 { i + dim as i64 } else { i };
    if resolved < 0 || resolved >= dim as i64 {
        return Err(RuntimeError::kernel(format!(
            "{what} index {index} is out of range for a dimension of size {dim}"
        )));
    }
    Ok(resolved as usize)
}

/// Row-major strides of `shape`, in elements.
pub fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

thread_local! {
    /// Each thread's kernel scratch (im2col tiles, depthwise windows), kept between
    /// calls and grown as needed: allocating, zeroing and (with the wiping allocator)
    /// wiping a fresh tile at every convolution cost more than some convolutions. It
    /// holds activations, never weights; freed (and wiped) when the thread ends.
    static SCRATCH: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on `len` elements of this thread's scratch (stale contents), or of a fresh
/// buffer when the scratch is already in use further up the stack.
pub(crate) fn with_scratch<S: bytemuck::Pod, R>(
    len: usize,
    f: impl FnOnce(&mut [S]) -> Result<R>,
) -> Result<R> {
    let bytes = len
        .checked_mul(std::mem::size_of::<S>())
        .ok_or(RuntimeError::OutOfMemory { bytes: usize::MAX })?;
    let words = bytes.div_ceil(8);
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut held) => {
            if held.len() < words {
                let more = words - held.len();
                held.try_reserve_exact(more)
                    .map_err(|_| RuntimeError::OutOfMemory { bytes })?;
                held.resize(words, 0);
            }
            let raw: &mut [u8] = bytemuck::cast_slice_mut(&mut held[..words]);
            f(bytemuck::cast_slice_mut(&mut raw[..bytes]))
        }
        Err(_) => f(&mut filled(len, S::zeroed())?),
    })
}

/// Runs `f(first_row, rows, scratch)` over consecutive tiles of `tile_rows` rows of
/// `out` (`row_len` elements per row), in parallel on the current rayon pool when
/// `threads > 1`. Each call gets `scratch_len` elements of its thread's scratch, with
/// whatever an earlier call left there: `f` must write what it reads. With several
/// threads and one tile, `f` runs once on the calling thread (and may split its own work
/// over the pool).
/// The first `(rows - 1) * stride + len` elements of `out`: `rows` rows of `len`
/// elements starting `stride` apart (the last row without its gap), or an error if `out`
/// is shorter or the stride shorter than a row.
pub(crate) fn strided_rows<T>(
    out: &mut [T],
    rows: usize,
    len: usize,
    stride: usize,
) -> Result<&mut [T]> {
    let extent = match rows {
        0 => Some(0),
        r => (r - 1).checked_mul(stride).and_then(|v| v.checked_add(len)),
    };
    match extent {
        Some(e) if stride >= len && e <= out.len() => Ok(&mut out[..e]),
        _ => Err(RuntimeError::kernel(format!(
            "{rows} rows of {len} every {stride} elements do not fit {} elements",
            out.len()
        ))),
    }
}

/// How many rows a piece of [`strided_rows`] of `len` elements starting `stride` apart
/// holds (every piece but the last is whole rows with their gaps).
pub(crate) fn rows_in(piece: usize, len: usize, stride: usize) -> usize {
    if len == 0 || stride < len {
        return 0;
    }
    (piece + stride - len) / stride
}

pub(crate) fn for_row_tiles<T: Send, S: bytemuck::Pod + Send>(
    threads: usize,
    out: &mut [T],
    row_len: usize,
    tile_rows: usize,
    scratch_len: usize,
    f: impl Fn(usize, &mut [T], &mut [S]) -> Result<()> + Sync + Send,
) -> Result<()> {
    use rayon::prelude::*;
    let chunk = tile_rows.max(1) * row_len.max(1);
    if threads > 1 && out.len() > chunk {
        out.par_chunks_mut(chunk)
            .enumerate()
            .try_for_each(|(i, rows)| with_scratch(scratch_len, |s| f(i * tile_rows, rows, s)))
    } else {
        with_scratch(scratch_len, |scratch| {
            for (i, rows) in out.chunks_mut(chunk).enumerate() {
                f(i * tile_rows, rows, scratch)?;
            }
            Ok(())
        })
    }
}

/// The xorshift generator of the kernels' randomized unit tests.
#[cfg(test)]
pub(crate) mod test_rng {
    pub(crate) struct Rng(pub u64);

    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        pub(crate) fn range(&mut self, lo: i32, hi: i32) -> i32 {
            lo + (self.next() % (hi - lo + 1) as u64) as i32
        }

        /// `n` values uniform in [-1, 1).
        pub(crate) fn f32s(&mut self, n: usize) -> Vec<f32> {
            (0..n)
                .map(|_| (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block covers one panel at the end, a pair before it, and a pair whose second
    /// panel is at most half full as `OneAndHalf`; walking by `count` covers every panel.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn panels_of_a_block() {
        assert_eq!(Panels::from(0, 1, 16, 16), Panels::One);
        assert_eq!(Panels::from(0, 2, 24, 16), Panels::OneAndHalf);
        assert_eq!(Panels::from(0, 2, 25, 16), Panels::Two);
        assert_eq!(Panels::from(0, 2, 32, 16), Panels::Two);
        assert_eq!(Panels::from(2, 4, 56, 16), Panels::OneAndHalf);
        assert_eq!(Panels::from(2, 3, 40, 16), Panels::One);
        for n in 1usize..100 {
            let panels = n.div_ceil(16);
            let mut t = 0;
            while t < panels {
                t += Panels::from(t, panels, n, 16).count();
            }
            assert_eq!(t, panels, "n {n}");
        }
    }

    /// Every element lands at its transposed place, for the register blocks, their edges
    /// (sizes that are not multiples of 8, and under 8), 4-byte elements of any alignment
    /// (`[u8; 4]`) and other sizes.
    #[test]
    fn transposes_every_element() {
        for (rows, cols) in [
            (1, 1),
            (3, 7),
            (8, 8),
            (9, 8),
            (8, 17),
            (23, 41),
            (64, 3),
            (50, 96),
        ] {
            let src: Vec<u32> = (0..rows * cols)
                .map(|v| (v as u32).wrapping_mul(2_654_435_761))
                .collect();
            let mut dst = vec![0u32; rows * cols];
            transpose_2d(&src, &mut dst, rows, cols);
            let bytes: Vec<[u8; 4]> = src.iter().map(|v| v.to_le_bytes()).collect();
            let mut dst_bytes = vec![[0u8; 4]; rows * cols];
            transpose_2d(&bytes, &mut dst_bytes, rows, cols);
            let wide: Vec<u64> = src.iter().map(|&v| u64::from(v) << 7).collect();
            let mut dst_wide = vec![0u64; rows * cols];
            transpose_2d(&wide, &mut dst_wide, rows, cols);
            for i in 0..rows {
                for j in 0..cols {
                    let (from, to) = (i * cols + j, j * rows + i);
                    assert_eq!(dst[to], src[from], "{rows} x {cols} at ({i}, {j})");
                    assert_eq!(dst_bytes[to], bytes[from]);
                    assert_eq!(dst_wide[to], wide[from]);
                }
            }
        }
    }
}

/// Mean and population variance from sums of offsets `d = x - first` (sum of d, sum of
/// d^2, over n values): offsets from one of the values keep the cancellation of
/// `E[x^2] - E[x]^2` harmless where the values sit far from zero.
pub(crate) fn shifted_moments(first: f64, sum: f64, squares: f64, n: usize) -> (f64, f64) {
    let n = n.max(1) as f64;
    let shifted_mean = sum / n;
    let var = (squares / n - shifted_mean * shifted_mean).max(0.0);
    (first + shifted_mean, var)
}

/// Mean and population variance of `xs`, accumulated in f64 (see [`shifted_moments`]).
///
/// Eight running sums of each kind, one per position modulo 8, added at the end: one
/// chain of f64 additions waited on the adder's latency at every element (4 cycles: a
/// GroupNorm over PoolFormer's 200,000 values per image took 0.26 ms, LayerNorm rows
/// likewise), where eight independent ones vectorize.
pub(crate) fn mean_variance(xs: &[f32]) -> (f64, f64) {
    const LANES: usize = 8;
    let first = xs.first().map_or(0.0, |&v| f64::from(v));
    let (mut sum, mut squares) = ([0f64; LANES], [0f64; LANES]);
    let chunks = xs.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for ((s, q), &v) in sum.iter_mut().zip(&mut squares).zip(chunk) {
            let d = f64::from(v) - first;
            *s += d;
            *q += d * d;
        }
    }
    for ((s, q), &v) in sum.iter_mut().zip(&mut squares).zip(rest) {
        let d = f64::from(v) - first;
        *s += d;
        *q += d * d;
    }
    let (sum, squares) = (sum.iter().sum::<f64>(), squares.iter().sum::<f64>());
    shifted_moments(first, sum, squares, xs.len())
}
