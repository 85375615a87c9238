#![no_main]
//! libFuzzer entry point for skewscope_fuzz::mqtt.
libfuzzer_sys::fuzz_target!(|data: &[u8]| skewscope_fuzz::mqtt(data));
