//! 64-byte aligned byte buffers that zeroize their contents when dropped.
//!
//! One type serves activation arenas and prepared weights: alignment lets any region at a
//! 64-byte offset be viewed as `f32`/`i32` without copying, and zeroizing on drop keeps
//! plaintext weights from lingering in freed memory.

use zeroize::Zeroize;

use crate::error::{Result, RuntimeError};

/// Alignment of every [`AlignedBuf`] and of every region the memory planner hands out.
pub const ALIGN: usize = 64;

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Block([u8; ALIGN]);

/// A fixed-length, 64-byte aligned, zero-initialized byte buffer, zeroized on drop.
///
/// The buffer never reallocates in place: [`AlignedBuf::ensure_len`] replaces the
/// storage (zeroizing the old one), so no stale copy of its contents is left behind.
pub struct AlignedBuf {
    blocks: Vec<Block>,
    len: usize,
}

impl AlignedBuf {
    /// An empty buffer (no allocation).
    pub fn new() -> AlignedBuf {
        AlignedBuf {
            blocks: Vec::new(),
            len: 0,
        }
    }

    /// A zero-filled buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Result<AlignedBuf> {
        let count = len.div_ceil(ALIGN);
        let mut blocks = Vec::new();
        blocks
            .try_reserve_exact(count)
            .map_err(|_| RuntimeError::OutOfMemory { bytes: len })?;
        blocks.resize(count, Block([0; ALIGN]));
        Ok(AlignedBuf { blocks, len })
    }

    /// A copy of `bytes`, written in one pass (a cache hit copies whole models this way,
    /// so zero-filling first would double the memory traffic).
    pub fn from_bytes(bytes: &[u8]) -> Result<AlignedBuf> {
        let mut blocks = Vec::new();
        blocks
            .try_reserve_exact(bytes.len().div_ceil(ALIGN))
            .map_err(|_| RuntimeError::OutOfMemory { bytes: bytes.len() })?;
        let mut chunks = bytes.chunks_exact(ALIGN);
        blocks.extend(chunks.by_ref().map(|c| {
            let mut block = Block([0; ALIGN]);
            block.0.copy_from_slice(c);
            block
        }));
        let tail = chunks.remainder();
        if !tail.is_empty() {
            let mut block = Block([0; ALIGN]);
            block.0[..tail.len()].copy_from_slice(tail);
            blocks.push(block);
        }
        Ok(AlignedBuf {
            blocks,
            len: bytes.len(),
        })
    }

    /// A copy of `values`.
    pub fn from_f32(values: &[f32]) -> Result<AlignedBuf> {
        AlignedBuf::from_bytes(bytemuck::cast_slice(values))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of memory held (the length rounded up to whole blocks).
    pub fn capacity(&self) -> usize {
        self.blocks.len() * ALIGN
    }

    /// Makes the buffer at least `len` bytes long. Growing replaces the storage with a
    /// zeroed one (the old contents are zeroized, not kept).
    pub fn ensure_len(&mut self, len: usize) -> Result<()> {
        if len <= self.capacity() {
            self.len = self.len.max(len);
            return Ok(());
        }
        *self = AlignedBuf::zeroed(len)?;
        Ok(())
    }

    pub fn as_bytes(&self) -> &[u8] {
        let all: &[u8] = bytemuck::cast_slice(&self.blocks);
        &all[..self.len]
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        let all: &mut [u8] = bytemuck::cast_slice_mut(&mut self.blocks);
        &mut all[..self.len]
    }

    /// The leading whole `f32` values.
    pub fn as_f32(&self) -> &[f32] {
        let n = self.len / 4 * 4;
        bytemuck::cast_slice(&self.as_bytes()[..n])
    }

    pub fn as_f32_mut(&mut self) -> &mut [f32] {
        let n = self.len / 4 * 4;
        bytemuck::cast_slice_mut(&mut self.as_bytes_mut()[..n])
    }
}

impl Default for AlignedBuf {
    fn default() -> Self {
        AlignedBuf::new()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.blocks);
        bytes.zeroize();
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print contents: they may be plaintext weights.
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// Rounds `n` up to a multiple of [`ALIGN`], or `None` on overflow.
pub fn align_up(n: usize) -> Option<usize> {
    n.checked_add(ALIGN - 1).map(|v| v / ALIGN * ALIGN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_typed() {
        let buf = AlignedBuf::from_f32(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(buf.len(), 12);
        assert_eq!(buf.as_bytes().as_ptr() as usize % ALIGN, 0);
        assert_eq!(buf.as_f32(), &[1.0, 2.0, 3.0]);
        assert_eq!(buf.capacity(), 64);
    }

    #[test]
    fn copies_are_exact_with_a_zeroed_tail() {
        for len in [0usize, 1, 63, 64, 65, 200] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            let buf = AlignedBuf::from_bytes(&bytes).unwrap();
            assert_eq!(buf.as_bytes(), &bytes[..]);
            assert_eq!(buf.capacity(), len.div_ceil(ALIGN) * ALIGN);
            assert_eq!(buf.as_bytes().as_ptr() as usize % ALIGN, 0);
        }
    }

    #[test]
    fn growing_replaces_storage() {
        let mut buf = AlignedBuf::zeroed(8).unwrap();
        buf.as_bytes_mut()[0] = 7;
        buf.ensure_len(32).unwrap();
        assert_eq!(buf.len(), 32);
        assert_eq!(buf.as_bytes()[0], 7, "within capacity the contents stay");
        buf.ensure_len(100).unwrap();
        assert_eq!(buf.len(), 100);
        assert!(buf.as_bytes().iter().all(|&b| b == 0));
    }

    #[test]
    fn absurd_sizes_fail_cleanly() {
        assert!(matches!(
            AlignedBuf::zeroed(usize::MAX - 10),
            Err(RuntimeError::OutOfMemory { .. })
        ));
        assert_eq!(align_up(65), Some(128));
        assert_eq!(align_up(usize::MAX), None);
    }
}
