#![no_main]
//! libFuzzer entry point for skewscope_fuzz::clock_model.
libfuzzer_sys::fuzz_target!(|data: &[u8]| skewscope_fuzz::clock_model(data));
