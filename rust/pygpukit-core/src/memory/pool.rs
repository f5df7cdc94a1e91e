//! Size-class pool with reuse and LRU eviction of idle cached blocks.
//!
//! * `acquire(size)` reuses the most recently released cached block of the size's
//!   class (a hit) or tells the caller to allocate a new block (a miss).
//! * `release(block)` caches the block; when cached bytes exceed the cache budget,
//!   the least recently released cached blocks are evicted (returned for freeing).
//! * An optional device budget caps in-use + cached bytes: a miss first evicts
//!   cached blocks to make room, and is refused if in-use blocks alone leave none.
//!
//! LRU order is by a release counter, not a clock, so it is deterministic.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::size_class::{SizeClassError, SizeClasses};

/// Block identifier, unique per pool, starting at 1 (0 means "none" in the C ABI).
pub type BlockId = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    pub size_classes: SizeClasses,
    /// Most idle bytes kept cached; beyond it the least recently used are evicted.
    pub cache_budget_bytes: u64,
    /// Cap on in-use + cached bytes; `None` = unlimited.
    pub device_budget_bytes: Option<u64>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig { size_classes: SizeClasses::default(), cache_budget_bytes: 256 << 20, device_budget_bytes: None }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum BlockState {
    InUse = 0,
    Cached = 1,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    pub id: BlockId,
    /// Bytes of the block (its class size).
    pub bytes: u64,
    /// Bytes asked for by the current (or last) user.
    pub requested: u64,
    pub state: BlockState,
}

/// Answer to `acquire`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub block: BlockId,
    pub bytes: u64,
    /// `true`: an existing cached block, use its device memory as is.
    /// `false`: a new id; free `evicted` first, then allocate `bytes` for it.
    pub reused: bool,
    pub evicted: Vec<BlockId>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolError {
    InvalidConfig(String),
    Size(SizeClassError),
    UnknownBlock(BlockId),
    /// `release` of a block that is already cached (a double release).
    NotInUse(BlockId),
    /// In-use blocks alone leave no room for `requested` bytes under the device budget.
    OverBudget {
        requested: u64,
        in_use: u64,
        budget: u64,
    },
}

impl PoolError {
    /// Status code used by the C ABI (`GK_ERR_*` in `sched_abi.h`).
    pub fn code(&self) -> i32 {
        match self {
            PoolError::InvalidConfig(_) | PoolError::Size(_) => -1,
            PoolError::UnknownBlock(_) => -9,
            PoolError::NotInUse(_) => -10,
            PoolError::OverBudget { .. } => -11,
        }
    }
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::InvalidConfig(m) => write!(f, "invalid pool configuration: {m}"),
            PoolError::Size(e) => e.fmt(f),
            PoolError::UnknownBlock(id) => write!(f, "unknown block id {id} (never acquired, evicted or discarded)"),
            PoolError::NotInUse(id) => write!(f, "block {id} is already released (double release?)"),
            PoolError::OverBudget { requested, in_use, budget } => write!(
                f,
                "cannot allocate {requested} bytes: {in_use} bytes in use + {requested} exceed the device budget of {budget} bytes \
                 (release blocks or raise the budget)"
            ),
        }
    }
}

impl std::error::Error for PoolError {}

