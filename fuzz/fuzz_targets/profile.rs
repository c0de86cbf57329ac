//! Fuzz target: see `netchaos::fuzzing::profile`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netchaos::fuzzing::profile(data));
