#![no_main]
//! libFuzzer entry point for skewscope_fuzz::time_exchange.
libfuzzer_sys::fuzz_target!(|data: &[u8]| skewscope_fuzz::time_exchange(data));
