#![no_main]
//! libFuzzer entry point for skewscope_fuzz::http_head.
libfuzzer_sys::fuzz_target!(|data: &[u8]| skewscope_fuzz::http_head(data));
