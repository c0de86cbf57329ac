//! Fuzz target: see `netchaos::fuzzing::fault_flag`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netchaos::fuzzing::fault_flag(data));
