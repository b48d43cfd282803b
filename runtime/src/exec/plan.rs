//! Memory planning: one arena for every temporary of an execution.
//!
//! Each buffer is live from the operation that writes it to the last operation that
//! reads it (model outputs to the end). Buffers are placed greedily, largest first, each
//! at the best-fitting gap (the smallest one that holds it, lowest offset on ties)
//! between the already placed buffers whose lifetimes overlap its own; if none fits it
//! goes above them all. Offsets are multiples of [`ALIGN`](crate::buffer::ALIGN).
//! An operation's inputs and outputs are live at the same time, so they never share
//! memory; a buffer freed by an earlier operation is reused by later ones.

use crate::buffer::align_up;
use crate::error::{Result, RuntimeError};

/// One buffer to place: live over operations `first..=last`, `size` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub first: usize,
    pub last: usize,
    pub size: usize,
}

impl Interval {
    #[cfg(test)]
    fn overlaps(&self, other: &Interval) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// Where each buffer goes and how large the arena is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArenaPlan {
    pub offsets: Vec<usize>,
    pub arena_size: usize,
    /// Sum of the (aligned) buffer sizes: what the arena would be without reuse.
    pub total_size: usize,
}

/// Places `buffers` in one arena.
pub fn plan_arena(buffers: &[Interval]) -> Result<ArenaPlan> {
    let overflow = || RuntimeError::Internal("arena size overflows".into());
    let sizes: Vec<usize> = buffers
        .iter()
        .map(|b| align_up(b.size.max(1)).ok_or_else(overflow))
        .collect::<Result<_>>()?;
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    // Largest first; ties by earlier start, then index, for a deterministic plan.
    order.sort_by(|&a, &b| {
        sizes[b]
            .cmp(&sizes[a])
            .then(buffers[a].first.cmp(&buffers[b].first))
            .then(a.cmp(&b))
    });
    let mut offsets = vec![0usize; buffers.len()];
    let mut arena_size = 0usize;
    // The placed buffers live at each step, so that finding the ones a buffer's lifetime
    // overlaps costs its lifetime, not the number placed (a scan of every placed buffer
    // made long graphs quadratic). Lifetimes ending "never" (model outputs) end at the
    // last step any buffer starts or ends at.
    let horizon = buffers
        .iter()
        .flat_map(|b| [b.first, b.last])
        .filter(|&t| t != usize::MAX)
        .max()
        .unwrap_or(0);
    let span = |b: &Interval| b.first.min(horizon)..=b.last.min(horizon);
    let mut live_at: Vec<Vec<usize>> = vec![Vec::new(); horizon + 1];
    let mut seen = vec![usize::MAX; buffers.len()];
    for &i in &order {
        let size = sizes[i];
        let mut conflicts: Vec<(usize, usize)> = Vec::new();
        for t in span(&buffers[i]) {
            for &j in &live_at[t] {
                if seen[j] != i {
                    seen[j] = i;
                    conflicts.push((offsets[j], offsets[j] + sizes[j]));
                }
            }
        }
        conflicts.sort_unstable();
        let mut best: Option<(usize, usize)> = None; // (gap size, offset)
        let mut cursor = 0usize;
        for &(start, end) in &conflicts {
            if start > cursor {
                let gap = start - cursor;
                if gap >= size && best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, cursor));
                }
            }
            cursor = cursor.max(end);
        }
        let offset = match best {
            Some((_, offset)) => offset,
            None => cursor,
        };
        offsets[i] = offset;
        arena_size = arena_size.max(offset.checked_add(size).ok_or_else(overflow)?);
        for t in span(&buffers[i]) {
            live_at[t].push(i);
        }
    }
    let total_size = sizes
        .iter()
        .try_fold(0usize, |a, &s| a.checked_add(s))
        .ok_or_else(overflow)?;
    Ok(ArenaPlan {
        offsets,
        arena_size,
        total_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_no_conflicts(buffers: &[Interval], plan: &ArenaPlan) {
        for i in 0..buffers.len() {
            assert_eq!(plan.offsets[i] % crate::buffer::ALIGN, 0);
            assert!(plan.offsets[i] + buffers[i].size <= plan.arena_size);
            for j in 0..i {
                if buffers[i].overlaps(&buffers[j]) {
                    let (a0, a1) = (plan.offsets[i], plan.offsets[i] + buffers[i].size);
                    let (b0, b1) = (plan.offsets[j], plan.offsets[j] + buffers[j].size);
                    assert!(
                        a1 <= b0 || b1 <= a0,
                        "buffers {i} and {j} overlap in time and memory"
                    );
                }
            }
        }
    }

    #[test]
    fn chain_reuses_memory() {
        // t0 -> t1 -> t2 -> t3: each live over two operations.
        let buffers: Vec<Interval> = (0..4)
            .map(|i| Interval {
                first: i,
                last: i + 1,
                size: 1000,
            })
            .collect();
        let plan = plan_arena(&buffers).unwrap();
        check_no_conflicts(&buffers, &plan);
        assert_eq!(plan.arena_size, 2 * 1024);
        assert_eq!(plan.total_size, 4 * 1024);
    }

    #[test]
    fn random_lifetimes_never_conflict() {
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        for _ in 0..50 {
            let n = 1 + next() % 40;
            let buffers: Vec<Interval> = (0..n)
                .map(|_| {
                    let first = next() % 30;
                    Interval {
                        first,
                        last: first + next() % 6,
                        size: 1 + next() % 5000,
                    }
                })
                .collect();
            let plan = plan_arena(&buffers).unwrap();
            check_no_conflicts(&buffers, &plan);
            assert!(plan.arena_size <= plan.total_size);
        }
    }

    #[test]
    fn best_fit_prefers_the_smaller_gap() {
        // Two long-lived buffers leave gaps of 128 (between) and open space above.
        let buffers = vec![
            Interval {
                first: 0,
                last: 10,
                size: 64,
            },
            Interval {
                first: 0,
                last: 0,
                size: 128,
            },
            Interval {
                first: 0,
                last: 10,
                size: 64,
            },
            Interval {
                first: 5,
                last: 6,
                size: 100,
            },
        ];
        let plan = plan_arena(&buffers).unwrap();
        check_no_conflicts(&buffers, &plan);
        // The 128-byte buffer died at op 0; the last one reuses its slot.
        assert_eq!(plan.offsets[3], plan.offsets[1]);
    }
}
