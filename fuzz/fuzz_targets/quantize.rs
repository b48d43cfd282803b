#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| nnc_fuzz::quantize(data));
