//! HDR latency histogram (log-linear buckets, fixed relative precision).
//!
//! Written here rather than taken from the `hdrhistogram` crate because we need
//! behaviour that crate does not give as-is: values above the trackable range are
//! clamped *and counted* (`clamped`), the mean is exact (a running sum, not a
//! bucket estimate), and merging histograms with different layouts is allowed.
//! The bucket layout is Gil Tene's HdrHistogram layout, so the precision
//! guarantee is the familiar one: a reported value is within a relative
//! `10^-significant_figures` of the exact value, for values >= `lowest`.
//!
//! Layout: bucket `b` covers `[2^b * S/2, 2^(b+1) * S/2)` (bucket 0 covers `[0, S)`)
//! in units of `2^unit_magnitude`, split into `S/2` linear sub-buckets, where
//! `S = sub_bucket_count` is the smallest power of two `>= 2 * 10^significant_figures`.

use std::fmt;

/// Summary figures in nanoseconds, as used in run summaries.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HistogramSummary {
    pub count: u64,
    pub min: u64,
    pub max: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub clamped: u64,
}

/// Why a histogram could not be built or queried.
#[derive(Clone, Debug, PartialEq)]
pub enum HistogramError {
    /// `lowest`, `highest` or `significant_figures` out of range; the text says which and why.
    InvalidConfig(String),
    /// A percentile outside `0..=100` (or NaN).
    PercentileOutOfRange(f64),
}

impl fmt::Display for HistogramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistogramError::InvalidConfig(msg) => write!(f, "invalid histogram configuration: {msg}"),
            HistogramError::PercentileOutOfRange(p) => {
                write!(f, "percentile {p} is out of range: use a value in 0..=100")
            }
        }
    }
}

impl std::error::Error for HistogramError {}

/// Latency histogram over `u64` nanoseconds.
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    lowest: u64,
    highest: u64,
    significant_figures: u8,
    unit_magnitude: u32,
    sub_bucket_half_count_magnitude: u32,
    sub_bucket_count: u64,
    sub_bucket_half_count: u64,
    sub_bucket_mask: u64,
    leading_zero_count_base: u32,
    counts: Vec<u64>,
    total: u64,
    sum: u128,
    min: u64,
    max: u64,
    clamped: u64,
}

/// Default range: 1 ns .. 1 hour, 3 significant figures.
pub const DEFAULT_LOWEST_NS: u64 = 1;
pub const DEFAULT_HIGHEST_NS: u64 = 3_600_000_000_000;
pub const DEFAULT_SIGNIFICANT_FIGURES: u8 = 3;

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new(DEFAULT_LOWEST_NS, DEFAULT_HIGHEST_NS, DEFAULT_SIGNIFICANT_FIGURES)
            .expect("default histogram configuration is valid")
    }
}

impl LatencyHistogram {
    /// `lowest >= 1`, `highest >= 2 * lowest`, `significant_figures` in `1..=5`.
    pub fn new(lowest: u64, highest: u64, significant_figures: u8) -> Result<Self, HistogramError> {
        if lowest < 1 {
            return Err(HistogramError::InvalidConfig("lowest must be >= 1 ns".to_string()));
        }
        if highest < lowest.saturating_mul(2) {
            return Err(HistogramError::InvalidConfig(format!(
                "highest ({highest}) must be at least twice lowest ({lowest})"
            )));
        }
        if !(1..=5).contains(&significant_figures) {
            return Err(HistogramError::InvalidConfig(format!(
                "significant_figures must be in 1..=5, got {significant_figures}"
            )));
        }
        let largest_single_unit = 2 * 10u64.pow(u32::from(significant_figures));
        let sub_bucket_count_magnitude = 64 - (largest_single_unit - 1).leading_zeros();
        let sub_bucket_half_count_magnitude = sub_bucket_count_magnitude.max(1) - 1;
        let unit_magnitude = 63 - lowest.leading_zeros();
        if unit_magnitude + sub_bucket_half_count_magnitude + 1 > 62 {
            return Err(HistogramError::InvalidConfig(format!(
                "lowest ({lowest}) is too large for {significant_figures} significant figures"
            )));
        }
        let sub_bucket_count = 1u64 << (sub_bucket_half_count_magnitude + 1);
        let sub_bucket_half_count = sub_bucket_count / 2;
        let sub_bucket_mask = (sub_bucket_count - 1) << unit_magnitude;

        let mut smallest_untrackable = sub_bucket_count << unit_magnitude;
        let mut bucket_count: u64 = 1;
        while smallest_untrackable <= highest {
            if smallest_untrackable > u64::MAX / 2 {
                bucket_count += 1;
                break;
            }
            smallest_untrackable <<= 1;
            bucket_count += 1;
        }
        let counts_len = ((bucket_count + 1) * sub_bucket_half_count) as usize;
        Ok(LatencyHistogram {
            lowest,
            highest,
            significant_figures,
            unit_magnitude,
            sub_bucket_half_count_magnitude,
            sub_bucket_count,
            sub_bucket_half_count,
            sub_bucket_mask,
            leading_zero_count_base: 64 - unit_magnitude - sub_bucket_half_count_magnitude - 1,
            counts: vec![0; counts_len],
            total: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
            clamped: 0,
        })
    }