impl From<SizeClassError> for PoolError {
    fn from(e: SizeClassError) -> Self {
        PoolError::Size(e)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub bytes_in_use: u64,
    pub bytes_cached: u64,
    pub blocks_in_use: u64,
    pub blocks_cached: u64,
    /// Bytes the in-use blocks' users asked for (vs `bytes_in_use`: the rounding waste).
    pub bytes_requested_in_use: u64,
    pub peak_bytes_in_use: u64,
    /// Peak of in-use + cached: the most device memory the pool held at once.
    pub peak_bytes_reserved: u64,
    pub cache_budget_bytes: u64,
    /// 0 when unlimited.
    pub device_budget_bytes: u64,
}

#[derive(Clone, Copy, Debug)]
struct Block {
    class: u32,
    bytes: u64,
    requested: u64,
    state: BlockState,
    tick: u64,
}

/// The pool policy.
#[derive(Clone, Debug)]
pub struct MemoryPool {
    config: PoolConfig,
    blocks: HashMap<BlockId, Block>,
    /// Cached blocks per class, keyed by release tick (last = most recent).
    cached_by_class: HashMap<u32, BTreeMap<u64, BlockId>>,
    /// All cached blocks by release tick (first = least recently used).
    lru: BTreeMap<u64, BlockId>,
    next_block: BlockId,
    tick: u64,
    stats: PoolStats,
}

impl MemoryPool {
    pub fn new(config: PoolConfig) -> Result<Self, PoolError> {
        if let Some(budget) = config.device_budget_bytes {
            if budget == 0 {
                return Err(PoolError::InvalidConfig("device_budget_bytes must be > 0 (or unset)".into()));
            }
        }
        Ok(MemoryPool {
            config,
            blocks: HashMap::new(),
            cached_by_class: HashMap::new(),
            lru: BTreeMap::new(),
            next_block: 1,
            tick: 0,
            stats: PoolStats {
                cache_budget_bytes: config.cache_budget_bytes,
                device_budget_bytes: config.device_budget_bytes.unwrap_or(0),
                ..PoolStats::default()
            },
        })
    }

    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Reuse a cached block of `size`'s class, or hand out a new id to allocate.
    pub fn acquire(&mut self, size: u64) -> Result<Grant, PoolError> {
        let sc = self.config.size_classes;
        let class = sc.class_of(size)?;
        let bytes = sc.class_size(class);
        if let Some(id) = self.cached_by_class.get_mut(&class).and_then(|m| m.pop_last().map(|(_, id)| id)) {
            let block = self.blocks.get_mut(&id).expect("cached block is known");
            self.lru.remove(&block.tick);
            block.state = BlockState::InUse;
            block.requested = size;
            self.stats.hits += 1;
            self.stats.bytes_cached -= bytes;
            self.stats.blocks_cached -= 1;
            self.take_in_use(bytes, size);
            return Ok(Grant { block: id, bytes, reused: true, evicted: Vec::new() });
        }
        let mut evicted = Vec::new();
        if let Some(budget) = self.config.device_budget_bytes {
            if self.stats.bytes_in_use.saturating_add(bytes) > budget {
                return Err(PoolError::OverBudget { requested: bytes, in_use: self.stats.bytes_in_use, budget });
            }
            while self.stats.bytes_in_use + self.stats.bytes_cached + bytes > budget {
                match self.evict_lru() {
                    Some(id) => evicted.push(id),
                    None => break,
                }
            }
        }
        self.stats.misses += 1;
        let id = self.next_block;
        self.next_block += 1;
        self.blocks.insert(id, Block { class, bytes, requested: size, state: BlockState::InUse, tick: 0 });
        self.take_in_use(bytes, size);
        Ok(Grant { block: id, bytes, reused: false, evicted })
    }

    /// Return a block to the cache; returns the blocks evicted to stay under the cache budget.
    pub fn release(&mut self, id: BlockId) -> Result<Vec<BlockId>, PoolError> {
        self.tick += 1;
        let tick = self.tick;
        let block = self.blocks.get_mut(&id).ok_or(PoolError::UnknownBlock(id))?;
        if block.state != BlockState::InUse {
            return Err(PoolError::NotInUse(id));
        }
        block.state = BlockState::Cached;
        block.tick = tick;
        let (class, bytes, requested) = (block.class, block.bytes, block.requested);
        self.cached_by_class.entry(class).or_default().insert(tick, id);
        self.lru.insert(tick, id);
        self.stats.bytes_in_use -= bytes;
        self.stats.blocks_in_use -= 1;
        self.stats.bytes_requested_in_use -= requested;
        self.stats.bytes_cached += bytes;
        self.stats.blocks_cached += 1;
        self.note_peaks();
        let budget = self.config.cache_budget_bytes;
        Ok(self.evict_until(budget))
    }

    /// Forget a block the caller has freed itself (e.g. its allocation failed). Any state.
    pub fn discard(&mut self, id: BlockId) -> Result<(), PoolError> {
        let block = self.blocks.remove(&id).ok_or(PoolError::UnknownBlock(id))?;
        match block.state {
            BlockState::InUse => {
                self.stats.bytes_in_use -= block.bytes;
                self.stats.blocks_in_use -= 1;
                self.stats.bytes_requested_in_use -= block.requested;
            }
            BlockState::Cached => {
                self.lru.remove(&block.tick);
                if let Some(m) = self.cached_by_class.get_mut(&block.class) {
                    m.remove(&block.tick);
                }
                self.stats.bytes_cached -= block.bytes;
                self.stats.blocks_cached -= 1;
            }
        }
        Ok(())
    }

    /// Evict least recently used cached blocks until at most `target_cached_bytes` stay cached.
    pub fn trim(&mut self, target_cached_bytes: u64) -> Vec<BlockId> {
        self.evict_until(target_cached_bytes)
    }

    pub fn block(&self, id: BlockId) -> Option<BlockInfo> {
        self.blocks.get(&id).map(|b| BlockInfo { id, bytes: b.bytes, requested: b.requested, state: b.state })
    }

    /// Cached block ids, least recently used first.
    pub fn cached_lru_order(&self) -> Vec<BlockId> {
        self.lru.values().copied().collect()
    }

    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    fn take_in_use(&mut self, bytes: u64, requested: u64) {
        self.stats.bytes_in_use += bytes;
        self.stats.blocks_in_use += 1;
        self.stats.bytes_requested_in_use += requested;
        self.note_peaks();
    }

