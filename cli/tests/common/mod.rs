//! Helpers shared by the snapshot tests (`snapshots.rs`, `error_snapshots.rs`).

use std::path::Path;

/// Compares `actual` with the snapshot file `path` (reported as `name`), or writes it
/// under `NNC_BLESS`; a difference is pushed onto `mismatches` with its first line.
pub fn check_snapshot(path: &Path, name: &str, actual: &str, mismatches: &mut Vec<String>) {
    if std::env::var_os("NNC_BLESS").is_some() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, actual).unwrap();
        return;
    }
    match std::fs::read_to_string(path) {
        Ok(expected) if expected == actual => {}
        Ok(expected) => {
            let line = expected
                .lines()
                .zip(actual.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
            mismatches.push(format!(
                "{name}: differs from the snapshot at line {} (expected {:?}, got {:?})",
                line + 1,
                expected.lines().nth(line).unwrap_or("<end>"),
                actual.lines().nth(line).unwrap_or("<end>")
            ));
        }
        Err(_) => mismatches.push(format!("{name}: no snapshot (run with NNC_BLESS=1)")),
    }
}
