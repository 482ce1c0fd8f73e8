#!/usr/bin/env bash
# The scheduler's adversary model (scheduler/tests/adversary.rs) over many more sequences than
# the default run: SEQUENCES (default 1,000,000) seeded sequences from SEED (default 0), on every
# core, in release. Prints what the sequences exercised, how many ran and how long they took; a
# violation is shrunk and printed in the case format (keep it in
# scheduler/tests/testdata/adversary/).
#
#     tools/scripts/adversary-long.sh                 # a million sequences
#     SEQUENCES=100000 SEED=5000000 tools/scripts/adversary-long.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
SEQUENCES="${SEQUENCES:-1000000}"
SEED="${SEED:-0}"
start=$(date +%s.%N)
set +e
NQ_ADVERSARY_SEQUENCES="$SEQUENCES" NQ_ADVERSARY_SEED="$SEED" \
    cargo test -p nqueens-scheduler --release --test adversary \
    adversary_random_sequences_keep_the_trust_rules_and_liveness -- --nocapture 2>&1 |
    grep -E '^adversary|^#|^(config|party|register|lease|answer|forget|release|heartbeat|wait|restart|referee|reference)|panicked|test result'
status=${PIPESTATUS[0]}
end=$(date +%s.%N)
printf 'adversary-long: %s sequences from seed %s: %.1f s in all (build included), exit %s\n' \
    "$SEQUENCES" "$SEED" "$(awk "BEGIN { print $end - $start }")" "$status"
exit "$status"
