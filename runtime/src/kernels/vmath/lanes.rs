//! A vector of float32 lanes, as the approximations of [`super::approx`] see it: the
//! operations they need, implemented once per instruction set (AVX-512F on 16 lanes,
//! AVX2 and FMA on 8, and plain `f32` as one lane for every other processor).
//!
//! Why a trait of our own rather than a SIMD crate: `pulp` (already in the tree through
//! `gemm`) lacks rounding, float-integer conversion and exponent manipulation, which
//! every one of these approximations needs, and `std::simd` is not stable.
//!
//! Soundness: [`Avx2`] and [`Avx512`] values are created only inside the functions of
//! [`super`] that carry `#[target_feature]` for their instruction set, and those are
//! called only after [`crate::kernels::isa`] found the features. The types are private
//! to this module tree, so no other code can create one.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Lanes of float32 and the operations the approximations use. Every method is
/// `#[inline(always)]` in the implementations so that it is compiled into the
/// `#[target_feature]` function that instantiates the approximation.
pub(super) trait Lanes: Copy {
    /// Lanes per vector (at most [`MAX_WIDTH`]).
    const WIDTH: usize;
    /// The result of a comparison, one flag per lane.
    type Mask: Copy;

    /// The first [`Self::WIDTH`] values of `src` (which must hold that many).
    fn load(src: &[f32]) -> Self;
    /// Writes the lanes to the first [`Self::WIDTH`] values of `dst`.
    fn store(self, dst: &mut [f32]);
    fn splat(v: f32) -> Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    /// `self * m + a` (one rounding where the processor has FMA).
    fn mul_add(self, m: Self, a: Self) -> Self;
    /// `self` limited to `[lo, hi]`; NaN stays NaN.
    fn clamp(self, lo: Self, hi: Self) -> Self;
    fn max(self, o: Self) -> Self;
    fn abs(self) -> Self;
    /// The magnitude of `self` with the sign of `sign`.
    fn copysign(self, sign: Self) -> Self;
    fn sqrt(self) -> Self;
    /// Round to nearest, ties to even.
    fn round(self) -> Self;
    fn floor(self) -> Self;
    /// `self * 2^n` for integral `n` in [-300, 300], with one rounding (overflow gives
    /// infinity, underflow subnormals or zero).
    fn scale_pow2(self, n: Self) -> Self;
    /// For a positive normal `self`: `(m, e)` with `self = m * 2^e`, `m` in [1, 2).
    fn frexp(self) -> (Self, Self);
    fn lt(self, o: Self) -> Self::Mask;
    fn eq(self, o: Self) -> Self::Mask;
    fn is_nan(self) -> Self::Mask;
    /// Lane by lane: `a` where `m` is set, `b` elsewhere.
    fn select(m: Self::Mask, a: Self, b: Self) -> Self;
    /// The sum of the lanes.
    fn sum(self) -> f32;
    /// The largest lane (NaN lanes ignored unless all are NaN).
    fn max_lane(self) -> f32;
}

/// The widest vector of any implementation, for the tail buffers.
pub(super) const MAX_WIDTH: usize = 16;

// ---------------------------------------------------------------------------------------
// One lane: the portable path.

impl Lanes for f32 {
    const WIDTH: usize = 1;
    type Mask = bool;

