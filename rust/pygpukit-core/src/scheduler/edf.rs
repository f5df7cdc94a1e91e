//! Earliest-deadline-first order among ready realtime tasks.
//!
//! Ties on the deadline go to the lower task id, i.e. the block submitted first,
//! so the dispatch order is a pure function of the submissions.

use std::collections::BTreeSet;

use super::task::TaskId;

#[derive(Clone, Debug, Default)]
pub struct EdfQueue {
    ready: BTreeSet<(u64, TaskId)>,
}

impl EdfQueue {
    pub fn new() -> Self {
        EdfQueue::default()
    }

    pub fn push(&mut self, deadline_ns: u64, task: TaskId) {
        self.ready.insert((deadline_ns, task));
    }

    /// Remove a task (cancelled or dropped while ready). Returns whether it was queued.
    pub fn remove(&mut self, deadline_ns: u64, task: TaskId) -> bool {
        self.ready.remove(&(deadline_ns, task))
    }

    /// The task to dispatch next: earliest deadline, then lowest id.
    pub fn pop(&mut self) -> Option<(u64, TaskId)> {
        self.ready.pop_first()
    }

    pub fn peek(&self) -> Option<(u64, TaskId)> {
        self.ready.first().copied()
    }

    pub fn len(&self) -> usize {
        self.ready.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ready.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_deadline_then_lowest_id() {
        let mut q = EdfQueue::new();
        q.push(30, 1);
        q.push(10, 5);
        q.push(10, 2);
        q.push(20, 3);
        assert_eq!(q.peek(), Some((10, 2)));
        assert!(q.remove(20, 3));
        assert!(!q.remove(20, 3));
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(10, 2), (10, 5), (30, 1)]);
        assert!(q.is_empty());
    }
}
