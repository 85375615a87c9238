#![no_main]
//! libFuzzer entry point for skewscope_fuzz::socketio.
libfuzzer_sys::fuzz_target!(|data: &[u8]| skewscope_fuzz::socketio(data));
