#!/usr/bin/env bash
# Runs each cargo-fuzz target (fuzz/) for a bounded time on the nightly
# toolchain, starting from the committed seeds, and reports executions and
# findings per target. A crash is copied to fuzz/regressions/TARGET (so
# that tests/fuzz_corpus.rs replays it once fixed) and fails the run.
#
#   ./scripts/fuzz.sh                 # 60 s per target
#   ./scripts/fuzz.sh --seconds 300   # longer
#   ./scripts/fuzz.sh --report FILE   # also write the results as markdown
#
# Without nightly or cargo-fuzz (and no way to install it), it says so and
# exits 3; test.sh then relies on tests/fuzz_corpus.rs alone. Targets that
# do not build exit 4 (not a finding of the fuzzer's).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
report=""
while (($#)); do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --report) report="$2"; shift 2 ;;
        *) echo "usage: $0 [--seconds N] [--report FILE]" >&2; exit 2 ;;
    esac
done
targets=(profile fault_flag api_request http1 stream_units aws_frame dns_query)

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "fuzz.sh: no nightly toolchain (rustup toolchain install nightly)" >&2
    exit 3
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked >/dev/null 2>&1 || {
        echo "fuzz.sh: cargo-fuzz is not installed and could not be (cargo install cargo-fuzz)" >&2
        exit 3
    }
fi

echo "== building the fuzz targets (nightly, AddressSanitizer)"
if ! cargo +nightly fuzz build --release >/dev/null; then
    echo "fuzz.sh: the fuzz targets did not build (see above)" >&2
    exit 4
fi

results=()
failed=0
for t in "${targets[@]}"; do
    corpus="fuzz/corpus/$t"
    mkdir -p "$corpus" "fuzz/artifacts/$t" "fuzz/regressions/$t"
    cp -n fuzz/seeds/"$t"/* "$corpus"/ 2>/dev/null || true
    log=$(mktemp)
    echo "== fuzzing $t for ${seconds}s"
    set +e
    cargo +nightly fuzz run --release "$t" "$corpus" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1
    rc=$?
    set -e
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n1 | cut -d' ' -f2)
    units=$(find "$corpus" -type f | wc -l)
    crashes=$(find "fuzz/artifacts/$t" -type f -newer "$log" | wc -l)
    if ((rc != 0)); then
        failed=1
        for a in "fuzz/artifacts/$t"/*; do
            [[ -f "$a" ]] && cp "$a" "fuzz/regressions/$t/" && echo "   crash input kept: fuzz/regressions/$t/$(basename "$a")"
        done
        grep -E "panicked|ERROR|SUMMARY" "$log" | head -n 20 || true
    fi
    echo "   executions ${execs:-?}, coverage ${cov:-?}, corpus $units inputs, crashes $crashes, exit $rc"
    results+=("| \`$t\` | ${seconds} s | ${execs:-?} | ${cov:-?} | $units | $crashes |")
    rm -f "$log"
done

if [[ -n "$report" ]]; then
    {
        echo "| target | time | executions | coverage (edges) | corpus | crashes |"
        echo "|---|---|---|---|---|---|"
        printf '%s\n' "${results[@]}"
    } >"$report"
fi
exit $failed
