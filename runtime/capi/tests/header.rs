//! `include/nnc.h` is committed and must be what cbindgen makes of the crate's sources:
//! this test regenerates it and fails when it differs (run with `NNC_UPDATE_HEADER=1`
//! to rewrite it).

use std::path::PathBuf;

fn generate() -> String {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen generates the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

#[test]
fn committed_header_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include/nnc.h");
    let generated = generate();
    if std::env::var_os("NNC_UPDATE_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write include/nnc.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: regenerate it with \
         `NNC_UPDATE_HEADER=1 cargo test -p nnc-runtime-capi --test header` and commit it",
        path.display()
    );
}

#[test]
fn header_declares_every_function_and_code() {
    let header = generate();
    for name in [
        "nnc_last_error_message",
        "nnc_key_from_file",
        "nnc_model_load_file",
        "nnc_model_load_buffer",
        "nnc_model_get_input",
        "nnc_execution_set_input_with_dimensions",
        "nnc_execution_compute",
        "nnc_execution_get_output_dimensions",
        "nnc_execution_get_timing",
        "nnc_execution_free",
        "nnc_model_load_file_with_options",
        "nnc_execution_set_timeout",
        "nnc_memory_create_from_fd",
        "nnc_execution_set_input_from_memory",
        "nnc_execution_start_compute",
        "nnc_execution_start_compute_with_dependencies",
        "nnc_execution_get_fenced_timing",
        "nnc_event_wait",
        "nnc_burst_create",
        "nnc_execution_burst_compute",
        "NNC_PRIORITY_HIGH = 110",
        "NNC_RESULT_OUTPUT_INSUFFICIENT_SIZE = 8",
        "NNC_RESULT_INTEGRITY_FAILURE = 100",
        "NNC_ELEMENT_TYPE_FLOAT32 = 0",
        "typedef struct NncModel NncModel;",
    ] {
        assert!(header.contains(name), "the header lacks {name}");
    }
}
