//! Buffers an execution allocates in proportion to sizes the model declares, each holding
//! its bytes in the execution's memory budget (`nnc_formats::limits::Budget` of the
//! `arena` limit): the budget refuses before anything is allocated, and gets the bytes
//! back when the buffer is dropped.

use std::sync::Arc;

use nnc_formats::limits::{Budget, Reservation};

use crate::buffer::AlignedBuf;
use crate::error::Result;

/// An [`AlignedBuf`] whose bytes are reserved in an execution's budget.
pub(crate) struct Held {
    // Dropped first: the memory is freed before the reservation is given back.
    buf: AlignedBuf,
    _reservation: Reservation,
}

impl Held {
    /// `len` zero bytes, reserved for `what` first.
    pub fn zeroed(budget: &Arc<Budget>, len: usize, what: impl FnOnce() -> String) -> Result<Held> {
        let reservation = budget.reserve(what, Some(len as u64))?;
        Ok(Held {
            buf: AlignedBuf::zeroed(len)?,
            _reservation: reservation,
        })
    }

    /// A copy of `bytes`, reserved for `what` first.
    pub fn copy_of(
        budget: &Arc<Budget>,
        bytes: &[u8],
        what: impl FnOnce() -> String,
    ) -> Result<Held> {
        let reservation = budget.reserve(what, Some(bytes.len() as u64))?;
        Ok(Held {
            buf: AlignedBuf::from_bytes(bytes)?,
            _reservation: reservation,
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.buf.as_bytes()
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.buf.as_bytes_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nnc_formats::limits::{LimitKind, Limits};

    #[test]
    fn a_held_buffer_gives_its_bytes_back_when_dropped() {
        let limits = Limits {
            max_arena_bytes: 1000,
            ..Limits::default()
        };
        let budget = Budget::new(&limits, LimitKind::Arena);
        let a = Held::zeroed(&budget, 600, || "a".into()).unwrap();
        assert_eq!(budget.used(), 600);
        let err = Held::copy_of(&budget, &[1; 500], || "b".into())
            .err()
            .unwrap();
        assert!(err.to_string().contains("--limit arena=SIZE"), "{err}");
        drop(a);
        assert_eq!(budget.used(), 0);
        let b = Held::copy_of(&budget, &[7; 500], || "b".into()).unwrap();
        assert_eq!(b.as_bytes(), &[7; 500][..]);
    }
}
