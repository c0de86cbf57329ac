//! Fuzz target: see `netchaos::fuzzing::dns_query`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netchaos::fuzzing::dns_query(data));
