#![no_main]
//! libFuzzer entry point for skewscope_fuzz::inflate.
libfuzzer_sys::fuzz_target!(|data: &[u8]| skewscope_fuzz::inflate(data));
