//! `tests/c/event_order.c`, a C caller that frees each output buffer as soon as the
//! contract allows (right after `nnc_event_wait`, or after `nnc_execution_free`), built
//! against this crate's library and run plainly and under valgrind: nnc writes no caller
//! memory after the event the caller waits on has signalled, and signalling a compute's
//! own event is refused with `NNC_RESULT_BAD_STATE` (the audit's memory corruption).

mod common;

use std::process::{Command, Output};

use common::{VALGRIND, build_c, compile, key, repo, testdata, valgrind_available, write_key_file};

/// Builds event_order and tiny_cnn (with a key file) in `dir`, and runs it under
/// `wrapper` (empty: directly).
fn run(dir: &std::path::Path, wrapper: &[&str]) -> Output {
    let exe = build_c(
        &repo().join("runtime/capi/tests/c/event_order.c"),
        dir,
        "event_order",
    );
    let k = key();
    let (model, key_file) = (dir.join("model.nnc"), dir.join("model.key"));
    std::fs::write(&model, compile(&testdata("tiny_cnn.onnx"), Some(&k))).expect("write");
    write_key_file(&key_file, &k);
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    // cargo's LD_LIBRARY_PATH lists target/<profile> (perhaps a stale library) first.
    cmd.env_remove("LD_LIBRARY_PATH")
        .arg(&model)
        .arg(&key_file)
        .output()
        .expect("event_order runs")
}

fn assert_clean(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "event_order failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
}

#[test]
fn no_caller_memory_is_written_after_its_event_signalled() {
    let dir = tempfile::tempdir().expect("temp dir");
    assert_clean(&run(dir.path(), &[]));
}

/// The same under valgrind: a write into a block freed after the wait would be an
/// "Invalid write" (exit 99), even when the allocator does not hand the block out again.
#[test]
fn no_caller_memory_is_written_after_its_event_signalled_under_valgrind() {
    if !valgrind_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    assert_clean(&run(dir.path(), VALGRIND));
}
