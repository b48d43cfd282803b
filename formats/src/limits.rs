//! Resource limits: how much memory an input may make nnc allocate.
//!
//! A model is data from someone else. A few hundred bytes can declare a tensor of 2^62
//! elements, fold `ConstantOfShape` into gigabytes, or plan an arena larger than the
//! machine; every such request is checked against these limits *before* anything is
//! allocated, and refused with [`LimitError`], which names the limit and how to raise it
//! (`--limit NAME=SIZE` on the command line). The defaults admit every real model we know
//! of while keeping what a small hostile file can cost well under a gigabyte.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The limits in force for one compilation or load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest single tensor, in bytes, of any operand (declared, inferred at compile
    /// time, or computed at run time). Limit name `tensor`.
    pub max_tensor_bytes: u64,
    /// How many bytes of constants compile-time evaluation (constant folding) may create
    /// beyond the model's own weights. Limit name `folded`.
    pub max_folded_bytes: u64,
    /// The largest activation arena (all intermediate tensors of one execution) the
    /// runtime will allocate. Limit name `arena`.
    pub max_arena_bytes: u64,
    /// The calibration samples quantization holds in memory at once. Limit name
    /// `calibration`.
    pub max_calibration_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_tensor_bytes: 1 << 30,
            max_folded_bytes: 256 << 20,
            max_arena_bytes: 2 << 30,
            max_calibration_bytes: 4 << 30,
        }
    }
}

/// Which limit was hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitKind {
    Tensor,
    Folded,
    Arena,
    Calibration,
}

impl LimitKind {
    pub const ALL: [LimitKind; 4] = [
        LimitKind::Tensor,
        LimitKind::Folded,
        LimitKind::Arena,
        LimitKind::Calibration,
    ];

    /// The name `--limit NAME=SIZE` takes.
    pub fn name(self) -> &'static str {
        match self {
            LimitKind::Tensor => "tensor",
            LimitKind::Folded => "folded",
            LimitKind::Arena => "arena",
            LimitKind::Calibration => "calibration",
        }
    }

    pub fn from_name(name: &str) -> Option<LimitKind> {
        LimitKind::ALL.into_iter().find(|k| k.name() == name)
    }

    fn describe(self) -> &'static str {
        match self {
            LimitKind::Tensor => "the largest tensor",
            LimitKind::Folded => "the constants compile-time evaluation may create",
            LimitKind::Arena => {
                "the memory of one execution (activation arenas of the graph and its \
                 subgraphs, loop state, streamed outputs)"
            }
            LimitKind::Calibration => "the calibration samples held in memory",
        }
    }
}

/// A request beyond a limit: what asked, how much, and the limit in force.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} needs {}, beyond the {} limit of {} on {} (raise it with --limit {}=SIZE)",
    describe_bytes(*.requested),
    .kind.name(),
    format_size(*.limit),
    .kind.describe(),
    .kind.name()
)]
pub struct LimitError {
    pub kind: LimitKind,
    /// What made the request: an operand, a node, the arena.
    pub what: String,
    /// Bytes asked for; `None` when the size overflows 64 bits.
    pub requested: Option<u64>,
    pub limit: u64,
}

fn describe_bytes(requested: Option<u64>) -> String {
    match requested {
        // A rounded size can read as the limit itself ("2.0 GiB, beyond the limit of
        // 2 GiB"): say the exact bytes too.
        Some(n) if format_size(n).contains('.') => format!("{} ({n} bytes)", format_size(n)),
        Some(n) => format_size(n),
        None => "more than 2^64 bytes".into(),
    }
}

impl Limits {
    pub fn get(&self, kind: LimitKind) -> u64 {
        match kind {
            LimitKind::Tensor => self.max_tensor_bytes,
            LimitKind::Folded => self.max_folded_bytes,
            LimitKind::Arena => self.max_arena_bytes,
            LimitKind::Calibration => self.max_calibration_bytes,
        }
    }

    pub fn set(&mut self, kind: LimitKind, bytes: u64) {
        match kind {
            LimitKind::Tensor => self.max_tensor_bytes = bytes,
            LimitKind::Folded => self.max_folded_bytes = bytes,
            LimitKind::Arena => self.max_arena_bytes = bytes,
            LimitKind::Calibration => self.max_calibration_bytes = bytes,
        }
    }