    pub fn lowest(&self) -> u64 {
        self.lowest
    }

    pub fn highest(&self) -> u64 {
        self.highest
    }

    pub fn significant_figures(&self) -> u8 {
        self.significant_figures
    }

    /// Record one value. Values above `highest` are recorded as `highest` and counted in `clamped`.
    pub fn record(&mut self, value_ns: u64) {
        self.record_n(value_ns, 1);
    }

    /// Record `count` occurrences of one value.
    pub fn record_n(&mut self, value_ns: u64, count: u64) {
        if count == 0 {
            return;
        }
        let value = if value_ns > self.highest {
            self.clamped = self.clamped.saturating_add(count);
            self.highest
        } else {
            value_ns
        };
        let index = self.counts_index_for(value);
        self.counts[index] = self.counts[index].saturating_add(count);
        self.total = self.total.saturating_add(count);
        self.sum += u128::from(value) * u128::from(count);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Record every value of a slice.
    pub fn record_many(&mut self, values_ns: &[u64]) {
        for &v in values_ns {
            self.record(v);
        }
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// Values recorded as `highest` because they were larger.
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// Smallest recorded value (exact); 0 when empty.
    pub fn min(&self) -> u64 {
        if self.total == 0 {
            0
        } else {
            self.min
        }
    }

    /// Largest recorded value (exact, after clamping); 0 when empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Exact mean of the recorded (clamped) values; 0.0 when empty.
    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    /// Value at percentile `p` (0..=100), nearest-rank: the smallest recorded value such that
    /// at least `ceil(p/100 * count)` values (at least one) are <= it. Reported as the highest
    /// value equivalent to its bucket, kept within `[min, max]`; 0 when empty.
    pub fn percentile(&self, p: f64) -> Result<u64, HistogramError> {
        if !(0.0..=100.0).contains(&p) {
            return Err(HistogramError::PercentileOutOfRange(p));
        }
        if self.total == 0 {
            return Ok(0);
        }
        let target = percentile_rank(p, self.total);
        let mut seen = 0u64;
        for (index, &c) in self.counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            seen += c;
            if seen >= target {
                let value = self.highest_equivalent(self.value_from_index(index));
                return Ok(value.clamp(self.min, self.max));
            }
        }
        Ok(self.max)
    }

    pub fn summary(&self) -> HistogramSummary {
        let pct = |p: f64| self.percentile(p).unwrap_or(0);
        HistogramSummary {
            count: self.total,
            min: self.min(),
            max: self.max(),
            mean: self.mean(),
            p50: pct(50.0),
            p90: pct(90.0),
            p99: pct(99.0),
            p999: pct(99.9),
            clamped: self.clamped,
        }
    }

    pub fn reset(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.total = 0;
        self.sum = 0;
        self.min = u64::MAX;
        self.max = 0;
        self.clamped = 0;
    }

    /// Add every value of `other`. Same layout: exact bucket-wise addition. Different layout:
    /// each of `other`'s buckets is re-recorded at its midpoint (precision of the coarser one).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        if other.total == 0 {
            return;
        }
        if self.same_layout(other) {
            for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
                *mine = mine.saturating_add(*theirs);
            }
            self.total = self.total.saturating_add(other.total);
            self.sum += other.sum;
            self.min = self.min.min(other.min);
            self.max = self.max.max(other.max);
            self.clamped = self.clamped.saturating_add(other.clamped);
            return;
        }
        for (index, &c) in other.counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let value = other.median_equivalent(other.value_from_index(index)).clamp(other.min, other.max);
            self.record_n(value, c);
        }
        // Exact extremes survive a re-layout even though the interior does not.
        for extreme in [other.min, other.max] {
            let v = extreme.min(self.highest);
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        // Values clamped by `other` were above its range; they stay counted as clamped.
        self.clamped = self.clamped.saturating_add(other.clamped);
    }

    /// Width of the bucket that holds `value`: the resolution at that value.
    pub fn equivalent_range(&self, value: u64) -> u64 {
        let bucket = self.bucket_index(value);
        let sub = self.sub_bucket_index(value, bucket);
        let adjusted = if sub >= self.sub_bucket_count { bucket + 1 } else { bucket };
        1u64 << (self.unit_magnitude + adjusted)
    }

    /// Number of counters (memory is 8 bytes each).
    pub fn bucket_len(&self) -> usize {
        self.counts.len()
    }

    fn same_layout(&self, other: &LatencyHistogram) -> bool {
        self.lowest == other.lowest
            && self.highest == other.highest
            && self.significant_figures == other.significant_figures
    }

    fn bucket_index(&self, value: u64) -> u32 {
        self.leading_zero_count_base - (value | self.sub_bucket_mask).leading_zeros()
    }

    fn sub_bucket_index(&self, value: u64, bucket: u32) -> u64 {
        value >> (bucket + self.unit_magnitude)
    }

    fn counts_index_for(&self, value: u64) -> usize {
        let bucket = self.bucket_index(value);
        let sub = self.sub_bucket_index(value, bucket);
        let base = (u64::from(bucket) + 1) << self.sub_bucket_half_count_magnitude;
        (base + sub - self.sub_bucket_half_count) as usize
    }

    fn value_from_index(&self, index: usize) -> u64 {
        let index = index as u64;
        let mut bucket = (index >> self.sub_bucket_half_count_magnitude) as i64 - 1;
        let mut sub = (index & (self.sub_bucket_half_count - 1)) + self.sub_bucket_half_count;
        if bucket < 0 {
            sub -= self.sub_bucket_half_count;
            bucket = 0;
        }
        sub << (bucket as u32 + self.unit_magnitude)
    }

    fn lowest_equivalent(&self, value: u64) -> u64 {
        let bucket = self.bucket_index(value);
        let sub = self.sub_bucket_index(value, bucket);
        sub << (bucket + self.unit_magnitude)
    }

    fn highest_equivalent(&self, value: u64) -> u64 {
        self.lowest_equivalent(value).saturating_add(self.equivalent_range(value)).saturating_sub(1)
    }

    fn median_equivalent(&self, value: u64) -> u64 {
        self.lowest_equivalent(value).saturating_add(self.equivalent_range(value) / 2)
    }
}

