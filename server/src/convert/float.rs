//! Float conversions between the checkpoint's element types and the GGUF output types, bit-exact
//! with what the reference converter produces: bf16 and f16 widen to f32 exactly, and f32 narrows
//! to f16 with round-to-nearest-even, overflow to ±inf, and gradual underflow to subnormals
//! (numpy's `astype(float16)`, which `convert_hf_to_gguf.py --outtype f16` uses).

use super::safetensors::Dtype;

pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        // Subnormal: man × 2^-24, exact in f32.
        (0, m) => return sgn(h) * (m as f32) * f32::from_bits(0x3380_0000),
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

fn sgn(h: u16) -> f32 {
    if h & 0x8000 != 0 {
        -1.0
    } else {
        1.0
    }
}

pub fn f32_to_f16(x: f32) -> u16 {
    let f = x.to_bits();
    let sign = ((f >> 16) & 0x8000) as u16;
    let exp = f & 0x7f80_0000;
    if exp >= 0x4780_0000 {
        // |x| ≥ 65536, inf or NaN.
        let man = f & 0x007f_ffff;
        if exp == 0x7f80_0000 && man != 0 {
            let ret = 0x7c00 + (man >> 13) as u16;
            return sign | if ret == 0x7c00 { ret + 1 } else { ret };
        }
        return sign | 0x7c00;
    }
    if exp <= 0x3800_0000 {
        // Below the smallest normal half (2^-14): a subnormal half or zero.
        if exp < 0x3300_0000 {
            return sign;
        }
        let e = exp >> 23;
        let mut sig = 0x0080_0000 | (f & 0x007f_ffff);
        // Ties-to-even must see the bits the shift drops, so test them in the original.
        let dropped_nonzero = (sig & ((1u32 << (113 - e)) - 1)) != 0;
        sig >>= 113 - e;
        if (sig & 0x3fff) != 0x1000 || dropped_nonzero {
            sig += 0x1000;
        }
        return sign | (sig >> 13) as u16;
    }
    let h_exp = (exp - 0x3800_0000) >> 13;
    let mut sig = f & 0x007f_ffff;
    if (sig & 0x3fff) != 0x1000 {
        sig += 0x1000;
    }
    // A carry out of the mantissa bumps the exponent (up to inf), which is the right result.
    sign | (h_exp + (sig >> 13)) as u16
}

/// Reads element `i` of little-endian `src` holding `dtype` values, widened to f32.
pub fn load(dtype: Dtype, src: &[u8], i: usize) -> f32 {
    match dtype {
        Dtype::F32 => {
            f32::from_le_bytes([src[4 * i], src[4 * i + 1], src[4 * i + 2], src[4 * i + 3]])
        }
        Dtype::F16 => f16_to_f32(u16::from_le_bytes([src[2 * i], src[2 * i + 1]])),
        Dtype::BF16 => bf16_to_f32(u16::from_le_bytes([src[2 * i], src[2 * i + 1]])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_to_f16_table() {
        let cases: &[(f32, u16)] = &[
            (0.0, 0x0000),
            (-0.0, 0x8000),
            (1.0, 0x3c00),
            (-2.0, 0xc000),
            (0.1, 0x2e66),
            (65504.0, 0x7bff),
            // Halfway between 65504 and 65536 rounds to even: inf.
            (65520.0, 0x7c00),
            (65519.0, 0x7bff),
            (1e6, 0x7c00),
            (f32::INFINITY, 0x7c00),
            (f32::NEG_INFINITY, 0xfc00),
            (6.103_515_6e-5, 0x0400), // 2^-14, smallest normal
            (5.960_464_5e-8, 0x0001), // 2^-24, smallest subnormal
            (2.980_232_2e-8, 0x0000), // 2^-25: a tie, rounds to even zero
            (4.470_348_4e-8, 0x0001), // 1.5 × 2^-25 rounds up
            (1.000_976_6, 0x3c01),    // exactly representable
            (1.000_488_3, 0x3c00),    // 1 + 2^-11: tie, to even
            (1.001_464_8, 0x3c02),    // 1 + 3×2^-11: tie, to even (up)
        ];
        for &(x, want) in cases {
            assert_eq!(f32_to_f16(x), want, "{x:e}");
        }
        assert_eq!(f32_to_f16(f32::NAN) & 0x7c00, 0x7c00);
        assert_ne!(f32_to_f16(f32::NAN) & 0x3ff, 0);
    }

    #[test]
    fn widening_is_exact_and_round_trips() {
        for h in 0..=u16::MAX {
            let x = f16_to_f32(h);
            if x.is_nan() {
                continue;
            }
            assert_eq!(f32_to_f16(x), h, "{h:#06x} -> {x:e}");
        }
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(bf16_to_f32(0xc040), -3.0);
        assert_eq!(f16_to_f32(0x0001), 5.960_464_5e-8);
        assert_eq!(f16_to_f32(0x8001), -5.960_464_5e-8);
    }
}
