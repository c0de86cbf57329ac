//! Replays the fuzz targets' inputs as ordinary tests, on the stable
//! toolchain: the committed seeds (`fuzz/seeds/TARGET`), every input that
//! once crashed a target and was fixed (`fuzz/regressions/TARGET`), and the
//! local corpus a fuzzing run left (`fuzz/corpus/TARGET`, when present).

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut n = 0;
    for dir in ["seeds", "regressions", "corpus"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let data = std::fs::read(e.path()).unwrap();
            let r = std::panic::catch_unwind(|| run(&data));
            assert!(r.is_ok(), "{target} panicked on {}", e.path().display());
            n += 1;
        }
    }
    assert!(n > 0, "no inputs for {target}");
}

#[test]
fn profile_inputs() {
    replay("profile", netchaos::fuzzing::profile);
}

#[test]
fn fault_flag_inputs() {
    replay("fault_flag", netchaos::fuzzing::fault_flag);
}

#[test]
fn api_request_inputs() {
    replay("api_request", netchaos::fuzzing::api_request);
}

#[test]
fn http1_inputs() {
    replay("http1", netchaos::fuzzing::http1);
}

#[test]
fn stream_units_inputs() {
    replay("stream_units", netchaos::fuzzing::stream_units);
}

#[test]
fn aws_frame_inputs() {
    replay("aws_frame", netchaos::fuzzing::aws_frame);
}

#[test]
fn dns_query_inputs() {
    replay("dns_query", netchaos::fuzzing::dns_query);
}