    /// Checks that `requested` bytes (`None`: overflowed) fit `kind`.
    pub fn check(
        &self,
        kind: LimitKind,
        what: impl FnOnce() -> String,
        requested: Option<u64>,
    ) -> Result<u64, LimitError> {
        let limit = self.get(kind);
        match requested {
            Some(n) if n <= limit => Ok(n),
            _ => Err(LimitError {
                kind,
                what: what(),
                requested,
                limit,
            }),
        }
    }

    /// Checks a tensor of `elements` elements of `element_size` bytes against the tensor
    /// limit; returns its size in bytes.
    pub fn check_tensor(
        &self,
        what: impl FnOnce() -> String,
        elements: Option<u64>,
        element_size: u64,
    ) -> Result<u64, LimitError> {
        let bytes = elements.and_then(|n| n.checked_mul(element_size));
        self.check(LimitKind::Tensor, what, bytes)
    }
}

/// The number of elements of `dims`, `None` on overflow.
pub fn element_count<T: Copy + Into<u64>>(dims: &[T]) -> Option<u64> {
    dims.iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d.into()))
}

/// `1.5 GiB`, `64 MiB`, `512 B`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if bytes >= size {
            let v = bytes as f64 / size as f64;
            return if bytes.is_multiple_of(size) {
                format!("{} {unit}", bytes / size)
            } else {
                format!("{v:.1} {unit}")
            };
        }
    }
    format!("{bytes} B")
}

/// Parses a size: `1073741824`, `512K`, `64M`, `2G`, `1T` (binary multiples; an optional
/// `B`, `iB` suffix and any case).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let upper = t.to_ascii_uppercase();
    let digits_end = upper
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(upper.len());
    let (number, unit) = upper.split_at(digits_end);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size (e.g. 512M, 2G, 1073741824)"))?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => {
            return Err(format!(
                "'{text}': unknown size unit '{unit}' (use K, M, G or T)"
            ));
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// `NAME=SIZE` of `--limit`.
pub fn parse_limit(text: &str) -> Result<(LimitKind, u64), String> {
    let (name, size) = text
        .split_once('=')
        .ok_or_else(|| format!("'{text}' is not NAME=SIZE (e.g. folded=1G)"))?;
    let kind = LimitKind::from_name(name.trim()).ok_or_else(|| {
        let names: Vec<&str> = LimitKind::ALL.iter().map(|k| k.name()).collect();
        format!(
            "unknown limit '{name}'; the limits are {}",
            names.join(", ")
        )
    })?;
    Ok((kind, parse_size(size)?))
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A limit that bounds a *sum*: every allocation proportional to sizes an input controls
/// (the main graph's arena, each subgraph's arena, loop state and scan accumulators,
/// a stream's collected outputs) reserves its bytes here before it allocates, and gives
/// them back when it frees them (dropping the [`Reservation`]). Checking each request
/// alone against a limit is not enough: a loop that keeps one old state per iteration,
/// or five thousand subgraphs of one modest arena each, stays under every per-request
/// check and still exhausts the machine.
///
/// Shared by `Arc` between the threads of one execution; reservations are atomic.
#[derive(Debug)]
pub struct Budget {
    kind: LimitKind,
    limit: u64,
    used: AtomicU64,
}

impl Budget {
    /// A budget of `limits`' `kind` limit.
    pub fn new(limits: &Limits, kind: LimitKind) -> Arc<Budget> {
        Arc::new(Budget {
            kind,
            limit: limits.get(kind),
            used: AtomicU64::new(0),
        })
    }

    /// Reserves `bytes` (`None`: the size overflowed) for `what`, or refuses with a
    /// [`LimitError`] naming the limit, what asked and how much the budget already holds.
    pub fn reserve(
        self: &Arc<Self>,
        what: impl FnOnce() -> String,
        bytes: Option<u64>,
    ) -> Result<Reservation, LimitError> {
        let mut reservation = Reservation {
            budget: Arc::clone(self),
            bytes: 0,
        };
        reservation.resize(what, bytes)?;
        Ok(reservation)
    }

    /// Bytes reserved now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn kind(&self) -> LimitKind {
        self.kind
    }

    fn refuse(&self, what: String, requested: Option<u64>, held: u64) -> LimitError {
        let in_use = self.used().saturating_sub(held);
        let what = if in_use > 0 {
            format!("{what} (with {} already in use)", format_size(in_use))
        } else {
            what
        };
        LimitError {
            kind: self.kind,
            what,
            requested: requested.and_then(|r| r.checked_add(in_use)),
            limit: self.limit,
        }
    }
}

