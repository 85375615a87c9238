#![no_main]
//! libFuzzer entry point for skewscope_fuzz::act_at.
libfuzzer_sys::fuzz_target!(|data: &[u8]| skewscope_fuzz::act_at(data));
