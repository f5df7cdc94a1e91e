#![allow(dead_code)]

use proptest::test_runner::{Config, RngSeed};

/// Seeded, no regression files written into the source tree: runs are reproducible.
pub fn seeded(cases: u32, seed: u64) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..Config::default()
    }
}