    fn note_peaks(&mut self) {
        let s = &mut self.stats;
        s.peak_bytes_in_use = s.peak_bytes_in_use.max(s.bytes_in_use);
        s.peak_bytes_reserved = s.peak_bytes_reserved.max(s.bytes_in_use + s.bytes_cached);
    }

    fn evict_until(&mut self, target_cached_bytes: u64) -> Vec<BlockId> {
        let mut evicted = Vec::new();
        while self.stats.bytes_cached > target_cached_bytes {
            match self.evict_lru() {
                Some(id) => evicted.push(id),
                None => break,
            }
        }
        evicted
    }

    fn evict_lru(&mut self) -> Option<BlockId> {
        let (tick, id) = self.lru.pop_first()?;
        let block = self.blocks.remove(&id).expect("cached block is known");
        if let Some(m) = self.cached_by_class.get_mut(&block.class) {
            m.remove(&tick);
        }
        self.stats.bytes_cached -= block.bytes;
        self.stats.blocks_cached -= 1;
        self.stats.evictions += 1;
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(cache: u64, device: Option<u64>) -> MemoryPool {
        MemoryPool::new(PoolConfig {
            size_classes: SizeClasses::new(256, 4).unwrap(),
            cache_budget_bytes: cache,
            device_budget_bytes: device,
        })
        .unwrap()
    }

    #[test]
    fn miss_then_hit_in_the_same_class() {
        let mut p = pool(1 << 20, None);
        let g = p.acquire(1000).unwrap();
        assert_eq!((g.bytes, g.reused), (1024, false));
        assert!(p.release(g.block).unwrap().is_empty());
        let again = p.acquire(900).unwrap(); // 900 -> 1024 class as well
        assert_eq!((again.block, again.reused), (g.block, true));
        assert_eq!(p.block(g.block).unwrap().requested, 900);
        let other = p.acquire(2000).unwrap();
        assert!(!other.reused);
        let s = p.stats();
        assert_eq!((s.hits, s.misses, s.blocks_in_use, s.bytes_in_use), (1, 2, 2, 1024 + 2048));
        assert_eq!(s.bytes_requested_in_use, 2900);
    }

    #[test]
    fn cache_budget_evicts_least_recently_released() {
        let mut p = pool(2048, None);
        let a = p.acquire(1024).unwrap().block;
        let b = p.acquire(1024).unwrap().block;
        let c = p.acquire(1024).unwrap().block;
        assert!(p.release(a).unwrap().is_empty());
        assert!(p.release(b).unwrap().is_empty());
        assert_eq!(p.release(c).unwrap(), vec![a]);
        assert_eq!(p.cached_lru_order(), vec![b, c]);
        assert_eq!(p.stats().evictions, 1);
        assert_eq!(p.block(a), None);
        // Reuse picks the most recently released.
        assert_eq!(p.acquire(1024).unwrap().block, c);
    }

    #[test]
    fn device_budget_evicts_then_refuses() {
        let mut p = pool(1 << 20, Some(4096));
        let a = p.acquire(2048).unwrap().block;
        p.release(a).unwrap();
        let big = p.acquire(3000).unwrap(); // 3072: 2048 cached + 3072 > 4096 -> evict a
        assert_eq!(big.evicted, vec![a]);
        assert_eq!(big.bytes, 3072);
        let err = p.acquire(2048).unwrap_err();
        assert_eq!(err, PoolError::OverBudget { requested: 2048, in_use: 3072, budget: 4096 });
        assert!(err.to_string().contains("device budget"));
    }

    #[test]
    fn double_release_and_unknown_blocks() {
        let mut p = pool(1 << 20, None);
        let a = p.acquire(10).unwrap().block;
        p.release(a).unwrap();
        assert_eq!(p.release(a), Err(PoolError::NotInUse(a)));
        assert_eq!(p.release(999), Err(PoolError::UnknownBlock(999)));
        p.discard(a).unwrap();
        assert_eq!(p.stats().bytes_cached, 0);
        assert_eq!(p.discard(a), Err(PoolError::UnknownBlock(a)));
        assert!(matches!(p.acquire(0), Err(PoolError::Size(SizeClassError::ZeroSize))));
    }

    #[test]
    fn trim_and_peaks() {
        let mut p = pool(1 << 20, None);
        let ids: Vec<_> = (0..4).map(|_| p.acquire(512).unwrap().block).collect();
        for &id in &ids {
            p.release(id).unwrap();
        }
        assert_eq!(p.trim(1024), vec![ids[0], ids[1]]);
        assert_eq!(p.trim(0), vec![ids[2], ids[3]]);
        let s = p.stats();
        assert_eq!((s.peak_bytes_in_use, s.peak_bytes_reserved, s.bytes_cached), (2048, 2048, 0));
    }

    #[test]
    fn zero_device_budget_is_refused() {
        let cfg = PoolConfig { device_budget_bytes: Some(0), ..PoolConfig::default() };
        assert!(matches!(MemoryPool::new(cfg), Err(PoolError::InvalidConfig(_))));
    }
}
