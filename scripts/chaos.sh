#!/usr/bin/env bash
# Runs the long form of the chaos test: many sessions against nats-server
# (under deploy/nats.conf), a harness and a sandbox-manager (each signed in as
# its own user) as separate processes, while it SIGKILLs them at random
# (services/corral/chaos_test.go). CI runs the short form with the
# other tests. SESSIONS, KILLS and TIMEOUT size it; further arguments go to
# the test binary, e.g. -chaos.seed=N to replay a run, -chaos.dir=DIR to keep
# its logs and state.
set -euo pipefail
cd "$(dirname "$0")/../services/corral"
exec go test -run '^TestChaos$' -count=1 -timeout 60m -v . -args \
	-chaos.sessions="${SESSIONS:-300}" -chaos.kills="${KILLS:-100}" -chaos.timeout="${TIMEOUT:-30m}" "$@"
