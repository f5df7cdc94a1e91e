//! Memory-pool policy against a simple model: budgets, LRU order, reuse, statistics.

mod common;

use std::collections::HashMap;

use proptest::collection::vec;
use proptest::prelude::*;

use pygpukit_core::memory::{BlockId, MemoryPool, PoolConfig, PoolError, SizeClasses};

#[derive(Clone, Debug)]
enum Op {
    Acquire(u64),
    Release(usize),
    Discard(usize),
    Trim(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..20_000u64).prop_map(Op::Acquire),
        4 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::Discard),
        1 => (0..40_000u64).prop_map(Op::Trim),
    ]
}

/// What the pool should hold: bytes per block, in-use set, cached blocks in release order.
#[derive(Default)]
struct Model {
    bytes: HashMap<BlockId, u64>,
    in_use: Vec<BlockId>,
    cached: Vec<BlockId>,
    hits: u64,
    misses: u64,
    evictions: u64,
}

impl Model {
    fn cached_bytes(&self) -> u64 {
        self.cached.iter().map(|b| self.bytes[b]).sum()
    }
    fn in_use_bytes(&self) -> u64 {
        self.in_use.iter().map(|b| self.bytes[b]).sum()
    }
    fn evict_oldest(&mut self) -> BlockId {
        let id = self.cached.remove(0);
        self.bytes.remove(&id);
        self.evictions += 1;
        id
    }
}

proptest! {
    #![proptest_config(common::seeded(256, 0x5eed_0201))]

    #[test]
    fn pool_follows_the_lru_model(
        ops in vec(op(), 1..120),
        cache_budget in 0..40_000u64,
        device_budget in prop::option::of(20_000..80_000u64),
    ) {
        let classes = SizeClasses::new(256, 4).unwrap();
        let mut pool = MemoryPool::new(PoolConfig {
            size_classes: classes,
            cache_budget_bytes: cache_budget,
            device_budget_bytes: device_budget,
        }).unwrap();
        let mut m = Model::default();
        let mut known: Vec<BlockId> = Vec::new();
        for op in ops {
            match op {
                Op::Acquire(size) => {
                    let bytes = classes.round_up(size).unwrap();
                    let reuse = m.cached.iter().rposition(|b| m.bytes[b] == bytes);
                    match pool.acquire(size) {
                        Ok(g) => {
                            prop_assert_eq!(g.bytes, bytes);
                            if let Some(pos) = reuse {
                                let id = m.cached.remove(pos);
                                prop_assert!(g.reused);
                                prop_assert_eq!(g.block, id, "reuse takes the most recently released of the class");
                                prop_assert!(g.evicted.is_empty());
                                m.hits += 1;
                            } else {
                                prop_assert!(!g.reused);
                                let mut expected = Vec::new();
                                if let Some(budget) = device_budget {
                                    while m.in_use_bytes() + m.cached_bytes() + bytes > budget && !m.cached.is_empty() {
                                        expected.push(m.evict_oldest());
                                    }
                                }
                                prop_assert_eq!(&g.evicted, &expected, "device budget evicts oldest first");
                                m.misses += 1;
                                m.bytes.insert(g.block, bytes);
                                known.push(g.block);
                            }
                            m.in_use.push(g.block);
                        }
                        Err(PoolError::OverBudget { requested, in_use, budget }) => {
                            prop_assert!(reuse.is_none());
                            prop_assert_eq!((requested, in_use, Some(budget)), (bytes, m.in_use_bytes(), device_budget));
                            prop_assert!(in_use + requested > budget);
                        }
                        Err(e) => prop_assert!(false, "unexpected {:?}", e),
                    }
                }
                Op::Release(pick) if !known.is_empty() => {
                    let id = known[pick % known.len()];
                    let result = pool.release(id);
                    if let Some(pos) = m.in_use.iter().position(|&b| b == id) {
                        m.in_use.remove(pos);
                        m.cached.push(id);
                        let mut expected = Vec::new();
                        while m.cached_bytes() > cache_budget {
                            expected.push(m.evict_oldest());
                        }
                        prop_assert_eq!(result.unwrap(), expected, "release evicts least recently released first");
                    } else if m.cached.contains(&id) {
                        prop_assert_eq!(result, Err(PoolError::NotInUse(id)));
                    } else {
                        prop_assert_eq!(result, Err(PoolError::UnknownBlock(id)));
                    }
                }
                Op::Discard(pick) if !known.is_empty() => {
                    let id = known[pick % known.len()];
                    let result = pool.discard(id);
                    if let Some(pos) = m.in_use.iter().position(|&b| b == id) {
                        m.in_use.remove(pos);
                        m.bytes.remove(&id);
                        prop_assert!(result.is_ok());
                    } else if let Some(pos) = m.cached.iter().position(|&b| b == id) {
                        m.cached.remove(pos);
                        m.bytes.remove(&id);
                        prop_assert!(result.is_ok());
                    } else {
                        prop_assert_eq!(result, Err(PoolError::UnknownBlock(id)));
                    }
                }
                Op::Trim(target) => {
                    let mut expected = Vec::new();
                    while m.cached_bytes() > target {
                        expected.push(m.evict_oldest());
                    }
                    prop_assert_eq!(pool.trim(target), expected);
                }
                _ => {}
            }
            let s = pool.stats();
            prop_assert!(s.bytes_cached <= cache_budget, "cache over budget after an operation");
            if let Some(budget) = device_budget {
                prop_assert!(s.bytes_in_use + s.bytes_cached <= budget.max(s.bytes_in_use));
            }
            prop_assert_eq!(pool.cached_lru_order(), m.cached.clone());
            prop_assert_eq!((s.bytes_in_use, s.bytes_cached), (m.in_use_bytes(), m.cached_bytes()));
            prop_assert_eq!((s.blocks_in_use, s.blocks_cached), (m.in_use.len() as u64, m.cached.len() as u64));
            prop_assert_eq!((s.hits, s.misses, s.evictions), (m.hits, m.misses, m.evictions));
            prop_assert!(s.peak_bytes_in_use >= s.bytes_in_use);
            prop_assert!(s.peak_bytes_reserved >= s.bytes_in_use + s.bytes_cached);
        }
    }
}