    #[inline(always)]
    fn load(src: &[f32]) -> f32 {
        src[0]
    }
    #[inline(always)]
    fn store(self, dst: &mut [f32]) {
        dst[0] = self;
    }
    #[inline(always)]
    fn splat(v: f32) -> f32 {
        v
    }
    #[inline(always)]
    fn add(self, o: f32) -> f32 {
        self + o
    }
    #[inline(always)]
    fn sub(self, o: f32) -> f32 {
        self - o
    }
    #[inline(always)]
    fn mul(self, o: f32) -> f32 {
        self * o
    }
    #[inline(always)]
    fn div(self, o: f32) -> f32 {
        self / o
    }
    #[inline(always)]
    fn mul_add(self, m: f32, a: f32) -> f32 {
        // Two roundings: `f32::mul_add` is a library call without FMA hardware.
        self * m + a
    }
    #[inline(always)]
    fn clamp(self, lo: f32, hi: f32) -> f32 {
        // `f32::clamp` keeps NaN.
        self.clamp(lo, hi)
    }
    #[inline(always)]
    fn max(self, o: f32) -> f32 {
        f32::max(self, o)
    }
    #[inline(always)]
    fn abs(self) -> f32 {
        f32::abs(self)
    }
    #[inline(always)]
    fn copysign(self, sign: f32) -> f32 {
        f32::copysign(self, sign)
    }
    #[inline(always)]
    fn sqrt(self) -> f32 {
        f32::sqrt(self)
    }
    #[inline(always)]
    fn round(self) -> f32 {
        self.round_ties_even()
    }
    #[inline(always)]
    fn floor(self) -> f32 {
        f32::floor(self)
    }
    #[inline(always)]
    fn scale_pow2(self, n: f32) -> f32 {
        if n.is_nan() {
            return f32::NAN;
        }
        // Two factors, each a normal power of two, so that the product rounds once.
        let n = n.clamp(-300.0, 300.0) as i32;
        let half = n >> 1;
        self * pow2_normal(half) * pow2_normal(n - half)
    }
    #[inline(always)]
    fn frexp(self) -> (f32, f32) {
        let bits = self.to_bits();
        let e = ((bits >> 23) & 0xff) as i32 - 127;
        let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
        (m, e as f32)
    }
    #[inline(always)]
    fn lt(self, o: f32) -> bool {
        self < o
    }
    #[inline(always)]
    fn eq(self, o: f32) -> bool {
        self == o
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    #[inline(always)]
    fn select(m: bool, a: f32, b: f32) -> f32 {
        if m { a } else { b }
    }
    #[inline(always)]
    fn sum(self) -> f32 {
        self
    }
    #[inline(always)]
    fn max_lane(self) -> f32 {
        self
    }
}

/// 2^n for n in [-150, 150], saturated to the normal range (the callers split larger
/// exponents into two such factors).
#[inline(always)]
fn pow2_normal(n: i32) -> f32 {
    f32::from_bits(((n.clamp(-126, 127) + 127) as u32) << 23)
}

// ---------------------------------------------------------------------------------------
// AVX2 and FMA: 8 lanes.

/// Eight lanes in a 256-bit register. See the module docs for when one may exist.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(super) struct Avx2(__m256);

/// Wraps an intrinsic call of the AVX2 or AVX-512 implementations.
#[cfg(target_arch = "x86_64")]
macro_rules! simd {
    ($e:expr) => {
        // SAFETY: the vector types exist only inside functions compiled for, and called
        // after detecting, their instruction set (module docs); the intrinsics here read
        // and write registers only, except the loads and stores, whose callers checked
        // the slice lengths.
        unsafe { $e }
    };
}

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx2 {
    const WIDTH: usize = 8;
    type Mask = __m256;

    #[inline(always)]
    fn load(src: &[f32]) -> Avx2 {
        let src = &src[..8];
        Avx2(simd!(_mm256_loadu_ps(src.as_ptr())))
    }
    #[inline(always)]
    fn store(self, dst: &mut [f32]) {
        let dst = &mut dst[..8];
        simd!(_mm256_storeu_ps(dst.as_mut_ptr(), self.0))
    }
    #[inline(always)]
    fn splat(v: f32) -> Avx2 {
        Avx2(simd!(_mm256_set1_ps(v)))
    }
    #[inline(always)]
    fn add(self, o: Avx2) -> Avx2 {
        Avx2(simd!(_mm256_add_ps(self.0, o.0)))
    }
    #[inline(always)]
    fn sub(self, o: Avx2) -> Avx2 {
        Avx2(simd!(_mm256_sub_ps(self.0, o.0)))
    }
    #[inline(always)]
    fn mul(self, o: Avx2) -> Avx2 {
        Avx2(simd!(_mm256_mul_ps(self.0, o.0)))
    }
    #[inline(always)]
    fn div(self, o: Avx2) -> Avx2 {
        Avx2(simd!(_mm256_div_ps(self.0, o.0)))
    }
    #[inline(always)]
    fn mul_add(self, m: Avx2, a: Avx2) -> Avx2 {
        Avx2(simd!(_mm256_fmadd_ps(self.0, m.0, a.0)))
    }
    #[inline(always)]
    fn clamp(self, lo: Avx2, hi: Avx2) -> Avx2 {
        // MINPS/MAXPS return their second operand when either is NaN.
        Avx2(simd!(_mm256_max_ps(lo.0, _mm256_min_ps(hi.0, self.0))))
    }
    #[inline(always)]
    fn max(self, o: Avx2) -> Avx2 {
        Avx2(simd!(_mm256_max_ps(self.0, o.0)))
    }
    #[inline(always)]
    fn abs(self) -> Avx2 {
        Avx2(simd!(_mm256_andnot_ps(_mm256_set1_ps(-0.0), self.0)))
    }
    #[inline(always)]
    fn copysign(self, sign: Avx2) -> Avx2 {
        let s = simd!(_mm256_set1_ps(-0.0));
        Avx2(simd!(_mm256_or_ps(
            _mm256_andnot_ps(s, self.0),
            _mm256_and_ps(s, sign.0)
        )))
    }
    #[inline(always)]
    fn sqrt(self) -> Avx2 {
        Avx2(simd!(_mm256_sqrt_ps(self.0)))
    }
    #[inline(always)]
    fn round(self) -> Avx2 {
        Avx2(simd!(_mm256_round_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(self.0)))
    }
    #[inline(always)]
    fn floor(self) -> Avx2 {
        Avx2(simd!(_mm256_floor_ps(self.0)))
    }
    #[inline(always)]
    fn scale_pow2(self, n: Avx2) -> Avx2 {
        simd!({
            let n = _mm256_min_ps(_mm256_set1_ps(300.0), n.0);
            let n = _mm256_max_ps(_mm256_set1_ps(-300.0), n);
            let n = _mm256_cvtps_epi32(n);
            let half = _mm256_srai_epi32::<1>(n);
            let rest = _mm256_sub_epi32(n, half);
            let pow2 = |k: __m256i| {
                let k = _mm256_max_epi32(_mm256_set1_epi32(-126), k);
                let k = _mm256_min_epi32(_mm256_set1_epi32(127), k);
                let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(k, _mm256_set1_epi32(127)));
                _mm256_castsi256_ps(bits)
            };
            Avx2(_mm256_mul_ps(_mm256_mul_ps(self.0, pow2(half)), pow2(rest)))
        })
    }
    #[inline(always)]
    fn frexp(self) -> (Avx2, Avx2) {
        simd!({
            let bits = _mm256_castps_si256(self.0);
            let e = _mm256_sub_epi32(_mm256_srli_epi32::<23>(bits), _mm256_set1_epi32(127));
            let m = _mm256_or_si256(
                _mm256_and_si256(bits, _mm256_set1_epi32(0x007f_ffff)),
                _mm256_set1_epi32(0x3f80_0000),
            );
            (Avx2(_mm256_castsi256_ps(m)), Avx2(_mm256_cvtepi32_ps(e)))
        })
    }
    #[inline(always)]
    fn lt(self, o: Avx2) -> __m256 {
        simd!(_mm256_cmp_ps::<_CMP_LT_OQ>(self.0, o.0))
    }
    #[inline(always)]
    fn eq(self, o: Avx2) -> __m256 {
        simd!(_mm256_cmp_ps::<_CMP_EQ_OQ>(self.0, o.0))
    }
    #[inline(always)]
    fn is_nan(self) -> __m256 {
        simd!(_mm256_cmp_ps::<_CMP_UNORD_Q>(self.0, self.0))
    }
    #[inline(always)]
    fn select(m: __m256, a: Avx2, b: Avx2) -> Avx2 {
        Avx2(simd!(_mm256_blendv_ps(b.0, a.0, m)))
    }
    #[inline(always)]
    fn sum(self) -> f32 {
        simd!({
            let s = _mm_add_ps(
                _mm256_castps256_ps128(self.0),
                _mm256_extractf128_ps::<1>(self.0),
            );
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
            _mm_cvtss_f32(s)
        })
    }
    #[inline(always)]
    fn max_lane(self) -> f32 {
        let mut lanes = [0f32; 8];
        self.store(&mut lanes);
        lanes.into_iter().fold(f32::NEG_INFINITY, f32::max)
    }
}

