//! The SM4 S-box as affine maps around inversion in AES's field, derived at compile time.
//!
//! GB/T 32907 gives the S-box as a table. Algebraically (Liu et al., "Algebraic structure
//! of the SM4 S-box") it is `S(x) = A * inv(A * x + C) + C` in GF(2^8) modulo
//! `x^8 + x^7 + x^6 + x^5 + x^4 + x^2 + 1`, with `A` the circulant bit matrix whose row
//! `i` is `0xA7` rotated left by `i` and `C = 0xD3`.
//!
//! GFNI's `gf2p8affineinvqb` and AES-NI's `aesenclast` invert in AES's field
//! (`x^8 + x^4 + x^3 + x + 1`) instead. Both fields have 256 elements, so a root `beta`
//! of SM4's polynomial in AES's field gives an isomorphism `Phi: x^i -> beta^i`, which
//! is GF(2)-linear. Then
//!
//! ```text
//! S(x) = (A Phi^-1) * inv_aes((Phi A) * x + Phi C) + C
//! ```
//!
//! i.e. one affine map, AES-field inversion, another affine map. Everything below is
//! `const` and computed by the compiler from the four published parameters; the tests
//! check the result against the standard's table on all 256 inputs.

/// SM4's field polynomial, `x^8 + x^7 + x^6 + x^5 + x^4 + x^2 + 1`.
const SM4_POLY: u16 = 0x1F5;
/// First row of SM4's affine matrix `A`.
const SM4_A_ROW: u8 = 0xA7;
/// SM4's affine constant `C`.
const SM4_C: u8 = 0xD3;
/// AES's field polynomial, `x^8 + x^4 + x^3 + x + 1` (FIPS 197).
const AES_POLY: u16 = 0x11B;
/// First row of AES's S-box affine matrix (FIPS 197, 5.1.1).
const AES_A_ROW: u8 = 0xF1;
/// AES's S-box affine constant.
const AES_C: u8 = 0x63;

/// A GF(2)-linear map on bytes, stored as the images of the unit vectors:
/// `cols[j]` is the image of `1 << j`.
#[derive(Clone, Copy)]
pub(super) struct Linear {
    cols: [u8; 8],
}

impl Linear {
    /// The map whose output bit `i` is the parity of `rows[i] & x`.
    const fn from_rows(rows: [u8; 8]) -> Self {
        let mut cols = [0u8; 8];
        let mut i = 0;
        while i < 8 {
            let mut j = 0;
            while j < 8 {
                cols[j] |= ((rows[i] >> j) & 1) << i;
                j += 1;
            }
            i += 1;
        }
        Self { cols }
    }

    /// The circulant matrix whose row `i` is `first_row` rotated left by `i`.
    const fn circulant(first_row: u8) -> Self {
        let mut rows = [0u8; 8];
        let mut i = 0;
        while i < 8 {
            rows[i] = first_row.rotate_left(i as u32);
            i += 1;
        }
        Self::from_rows(rows)
    }

    /// `M * x`, without branches on `x`.
    pub(super) const fn apply(&self, x: u8) -> u8 {
        let mut y = 0;
        let mut j = 0;
        while j < 8 {
            y ^= self.cols[j] & 0u8.wrapping_sub((x >> j) & 1);
            j += 1;
        }
        y
    }

    /// `next * self`: first `self`, then `next`.
    const fn then(self, next: Linear) -> Linear {
        let mut cols = [0u8; 8];
        let mut j = 0;
        while j < 8 {
            cols[j] = next.apply(self.cols[j]);
            j += 1;
        }
        Linear { cols }
    }

    /// The inverse map. Fails compilation if the map is singular.
    const fn inverse(self) -> Linear {
        let mut cols = [0u8; 8];
        let mut found = 0u8;
        let mut x = 0u16;
        while x < 256 {
            let y = self.apply(x as u8);
            if y.is_power_of_two() {
                cols[y.trailing_zeros() as usize] = x as u8;
                found |= y;
            }
            x += 1;
        }
        assert!(found == 0xFF, "singular matrix");
        Linear { cols }
    }

    /// Row `i` as a bit mask over the input bits.
    const fn row(&self, i: usize) -> u8 {
        let mut row = 0;
        let mut j = 0;
        while j < 8 {
            row |= ((self.cols[j] >> i) & 1) << j;
            j += 1;
        }
        row
    }

    /// The 64-bit matrix operand of `gf2p8affineqb`/`gf2p8affineinvqb`, which take output
    /// bit `i` from the parity of byte `7 - i` of the operand and the input byte.
    pub(super) const fn gfni_matrix(&self) -> u64 {
        let mut m = 0u64;
        let mut i = 0;
        while i < 8 {
            m |= (self.row(i) as u64) << (8 * (7 - i));
            i += 1;
        }
        m
    }

    /// `[M * n + c for n in 0..16]` and `[M * (n << 4) for n in 0..16]`: an affine map
    /// as two 16-entry tables for `pshufb`, indexed by the low and the high nibble.
    pub(super) const fn nibble_tables(&self, c: u8) -> ([u8; 16], [u8; 16]) {
        let mut lo = [0u8; 16];
        let mut hi = [0u8; 16];
        let mut n = 0;
        while n < 16 {
            lo[n] = self.apply(n as u8) ^ c;
            hi[n] = self.apply((n as u8) << 4);
            n += 1;
        }
        (lo, hi)
    }
}

