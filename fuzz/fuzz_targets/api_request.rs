//! Fuzz target: see `netchaos::fuzzing::api_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netchaos::fuzzing::api_request(data));