// ---------------------------------------------------------------------------------------
// AVX-512F: 16 lanes.

/// Sixteen lanes in a 512-bit register. See the module docs for when one may exist.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(super) struct Avx512(__m512);

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx512 {
    const WIDTH: usize = 16;
    type Mask = __mmask16;

    #[inline(always)]
    fn load(src: &[f32]) -> Avx512 {
        let src = &src[..16];
        Avx512(simd!(_mm512_loadu_ps(src.as_ptr())))
    }
    #[inline(always)]
    fn store(self, dst: &mut [f32]) {
        let dst = &mut dst[..16];
        simd!(_mm512_storeu_ps(dst.as_mut_ptr(), self.0))
    }
    #[inline(always)]
    fn splat(v: f32) -> Avx512 {
        Avx512(simd!(_mm512_set1_ps(v)))
    }
    #[inline(always)]
    fn add(self, o: Avx512) -> Avx512 {
        Avx512(simd!(_mm512_add_ps(self.0, o.0)))
    }
    #[inline(always)]
    fn sub(self, o: Avx512) -> Avx512 {
        Avx512(simd!(_mm512_sub_ps(self.0, o.0)))
    }
    #[inline(always)]
    fn mul(self, o: Avx512) -> Avx512 {
        Avx512(simd!(_mm512_mul_ps(self.0, o.0)))
    }
    #[inline(always)]
    fn div(self, o: Avx512) -> Avx512 {
        Avx512(simd!(_mm512_div_ps(self.0, o.0)))
    }
    #[inline(always)]
    fn mul_add(self, m: Avx512, a: Avx512) -> Avx512 {
        Avx512(simd!(_mm512_fmadd_ps(self.0, m.0, a.0)))
    }
    #[inline(always)]
    fn clamp(self, lo: Avx512, hi: Avx512) -> Avx512 {
        // VMINPS/VMAXPS return their second operand when either is NaN.
        Avx512(simd!(_mm512_max_ps(lo.0, _mm512_min_ps(hi.0, self.0))))
    }
    #[inline(always)]
    fn max(self, o: Avx512) -> Avx512 {
        Avx512(simd!(_mm512_max_ps(self.0, o.0)))
    }
    #[inline(always)]
    fn abs(self) -> Avx512 {
        Avx512(simd!(_mm512_abs_ps(self.0)))
    }
    #[inline(always)]
    fn copysign(self, sign: Avx512) -> Avx512 {
        simd!({
            let s = _mm512_set1_epi32(i32::MIN);
            let mag = _mm512_andnot_si512(s, _mm512_castps_si512(self.0));
            let sg = _mm512_and_si512(s, _mm512_castps_si512(sign.0));
            Avx512(_mm512_castsi512_ps(_mm512_or_si512(mag, sg)))
        })
    }
    #[inline(always)]
    fn sqrt(self) -> Avx512 {
        Avx512(simd!(_mm512_sqrt_ps(self.0)))
    }
    #[inline(always)]
    fn round(self) -> Avx512 {
        Avx512(simd!(_mm512_roundscale_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(self.0)))
    }
    #[inline(always)]
    fn floor(self) -> Avx512 {
        Avx512(simd!(_mm512_roundscale_ps::<
            { _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC },
        >(self.0)))
    }
    #[inline(always)]
    fn scale_pow2(self, n: Avx512) -> Avx512 {
        // VSCALEFPS: self * 2^floor(n), one rounding, overflow and underflow as IEEE.
        Avx512(simd!(_mm512_scalef_ps(self.0, n.0)))
    }
    #[inline(always)]
    fn frexp(self) -> (Avx512, Avx512) {
        simd!({
            let m = _mm512_getmant_ps::<_MM_MANT_NORM_1_2, _MM_MANT_SIGN_SRC>(self.0);
            (Avx512(m), Avx512(_mm512_getexp_ps(self.0)))
        })
    }
    #[inline(always)]
    fn lt(self, o: Avx512) -> __mmask16 {
        simd!(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(self.0, o.0))
    }
    #[inline(always)]
    fn eq(self, o: Avx512) -> __mmask16 {
        simd!(_mm512_cmp_ps_mask::<_CMP_EQ_OQ>(self.0, o.0))
    }
    #[inline(always)]
    fn is_nan(self) -> __mmask16 {
        simd!(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(self.0, self.0))
    }
    #[inline(always)]
    fn select(m: __mmask16, a: Avx512, b: Avx512) -> Avx512 {
        Avx512(simd!(_mm512_mask_blend_ps(m, b.0, a.0)))
    }
    #[inline(always)]
    fn sum(self) -> f32 {
        simd!(_mm512_reduce_add_ps(self.0))
    }
    #[inline(always)]
    fn max_lane(self) -> f32 {
        let mut lanes = [0f32; 16];
        self.store(&mut lanes);
        lanes.into_iter().fold(f32::NEG_INFINITY, f32::max)
    }
}
