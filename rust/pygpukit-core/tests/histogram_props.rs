//! Histogram accuracy against exact order statistics.

mod common;

use proptest::collection::vec;
use proptest::prelude::*;

use pygpukit_core::histogram::LatencyHistogram;

/// Values spread over many magnitudes: mantissa * 2^exponent.
fn value() -> impl Strategy<Value = u64> {
    (1..1_000_000u64, 0..22u32).prop_map(|(m, e)| m << e)
}

/// Exact nearest-rank value for a percentile given in thousandths (0..=100_000).
fn exact_percentile(sorted: &[u64], p_milli: u64) -> u64 {
    let n = sorted.len() as u64;
    let rank = (p_milli * n).div_ceil(100_000).max(1);
    sorted[(rank - 1) as usize]
}

proptest! {
    #![proptest_config(common::seeded(256, 0x5eed_0101))]

    /// Every percentile is within the stated precision of the exact order statistic:
    /// |reported - exact| <= max(exact * 10^-sf, lowest). Count, min, max and mean are exact.
    #[test]
    fn percentiles_are_within_the_stated_precision(
        values in vec(value(), 1..600),
        sig in 1..=4u8,
        lowest_pow in 0..4u32,
        extra_p in vec(0..=100_000u64, 4),
    ) {
        let lowest = 10u64.pow(lowest_pow);
        let mut h = LatencyHistogram::new(lowest, 3_600_000_000_000, sig).unwrap();
        h.record_many(&values);
        let mut sorted = values.clone();
        sorted.sort_unstable();
        prop_assert_eq!(h.count(), values.len() as u64);
        prop_assert_eq!(h.min(), sorted[0]);
        prop_assert_eq!(h.max(), *sorted.last().unwrap());
        let mean = values.iter().map(|&v| v as f64).sum::<f64>() / values.len() as f64;
        prop_assert!((h.mean() - mean).abs() <= mean * 1e-12);
        let tolerance_of = |exact: u64| ((exact as f64) / 10f64.powi(i32::from(sig))).max(lowest as f64);
        let fixed = [0u64, 1_000, 25_000, 50_000, 90_000, 99_000, 99_900, 100_000];
        for p_milli in fixed.iter().copied().chain(extra_p) {
            let exact = exact_percentile(&sorted, p_milli);
            let got = h.percentile(p_milli as f64 / 1000.0).unwrap();
            let diff = got.abs_diff(exact) as f64;
            prop_assert!(diff <= tolerance_of(exact),
                "p{} got {} exact {} (sig {}, lowest {})", p_milli as f64 / 1000.0, got, exact, sig, lowest);
        }
    }

    /// Merging two histograms of one layout equals recording everything in one.
    #[test]
    fn merge_equals_recording_everything(a in vec(value(), 0..200), b in vec(value(), 0..200)) {
        let mut ha = LatencyHistogram::default();
        let mut hb = LatencyHistogram::default();
        let mut all = LatencyHistogram::default();
        ha.record_many(&a);
        hb.record_many(&b);
        all.record_many(&a);
        all.record_many(&b);
        ha.merge(&hb);
        prop_assert_eq!(ha.summary(), all.summary());
    }

    /// Values above `highest` are never dropped: they are counted, and clamped to `highest`.
    #[test]
    fn clamped_values_are_counted(values in vec(0..2_000_000u64, 1..300)) {
        let highest = 1_000_000;
        let mut h = LatencyHistogram::new(1, highest, 3).unwrap();
        h.record_many(&values);
        let above = values.iter().filter(|&&v| v > highest).count() as u64;
        prop_assert_eq!(h.count(), values.len() as u64);
        prop_assert_eq!(h.clamped(), above);
        prop_assert!(h.max() <= highest);
        if above > 0 {
            prop_assert_eq!(h.max(), highest);
            prop_assert_eq!(h.percentile(100.0).unwrap(), highest);
        }
    }
}
