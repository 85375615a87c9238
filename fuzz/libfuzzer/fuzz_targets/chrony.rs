#![no_main]
//! libFuzzer entry point for skewscope_fuzz::chrony.
libfuzzer_sys::fuzz_target!(|data: &[u8]| skewscope_fuzz::chrony(data));
