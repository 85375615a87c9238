#![no_main]
//! libFuzzer entry point for skewscope_fuzz::sse.
libfuzzer_sys::fuzz_target!(|data: &[u8]| skewscope_fuzz::sse(data));
