//! Fuzz target: see `netchaos::fuzzing::aws_frame`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netchaos::fuzzing::aws_frame(data));
