#![no_main]
//! libFuzzer entry point for skewscope_fuzz::tap.
libfuzzer_sys::fuzz_target!(|data: &[u8]| skewscope_fuzz::tap(data));
