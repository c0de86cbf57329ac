#!/usr/bin/env bash
# Soak test: many concurrent clients through `netchaos proxy` and then
# `netchaos run` (half the time each), with non-destructive faults that
# rotate through the control API and destructive ones on their own rules.
# Every byte is checked; the report gives connections, bytes verified,
# mismatches (must be 0), netchaos's descriptors and memory before and
# after, and the round-trip time it adds (p50, p99). Traffic stays on
# loopback. Needs root or unprivileged user namespaces for the `run` half.
#
#   ./scripts/soak.sh                    # 5 minutes
#   ./scripts/soak.sh --minutes 1
#   ./scripts/soak.sh --clients 32 --update-docs   # also rewrite docs/reliability.md's table
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=5
clients=24
update=0
while (($#)); do
    case "$1" in
        --minutes) minutes="$2"; shift 2 ;;
        --clients) clients="$2"; shift 2 ;;
        --update-docs) update=1; shift ;;
        *) echo "usage: $0 [--minutes N] [--clients N] [--update-docs]" >&2; exit 2 ;;
    esac
done

cargo build --release --locked --bin netchaos --example soak >/dev/null
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
timeout $(( $(printf '%.0f' "$minutes") * 60 + 120 )) \
    target/release/examples/soak drive --netchaos target/release/netchaos \
    --minutes "$minutes" --clients "$clients" | tee "$out" || status=$?

if ((update)) && ((status == 0)); then
    doc=docs/reliability.md
    python3 - "$doc" "$out" "$minutes" "$clients" <<'PY'
import sys, datetime
doc, out, minutes, clients = sys.argv[1:5]
text = open(doc).read()
begin, end = "<!-- soak:begin -->", "<!-- soak:end -->"
report = open(out).read().strip()
stamp = datetime.date.today().isoformat()
body = f"{begin}\n_Measured {stamp} with `./scripts/soak.sh --minutes {minutes} --clients {clients}`._\n\n{report}\n{end}"
a, b = text.index(begin), text.index(end) + len(end)
open(doc, "w").write(text[:a] + body + text[b:])
PY
    echo "soak.sh: updated $doc"
fi
exit $status
