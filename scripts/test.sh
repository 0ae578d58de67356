#!/usr/bin/env bash
# Runs go vet and the race-enabled tests of every module in go.work,
# installing what the tests need first (bubblewrap, Chromium for the
# reviewers' page's browser test, jq and the nats CLI for the publisher
# example, git, pip and npm for the egress tests) when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

apt_install() {
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "test.sh: please install: $*" >&2
		exit 1
	fi
	as_root apt-get update -qq
	DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v jq >/dev/null 2>&1 || missing+=(jq) # scripts/examples/start-session.sh
# The real clients the egress tests drive through the proxy, from a
# sandbox, against local stand-ins for a forge and package registries.
command -v git >/dev/null 2>&1 || missing+=(git)
command -v curl >/dev/null 2>&1 || missing+=(curl)
[ -x /usr/lib/git-core/git-http-backend ] || missing+=(git)
/usr/bin/python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi
# The nats CLI, which the publisher example runs (built from source, about
# 40 s the first time).
export PATH="$(go env GOPATH)/bin:$PATH"
if ! command -v nats >/dev/null 2>&1; then
	go install github.com/nats-io/natscli/nats@v0.5.0
fi

# PostgreSQL: start the local server if it is installed but stopped.
if command -v pg_lsclusters >/dev/null 2>&1; then
	pg_lsclusters --no-header 2>/dev/null | while read -r ver cluster _ status _; do
		if [ "$status" != "online" ]; then
			as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$cluster" start || true
		fi
	done
fi
export TEST_DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}"

unformatted=$(gofmt -l pkg schemas services)
if [ -n "$unformatted" ]; then
	echo "test.sh: gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi

# The sandbox escape suite writes what it tried and how each attempt ended
# here; it is printed at the end.
if [ -z "${CORRAL_ESCAPE_REPORT:-}" ]; then
	CORRAL_ESCAPE_REPORT=$(mktemp)
	trap 'rm -f "$CORRAL_ESCAPE_REPORT"' EXIT
	export CORRAL_ESCAPE_REPORT
fi
modules=$(go work edit -json | sed -n 's/.*"DiskPath": "\.\/\(.*\)".*/\1/p')
for m in $modules; do
	echo "== $m"
	(cd "$m" && go vet ./... && go test -race -count=1 -timeout 15m "$@" ./...)
done
# The harness's speed-ups change no outcome: its tests, and the chaos test
# (whose processes inherit the setting), pass without them.
echo "== services/harness, services/corral TestChaos with CORRAL_HARNESS_SPEEDUPS=none"
(cd services/harness && CORRAL_HARNESS_SPEEDUPS=none go test -race -count=1 -timeout 15m ./...)
(cd services/corral && CORRAL_HARNESS_SPEEDUPS=none go test -count=1 -timeout 15m -run 'TestChaos$' .)
# Every fuzz target runs briefly beyond its seed corpus (which the tests
# above ran): go test fuzzes one target of a package per invocation.
fuzztime="${CORRAL_FUZZTIME:-3s}"
# fuzz runs one target; a run that ends with Go's own "context deadline
# exceeded" at the end of its time and wrote no failing input is run once
# more: Go 1.26's fuzzing coordinator can report its deadline as a failure
# on a loaded machine (go.dev/issue/75804, fixed in Go 1.27).
fuzz() {
	local dir=$1 target=$2 log
	log=$(mktemp)
	for attempt in 1 2; do
		if (cd "$dir" && go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" .) 2>&1 | tee "$log"; then
			rm -f "$log"
			return 0
		fi
		if [ "$attempt" = 2 ] || ! grep -q 'context deadline exceeded' "$log" || grep -q 'Failing input written' "$log"; then
			rm -f "$log"
			return 1
		fi
		echo "== fuzz $dir $target: the coordinator's deadline, no failing input: once more"
	done
}
grep -rl --include='*_test.go' '^func Fuzz' $modules | sort | while read -r file; do
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
		echo "== fuzz $(dirname "$file") $target"
		fuzz "$(dirname "$file")" "$target"
	done
done
if [ -s "$CORRAL_ESCAPE_REPORT" ]; then
	echo "== sandbox escape suite (services/corral TestEscapeSuite)"
	cat "$CORRAL_ESCAPE_REPORT"
fi
