//! The model boundary of the narrow types (bfloat16, float8, float4, 4- and 2-bit
//! integers): the model computes them as float32 or as 8-bit integers
//! (`nnc_formats::minifloat`), and these functions convert an input from, and an output
//! to, the type the source model declares.

use nnc_formats::tensor::{DataType, HostTensorRef};

/// The bytes the model's input operand takes for an input declared `declared`: float32
/// for the narrow floats, one byte per value for the narrow integers. Takes a tensor of
/// the declared type, or of the type it computes in: float32 values are rounded to the
/// declared format (as a cast to it would), 8-bit integers must lie in its range.
pub(super) fn input(declared: DataType, t: HostTensorRef<'_>) -> Result<Vec<u8>, String> {
    if let Some(format) = declared.float_format() {
        let values: Vec<f32> = if t.dtype == declared {
            let code = |c: &[u8]| match c {
                [lo, hi] => u16::from_le_bytes([*lo, *hi]),
                [b] => u16::from(*b),
                _ => 0,
            };
            t.data
                .chunks_exact(declared.size())
                .map(|c| format.decode(code(c)))
                .collect()
        } else if t.dtype == DataType::F32 {
            t.data
                .chunks_exact(4)
                .map(|c| format.round(f32::from_le_bytes([c[0], c[1], c[2], c[3]]), false))
                .collect()
        } else {
            return Err(format!(
                "expected {declared} (or float32) data, got {}",
                t.dtype
            ));
        };
        return Ok(bytemuck::cast_slice(&values).to_vec());
    }
    let Some(int) = declared.narrow_int() else {
        return Err(format!("{declared} is not a narrow type"));
    };
    let wide = declared.wide_type();
    if t.dtype != declared && t.dtype != wide {
        return Err(format!(
            "expected {declared} (or {wide}) data, got {}",
            t.dtype
        ));
    }
    for &b in t.data {
        let v = if int.signed {
            i32::from(b as i8)
        } else {
            i32::from(b)
        };
        if v < int.min() || v > int.max() {
            return Err(format!("value {v} does not fit {declared}"));
        }
    }
    Ok(t.data.to_vec())
}

/// An output computed as `computed` (float32, int8 or uint8) in its declared narrow type.
/// Floats are rounded to nearest even without saturation (a value the model rounded
/// already is exact; one beyond the range becomes infinity or NaN, as float arithmetic
/// overflows); an integer outside the declared range is an error.
pub(super) fn output(
    declared: DataType,
    computed: DataType,
    bytes: &[u8],
) -> Result<Vec<u8>, String> {
    if let Some(format) = declared.float_format() {
        if computed != DataType::F32 {
            return Err(format!("{declared} output computed as {computed}"));
        }
        let mut out = Vec::with_capacity(bytes.len() / 4 * declared.size());
        for c in bytes.chunks_exact(4) {
            let code = format.encode(f32::from_le_bytes([c[0], c[1], c[2], c[3]]), false);
            if declared.size() == 2 {
                out.extend_from_slice(&code.to_le_bytes());
            } else {
                out.push(code as u8);
            }
        }
        return Ok(out);
    }
    let Some(int) = declared.narrow_int() else {
        return Err(format!("{declared} is not a narrow type"));
    };
    for &b in bytes {
        let v = match computed {
            DataType::I8 => i32::from(b as i8),
            DataType::U8 => i32::from(b),
            _ => return Err(format!("{declared} output computed as {computed}")),
        };
        if v < int.min() || v > int.max() {
            return Err(format!(
                "value {v} does not fit the output's type {declared}"
            ));
        }
    }
    Ok(bytes.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_cross_the_boundary_exactly() {
        let codes = [0x38u8, 0x7e, 0xff, 0x01];
        let t = HostTensorRef::new(DataType::F8E4M3Fn, &[4], &codes).unwrap();
        let wide = input(DataType::F8E4M3Fn, t).unwrap();
        let values: &[f32] = bytemuck::cast_slice(&wide);
        assert_eq!(values[0], 1.0);
        assert_eq!(values[1], 448.0);
        assert!(values[2].is_nan());
        assert_eq!(values[3], 2f32.powi(-9));
        let back = output(DataType::F8E4M3Fn, DataType::F32, &wide).unwrap();
        assert_eq!(back[..2], codes[..2]);
        assert_eq!(back[3], codes[3]);
        // float32 data for a float8 input is rounded to it.
        let f = [1.1f32];
        let t = HostTensorRef::new(DataType::F32, &[1], bytemuck::cast_slice(&f)).unwrap();
        let wide = input(DataType::F8E4M3Fn, t).unwrap();
        assert_eq!(bytemuck::cast_slice::<u8, f32>(&wide)[0], 1.125);
        // Other types are refused by name.
        let t = HostTensorRef::new(DataType::I32, &[1], &[0; 4]).unwrap();
        let e = input(DataType::Bf16, t).unwrap_err();
        assert!(e.contains("bfloat16") && e.contains("int32"), "{e}");
    }

    #[test]
    fn narrow_integers_are_range_checked() {
        let ok = [0xf8u8, 7, 0];
        let t = HostTensorRef::new(DataType::I8, &[3], &ok).unwrap();
        assert_eq!(input(DataType::I4, t).unwrap(), ok);
        let bad = [8u8];
        let t = HostTensorRef::new(DataType::I4, &[1], &bad).unwrap();
        assert!(input(DataType::I4, t).unwrap_err().contains("value 8"));
        assert!(output(DataType::U2, DataType::U8, &[4]).is_err());
        assert_eq!(output(DataType::U2, DataType::U8, &[3]).unwrap(), vec![3]);
    }
}
