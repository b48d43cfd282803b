//! An allocator that wipes every block it frees, for processes that hold decrypted
//! weights.
//!
//! nnc wipes the buffers it owns (prepared weights, decrypted fields) when they are
//! dropped, but some copies are made by code it does not control: the `gemm` crate packs
//! weight panels into scratch memory of its own on every large product and frees it as
//! it is; a growing `Vec` leaves its old block behind. With this allocator installed as
//! the global allocator, every freed block (and the old block of every reallocation) is
//! zeroed before it goes back to the system allocator, so no plaintext outlives its use
//! in freed memory. The `nnc` command installs it; an application embedding the runtime
//! opts in with:
//!
//! ```
//! #[global_allocator]
//! static ALLOCATOR: nnc_runtime::alloc::WipingAllocator = nnc_runtime::alloc::WipingAllocator;
//!
//! fn main() {
//!     let plaintext = vec![0x5au8; 4096];
//!     drop(plaintext); // zeroed before the system allocator gets it back
//! }
//! ```
//!
//! The cost is one `memset` per freed byte: about 3% of MobileNetV2's inference time
//! (docs/BENCHMARKS.md). Memory the allocator never frees (thread-local scratch kept for
//! reuse, pages swapped out) is outside its reach; see docs/SECURITY.md.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// The system allocator, zeroing every block before it is freed (while wiping is on:
/// see [`set_wiping`]).
pub struct WipingAllocator;

/// Whether [`WipingAllocator`] wipes; on unless a process turns it off.
static WIPING: AtomicBool = AtomicBool::new(true);

/// Turns wiping on or off for the whole process.
///
/// For a process whose memory holds no secret worth wiping: `nnc compile` reads its
/// plaintext source model from disk, so wiping freed copies of those weights protects
/// nothing the file does not already show, and costs a `memset` and fresh zeroed pages
/// for every large block (about a tenth of a compile). Keys keep wiping themselves
/// (`Zeroizing`), whatever this says. A process that decrypts weights leaves it on.
pub fn set_wiping(enabled: bool) {
    WIPING.store(enabled, Ordering::Relaxed);
}

fn wiping() -> bool {
    WIPING.load(Ordering::Relaxed)
}

/// Zeroes `len` bytes at `ptr` in a way the compiler may not remove as a dead store
/// before the memory is freed.
///
/// # Safety
/// `ptr` must be valid for writes of `len` bytes.
unsafe fn wipe(ptr: *mut u8, len: usize) {
    if len == 0 {
        return;
    }
    // SAFETY: the caller guarantees `ptr` is valid for `len` bytes of writes.
    unsafe { std::ptr::write_bytes(ptr, 0, len) };
    // The block is about to be freed, which the optimizer knows: make the zeroed memory
    // observable so the write above stays.
    std::hint::black_box(ptr);
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

// SAFETY: every method forwards to `System` with the layouts it was given; `dealloc` and
// `realloc` only add writes to memory the caller still owns.
unsafe impl GlobalAlloc for WipingAllocator {
    /// # Safety
    /// [`GlobalAlloc::alloc`]'s: `layout` has a non-zero size.
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `System.alloc` has the same contract, which the caller upholds.
        unsafe { System.alloc(layout) }
    }

    /// # Safety
    /// [`GlobalAlloc::alloc_zeroed`]'s: `layout` has a non-zero size.
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `System.alloc_zeroed` has the same contract, which the caller upholds.
        unsafe { System.alloc_zeroed(layout) }
    }

    /// # Safety
    /// [`GlobalAlloc::dealloc`]'s: `ptr` is a block this allocator returned for
    /// `layout`, not yet freed.
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: every block comes from `System` with the layout it is freed with, so
        // `ptr` is valid for writes of `layout.size()` bytes until `System.dealloc`
        // takes it back.
        unsafe {
            if wiping() {
                wipe(ptr, layout.size());
            }
            System.dealloc(ptr, layout);
        }
    }

    /// # Safety
    /// [`GlobalAlloc::realloc`]'s: `ptr` is a block this allocator returned for
    /// `layout`, not yet freed; `new_size` is non-zero and, rounded up to
    /// `layout.align()`, does not overflow `isize`.
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !wiping() {
            // SAFETY: `System.realloc` has the same contract, which the caller upholds,
            // and `ptr` came from `System` with `layout`.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // A new block, the contents copied, the old block wiped and freed: the system's
        // realloc could move the data and free the old block unwiped.
        // SAFETY: `new_size` is non-zero and, rounded to the alignment, fits isize (the
        // caller's contract for `realloc`).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: `new_layout` is non-zero-sized (the caller's contract).
        let new = unsafe { System.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the smaller size and do not overlap; the
            // old block is the caller's until freed here.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                wipe(ptr, layout.size());
                System.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_usable_and_reallocation_keeps_the_contents() {
        let a = WipingAllocator;
        let layout = Layout::from_size_align(64, 16).unwrap();
        // SAFETY: a valid layout; every pointer is used within its block.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            for i in 0..64 {
                *p.add(i) = i as u8;
            }
            let q = a.realloc(p, layout, 4096);
            assert!(!q.is_null());
            for i in 0..64 {
                assert_eq!(*q.add(i), i as u8);
            }
            let bigger = Layout::from_size_align(4096, 16).unwrap();
            a.dealloc(q, bigger);
            let z = a.alloc_zeroed(layout);
            assert!((0..64).all(|i| *z.add(i) == 0));
            a.dealloc(z, layout);
        }
    }
}
