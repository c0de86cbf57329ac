//! Fuzz target: see `netchaos::fuzzing::http1`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netchaos::fuzzing::http1(data));
