//! Handles: what C holds for each nnc object.
//!
//! A handle is an opaque value, never a pointer nnc dereferences: the object lives in a
//! process-wide table under a number that is never reused, and every call looks its
//! handles up there. So a freed handle, one freed twice, one of another type or any
//! other value is refused (`NNC_RESULT_BAD_DATA`; the free functions ignore it) instead
//! of touching freed memory, and a call in progress keeps its objects alive (the table
//! hands out `Arc`s) even when another thread frees them meanwhile.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::error::CapiError;

/// An object C holds by handle; `KIND` names it in errors.
pub(crate) trait Object: Any + Send + Sync {
    const KIND: &'static str;
}

type Entry = Arc<dyn Any + Send + Sync>;

struct Table {
    /// The next handle's number; numbers are never reused.
    next: usize,
    live: BTreeMap<usize, Entry>,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    next: 1,
    live: BTreeMap::new(),
});

/// Handles are multiples of this, so they look aligned to C code and debuggers.
const STRIDE: usize = 16;

fn table() -> MutexGuard<'static, Table> {
    // Nothing panics while the table is locked; a poisoned lock is still consistent.
    TABLE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Stores `value` and returns its new handle.
pub(crate) fn register<T: Object>(value: T) -> *mut T {
    let entry: Entry = Arc::new(value);
    let mut t = table();
    let handle = t.next.saturating_mul(STRIDE);
    t.next = t.next.saturating_add(1);
    t.live.insert(handle, entry);
    std::ptr::without_provenance_mut(handle)
}

/// The live object behind `handle`; `what` names the argument in errors.
pub(crate) fn get<T: Object>(handle: *const T, what: &'static str) -> Result<Arc<T>, CapiError> {
    get_optional(handle, what)?.ok_or(CapiError::Null(what))
}

/// As [`get`], with null allowed (`None`).
pub(crate) fn get_optional<T: Object>(
    handle: *const T,
    what: &'static str,
) -> Result<Option<Arc<T>>, CapiError> {
    if handle.is_null() {
        return Ok(None);
    }
    let entry = table().live.get(&handle.addr()).cloned();
    match entry.map(|e| e.downcast::<T>()) {
        Some(Ok(object)) => Ok(Some(object)),
        _ => Err(CapiError::BadData(format!(
            "'{what}' is not a live {} (freed already, or not one nnc made)",
            T::KIND
        ))),
    }
}

/// Removes `handle` from the table and returns its object (dropped by the caller, out
/// of the table's lock); null, unknown and other types' handles give `None`.
pub(crate) fn take<T: Object>(handle: *mut T) -> Option<Arc<T>> {
    if handle.is_null() {
        return None;
    }
    let mut t = table();
    let addr = handle.addr();
    if !t.live.get(&addr).is_some_and(|e| (**e).is::<T>()) {
        return None;
    }
    t.live.remove(&addr).and_then(|e| e.downcast::<T>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct A(u32);
    impl Object for A {
        const KIND: &'static str = "A";
    }
    struct B;
    impl Object for B {
        const KIND: &'static str = "B";
    }

    #[test]
    fn stale_foreign_and_mistyped_handles_are_refused() {
        let a = register(A(7));
        assert_eq!(get(a, "a").unwrap().0, 7);
        let as_b = a.cast::<B>();
        assert!(matches!(get(as_b, "b"), Err(CapiError::BadData(_))));
        assert!(
            take(as_b).is_none(),
            "a handle is freed by its own type only"
        );
        let held = get(a, "a").unwrap();
        assert!(take(a).is_some());
        assert_eq!(held.0, 7, "a call in progress keeps the object alive");
        assert!(take(a).is_none(), "a second free is ignored");
        let e = get(a, "a").err().unwrap();
        assert!(e.to_string().contains("not a live A"), "{e}");
        assert!(matches!(
            get(std::ptr::null::<A>(), "a"),
            Err(CapiError::Null("a"))
        ));
        let bogus = std::ptr::without_provenance::<A>(0x1234_5678);
        assert!(matches!(get(bogus, "a"), Err(CapiError::BadData(_))));
        let again = register(A(8));
        assert_ne!(again, a, "numbers are never reused");
    }
}