/// `a * b` in GF(2^8) modulo `poly`, without branches on the operands.
const fn gf_mul(mut a: u8, mut b: u8, poly: u16) -> u8 {
    let reduce = (poly & 0xFF) as u8;
    let mut product = 0u8;
    let mut i = 0;
    while i < 8 {
        product ^= a & 0u8.wrapping_sub(b & 1);
        a = (a << 1) ^ (reduce & 0u8.wrapping_sub(a >> 7));
        b >>= 1;
        i += 1;
    }
    product
}

/// `x^-1` in AES's field (`0` for `0`), as `x^254`, without branches on `x`.
#[cfg(test)]
const fn aes_inv(x: u8) -> u8 {
    // x^254 = x^(2+4+8+16+32+64+128).
    let mut square = x;
    let mut result = 1u8;
    let mut i = 1;
    while i < 8 {
        square = gf_mul(square, square, AES_POLY);
        result = gf_mul(result, square, AES_POLY);
        i += 1;
    }
    result
}

/// The smallest root in AES's field of SM4's field polynomial.
const fn sm4_poly_root_in_aes_field() -> u8 {
    let mut candidate = 2u16;
    while candidate < 256 {
        // Horner's rule over the coefficients of SM4_POLY, highest first.
        let mut value = 0u8;
        let mut k = 9;
        while k > 0 {
            k -= 1;
            value = gf_mul(value, candidate as u8, AES_POLY) ^ ((SM4_POLY >> k) & 1) as u8;
        }
        if value == 0 {
            return candidate as u8;
        }
        candidate += 1;
    }
    panic!("SM4's polynomial has no root in AES's field");
}

/// `Phi`: SM4's field to AES's field, `x^i -> beta^i`.
const fn field_isomorphism() -> Linear {
    let beta = sm4_poly_root_in_aes_field();
    let mut cols = [0u8; 8];
    let mut power = 1u8;
    let mut i = 0;
    while i < 8 {
        cols[i] = power;
        power = gf_mul(power, beta, AES_POLY);
        i += 1;
    }
    Linear { cols }
}

const PHI: Linear = field_isomorphism();
const SM4_A: Linear = Linear::circulant(SM4_A_ROW);

/// Applied before the inversion: `Phi A`, plus [`PRE_C`].
pub(super) const PRE: Linear = SM4_A.then(PHI);
/// `Phi C`.
pub(super) const PRE_C: u8 = PHI.apply(SM4_C);
/// Applied after the inversion: `A Phi^-1`, plus [`POST_C`].
pub(super) const POST: Linear = PHI.inverse().then(SM4_A);
/// `C`.
pub(super) const POST_C: u8 = SM4_C;

/// After `aesenclast` with a zero round key (AES's S-box, `Aaes * inv(u) + 0x63`, then
/// ShiftRows), undoing AES's affine map and applying [`POST`] is one affine map:
/// `POST Aaes^-1`, plus [`AESENC_POST_C`].
pub(super) const AESENC_POST: Linear = Linear::circulant(AES_A_ROW).inverse().then(POST);
/// `POST Aaes^-1 0x63 + C`.
pub(super) const AESENC_POST_C: u8 = AESENC_POST.apply(AES_C) ^ POST_C;

/// The SM4 S-box on one byte, in constant time (no table, no branch on `x`): the
/// reference the SIMD S-boxes are tested against.
#[cfg(test)]
pub(super) const fn sbox(x: u8) -> u8 {
    POST.apply(aes_inv(PRE.apply(x) ^ PRE_C)) ^ POST_C
}

/// [`sbox`] on each byte of a word (SM4's `tau`).
#[cfg(test)]
pub(super) const fn tau(word: u32) -> u32 {
    let b = word.to_be_bytes();
    u32::from_be_bytes([sbox(b[0]), sbox(b[1]), sbox(b[2]), sbox(b[3])])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inverse in SM4's own field, by exhaustive search (test only).
    fn sm4_field_inv(x: u8) -> u8 {
        if x == 0 {
            return 0;
        }
        (1..=255u8)
            .find(|&y| gf_mul(x, y, SM4_POLY) == 1)
            .expect("a field")
    }

    #[test]
    fn isomorphism_preserves_multiplication() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(
                    PHI.apply(gf_mul(a, b, SM4_POLY)),
                    gf_mul(PHI.apply(a), PHI.apply(b), AES_POLY)
                );
            }
        }
    }

    #[test]
    fn derived_sbox_equals_definition_in_sm4_field() {
        for x in 0..=255u8 {
            let direct = SM4_A.apply(sm4_field_inv(SM4_A.apply(x) ^ SM4_C)) ^ SM4_C;
            assert_eq!(sbox(x), direct, "x = {x:#04x}");
        }
    }

    #[test]
    fn aes_inv_inverts() {
        assert_eq!(aes_inv(0), 0);
        for x in 1..=255u8 {
            assert_eq!(gf_mul(x, aes_inv(x), AES_POLY), 1);
        }
    }
}
