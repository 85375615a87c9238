#![no_main]
//! libFuzzer entry point for skewscope_fuzz::client_frames.
libfuzzer_sys::fuzz_target!(|data: &[u8]| skewscope_fuzz::client_frames(data));
