//! The paired-test statistics `herd eval compare` reports. Pure functions, table-tested.

/// McNemar's exact test: the two-sided binomial test of the discordant pairs (`b` = A right and B
/// wrong, `c` = the reverse) against p = 0.5, capped at 1. Summed in log space so that a large
/// b + c neither overflows the binomial coefficients nor underflows 0.5^n.
pub fn mcnemar_exact(b: u64, c: u64) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c);
    let ln_half_n = n as f64 * 0.5f64.ln();
    // ln C(n, i) built incrementally; the tail sum uses log-sum-exp around its largest term.
    let mut terms = Vec::with_capacity(k as usize + 1);
    let mut ln_c = 0.0f64;
    for i in 0..=k {
        if i > 0 {
            ln_c += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        terms.push(ln_c + ln_half_n);
    }
    let max = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let ln_tail = max + terms.iter().map(|t| (t - max).exp()).sum::<f64>().ln();
    (2.0 * ln_tail.exp()).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Standard normal upper tail via libm's erfc.
    fn normal_two_sided(z: f64) -> f64 {
        libm::erfc(z / std::f64::consts::SQRT_2)
    }

    #[test]
    fn known_tables() {
        let cases = [
            (6, 6, 1.0),
            (10, 0, 0.001953125),
            (0, 10, 0.001953125),
            (0, 0, 1.0),
            (1, 0, 1.0),
            (5, 1, 0.21875),
        ];
        for (b, c, want) in cases {
            let p = mcnemar_exact(b, c);
            assert!((p - want).abs() < 1e-9, "b={b} c={c}: {p} != {want}");
        }
        assert_eq!(format!("{:.5}", mcnemar_exact(10, 0)), "0.00195");
    }

    #[test]
    fn large_tables_match_the_normal_approximation() {
        for (b, c) in [(4000u64, 4200u64), (50_000, 50_600), (900, 1000)] {
            let exact = mcnemar_exact(b, c);
            // Continuity-corrected z for the binomial against its normal limit.
            let z = ((b as f64 - c as f64).abs() - 1.0) / ((b + c) as f64).sqrt();
            let approx = normal_two_sided(z);
            assert!(exact > 0.0 && exact < 1.0, "b={b} c={c}: {exact}");
            assert!(
                (exact - approx).abs() < 1e-3,
                "b={b} c={c}: {exact} vs {approx}"
            );
        }
    }
}