/// Nearest rank for percentile `p` of `total` values: `max(1, ceil(p/100 * total))`.
/// A relative nudge absorbs floating-point noise (99.9% of 1000 must be rank 999, not 1000).
pub fn percentile_rank(p: f64, total: u64) -> u64 {
    let exact = p / 100.0 * total as f64;
    let rank = (exact - exact * 1e-12).ceil() as u64;
    rank.clamp(1, total.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_configuration() {
        assert!(matches!(LatencyHistogram::new(0, 100, 3), Err(HistogramError::InvalidConfig(_))));
        assert!(matches!(LatencyHistogram::new(10, 15, 3), Err(HistogramError::InvalidConfig(_))));
        assert!(matches!(LatencyHistogram::new(1, 100, 0), Err(HistogramError::InvalidConfig(_))));
        assert!(matches!(LatencyHistogram::new(1, 100, 6), Err(HistogramError::InvalidConfig(_))));
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = LatencyHistogram::default();
        for v in 0..2048u64 {
            h.record(v);
        }
        assert_eq!(h.count(), 2048);
        assert_eq!(h.min(), 0);
        assert_eq!(h.max(), 2047);
        assert_eq!(h.percentile(50.0).unwrap(), 1023);
        assert_eq!(h.percentile(100.0).unwrap(), 2047);
        assert_eq!(h.percentile(0.0).unwrap(), 0);
    }

    #[test]
    fn clamps_and_counts_values_above_highest() {
        let mut h = LatencyHistogram::new(1, 1_000_000, 3).unwrap();
        h.record(5_000_000);
        h.record_n(2_000_000, 2);
        h.record(10);
        assert_eq!(h.count(), 4);
        assert_eq!(h.clamped(), 3);
        assert_eq!(h.max(), 1_000_000);
        assert_eq!(h.percentile(100.0).unwrap(), 1_000_000);
    }

    #[test]
    fn mean_is_exact() {
        let mut h = LatencyHistogram::default();
        h.record_many(&[1_000_001, 2_000_003, 3_000_005]);
        assert_eq!(h.mean(), 2_000_003.0);
    }

    #[test]
    fn percentile_rejects_out_of_range() {
        let h = LatencyHistogram::default();
        assert_eq!(h.percentile(100.5), Err(HistogramError::PercentileOutOfRange(100.5)));
        assert!(h.percentile(f64::NAN).is_err());
        assert!(h.percentile(-1.0).is_err());
        assert_eq!(h.percentile(50.0), Ok(0));
    }

    #[test]
    fn nearest_rank_handles_float_noise() {
        assert_eq!(percentile_rank(99.9, 1000), 999);
        assert_eq!(percentile_rank(50.0, 3), 2);
        assert_eq!(percentile_rank(0.0, 10), 1);
        assert_eq!(percentile_rank(100.0, 10), 10);
    }

    #[test]
    fn merge_same_and_different_layouts() {
        let mut a = LatencyHistogram::default();
        let mut b = LatencyHistogram::default();
        a.record_many(&[100, 200]);
        b.record_many(&[300, 400_000]);
        a.merge(&b);
        assert_eq!(a.count(), 4);
        assert_eq!(a.max(), 400_000);
        assert_eq!(a.min(), 100);

        let mut coarse = LatencyHistogram::new(1, 1_000, 2).unwrap();
        coarse.record_n(5_000, 2); // clamped twice
        coarse.record(7);
        a.merge(&coarse);
        assert_eq!(a.count(), 7);
        assert_eq!(a.clamped(), 2);
        assert_eq!(a.min(), 7);
    }

    #[test]
    fn reset_clears_everything() {
        let mut h = LatencyHistogram::new(1, 100, 2).unwrap();
        h.record_many(&[1, 2, 500]);
        h.reset();
        assert_eq!(h.summary(), HistogramSummary::default());
    }
}
