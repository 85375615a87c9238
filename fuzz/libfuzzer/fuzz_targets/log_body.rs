#![no_main]
//! libFuzzer entry point for skewscope_fuzz::log_body.
libfuzzer_sys::fuzz_target!(|data: &[u8]| skewscope_fuzz::log_body(data));
