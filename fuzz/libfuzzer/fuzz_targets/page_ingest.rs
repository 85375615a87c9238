#![no_main]
//! libFuzzer entry point for skewscope_fuzz::page_ingest.
libfuzzer_sys::fuzz_target!(|data: &[u8]| skewscope_fuzz::page_ingest(data));
