//! Fuzz target: see `netchaos::fuzzing::stream_units`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netchaos::fuzzing::stream_units(data));