/// Bytes held in a [`Budget`]; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Reservation {
    /// An empty reservation in `budget`, to [`Reservation::resize`] later.
    pub fn empty(budget: &Arc<Budget>) -> Reservation {
        Reservation {
            budget: Arc::clone(budget),
            bytes: 0,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Grows or shrinks what this reservation holds to `bytes` (`None`: overflowed). On
    /// refusal the reservation keeps what it held.
    pub fn resize(
        &mut self,
        what: impl FnOnce() -> String,
        bytes: Option<u64>,
    ) -> Result<(), LimitError> {
        let budget = &self.budget;
        let Some(new) = bytes else {
            return Err(budget.refuse(what(), None, self.bytes));
        };
        if new <= self.bytes {
            budget.used.fetch_sub(self.bytes - new, Ordering::AcqRel);
            self.bytes = new;
            return Ok(());
        }
        let grow = new - self.bytes;
        let result = budget
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(grow)
                    .filter(|&total| total <= budget.limit)
            });
        match result {
            Ok(_) => {
                self.bytes = new;
                Ok(())
            }
            Err(_) => Err(budget.refuse(what(), Some(new), self.bytes)),
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("512").unwrap(), 512);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("1TiB").unwrap(), 1 << 40);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(format_size(256 << 20), "256 MiB");
        assert_eq!(format_size(1536 << 20), "1.5 GiB");
        assert_eq!(format_size(10), "10 B");
    }

    #[test]
    fn limit_errors_name_the_limit_and_the_flag() {
        let limits = Limits::default();
        let err = limits
            .check_tensor(|| "operand 3".into(), Some(1 << 40), 4)
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("operand 3"), "{text}");
        assert!(text.contains("--limit tensor=SIZE"), "{text}");
        assert!(text.contains("4 TiB"), "{text}");
        let overflow = limits
            .check_tensor(
                || "x".into(),
                element_count(&[u32::MAX, u32::MAX, u32::MAX]),
                4,
            )
            .unwrap_err();
        assert!(
            overflow.to_string().contains("more than 2^64"),
            "{overflow}"
        );
        assert_eq!(
            parse_limit("folded=1G").unwrap(),
            (LimitKind::Folded, 1 << 30)
        );
        assert!(
            parse_limit("speed=1G")
                .unwrap_err()
                .contains("tensor, folded, arena")
        );
    }

    #[test]
    fn a_budget_bounds_the_sum_of_its_reservations() {
        let limits = Limits {
            max_arena_bytes: 100,
            ..Limits::default()
        };
        let budget = Budget::new(&limits, LimitKind::Arena);
        let a = budget.reserve(|| "a".into(), Some(60)).unwrap();
        let err = budget.reserve(|| "b".into(), Some(50)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("b (with 60 B already in use)"), "{text}");
        assert!(text.contains("--limit arena=SIZE"), "{text}");
        assert_eq!(err.requested, Some(110));
        assert_eq!(budget.used(), 60);
        let mut b = budget.reserve(|| "b".into(), Some(40)).unwrap();
        assert_eq!(budget.used(), 100);
        assert!(b.resize(|| "b".into(), Some(41)).is_err());
        assert_eq!(b.bytes(), 40, "a refused resize keeps what it held");
        b.resize(|| "b".into(), Some(10)).unwrap();
        assert_eq!(budget.used(), 70);
        drop(a);
        assert_eq!(budget.used(), 10);
        assert!(budget.reserve(|| "c".into(), None).is_err());
        drop(b);
        assert_eq!(budget.used(), 0);
        let mut empty = Reservation::empty(&budget);
        empty.resize(|| "d".into(), Some(100)).unwrap();
        assert_eq!(budget.used(), 100);
    }
}
