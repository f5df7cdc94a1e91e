//! Size classes: geometric steps, `steps_per_doubling` classes per power of two.
//!
//! With `min_bytes = 256` and 4 steps: 256, 320, 384, 448, 512, 640, 768, 896, 1024, ...
//! A request is rounded up to its class, so internal waste is below `1/steps_per_doubling`
//! of the request (25% with 4 steps) and blocks of one class are interchangeable.

use std::fmt;

/// Largest request the classes cover (4 EiB); anything larger is refused.
pub const MAX_REQUEST_BYTES: u64 = 1 << 62;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeClasses {
    min_bytes: u64,
    steps_per_doubling: u32,
    min_log2: u32,
    steps_log2: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SizeClassError {
    InvalidConfig(String),
    ZeroSize,
    TooLarge(u64),
}

impl fmt::Display for SizeClassError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeClassError::InvalidConfig(m) => write!(f, "invalid size classes: {m}"),
            SizeClassError::ZeroSize => write!(f, "cannot acquire a block of 0 bytes"),
            SizeClassError::TooLarge(s) => {
                write!(f, "request of {s} bytes exceeds the largest size class ({MAX_REQUEST_BYTES} bytes)")
            }
        }
    }
}

impl std::error::Error for SizeClassError {}

impl Default for SizeClasses {
    fn default() -> Self {
        SizeClasses::new(256, 4).expect("default size classes are valid")
    }
}

impl SizeClasses {
    /// `min_bytes` and `steps_per_doubling` must be powers of two, `steps_per_doubling <= min_bytes`
    /// (so every class is a whole number of bytes) and `steps_per_doubling <= 64`.
    pub fn new(min_bytes: u64, steps_per_doubling: u32) -> Result<Self, SizeClassError> {
        if !min_bytes.is_power_of_two() || min_bytes > MAX_REQUEST_BYTES {
            return Err(SizeClassError::InvalidConfig(format!(
                "min_bytes must be a power of two (e.g. 256), got {min_bytes}"
            )));
        }
        if !steps_per_doubling.is_power_of_two() || steps_per_doubling > 64 {
            return Err(SizeClassError::InvalidConfig(format!(
                "steps_per_doubling must be a power of two in 1..=64, got {steps_per_doubling}"
            )));
        }
        if u64::from(steps_per_doubling) > min_bytes {
            return Err(SizeClassError::InvalidConfig(format!(
                "steps_per_doubling ({steps_per_doubling}) must not exceed min_bytes ({min_bytes})"
            )));
        }
        Ok(SizeClasses {
            min_bytes,
            steps_per_doubling,
            min_log2: min_bytes.trailing_zeros(),
            steps_log2: steps_per_doubling.trailing_zeros(),
        })
    }

    pub fn min_bytes(&self) -> u64 {
        self.min_bytes
    }

    pub fn steps_per_doubling(&self) -> u32 {
        self.steps_per_doubling
    }

    /// Index of the smallest class that holds `size` bytes.
    pub fn class_of(&self, size: u64) -> Result<u32, SizeClassError> {
        if size == 0 {
            return Err(SizeClassError::ZeroSize);
        }
        if size > MAX_REQUEST_BYTES {
            return Err(SizeClassError::TooLarge(size));
        }
        if size <= self.min_bytes {
            return Ok(0);
        }
        // 2^octave < size <= 2^(octave+1)
        let octave = 63 - (size - 1).leading_zeros();
        let base = 1u64 << octave;
        let step = base >> self.steps_log2;
        let j = (size - base).div_ceil(step);
        Ok((octave - self.min_log2) * self.steps_per_doubling + j as u32)
    }

    /// Bytes of class `index`.
    pub fn class_size(&self, index: u32) -> u64 {
        let octave = index >> self.steps_log2;
        let j = u64::from(index & (self.steps_per_doubling - 1));
        let base = self.min_bytes << octave;
        base + j * (base >> self.steps_log2)
    }

    /// Bytes a request of `size` is rounded up to.
    pub fn round_up(&self, size: u64) -> Result<u64, SizeClassError> {
        self.class_of(size).map(|c| self.class_size(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometric_classes() {
        let c = SizeClasses::new(256, 4).unwrap();
        let sizes: Vec<u64> = (0..10).map(|i| c.class_size(i)).collect();
        assert_eq!(sizes, vec![256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280]);
        assert_eq!(c.round_up(1).unwrap(), 256);
        assert_eq!(c.round_up(256).unwrap(), 256);
        assert_eq!(c.round_up(257).unwrap(), 320);
        assert_eq!(c.round_up(512).unwrap(), 512);
        assert_eq!(c.round_up(513).unwrap(), 640);
        assert_eq!(c.round_up(64 << 20).unwrap(), 64 << 20);
        assert_eq!(c.round_up((64 << 20) + 1).unwrap(), 80 << 20);
    }

    #[test]
    fn powers_of_two_with_one_step() {
        let c = SizeClasses::new(1024, 1).unwrap();
        assert_eq!(c.round_up(1025).unwrap(), 2048);
        assert_eq!(c.round_up(3000).unwrap(), 4096);
        assert_eq!(c.class_of(4096).unwrap(), 2);
    }

    #[test]
    fn every_size_maps_to_the_smallest_class_that_holds_it() {
        let c = SizeClasses::new(16, 4).unwrap();
        for size in 1..5000u64 {
            let i = c.class_of(size).unwrap();
            assert!(c.class_size(i) >= size);
            if i > 0 {
                assert!(c.class_size(i - 1) < size, "size {size} class {i}");
            }
        }
    }

    #[test]
    fn bad_inputs() {
        assert!(SizeClasses::new(300, 4).is_err());
        assert!(SizeClasses::new(256, 3).is_err());
        assert!(SizeClasses::new(2, 4).is_err());
        let c = SizeClasses::default();
        assert_eq!(c.class_of(0), Err(SizeClassError::ZeroSize));
        assert_eq!(c.class_of(u64::MAX), Err(SizeClassError::TooLarge(u64::MAX)));
        assert_eq!(c.round_up(MAX_REQUEST_BYTES).unwrap(), MAX_REQUEST_BYTES);
    }
}
