#!/usr/bin/env bash
# Runs Corral's benchmarks and their baselines in one run and prints the
# figures side by side: the durable tool call round trip next to a bare
# fork-exec, a bare bwrap start and a bare JetStream round trip, and what is
# left of it without the command, Corral's own cost; a whole step around one
# call, stage by stage, and what is left of it without the command and the
# model's part; the same writes as the call's and the step's by bare
# clients, what those own costs could come to (the durable floor), the
# step's by the same stages;
# what the harness decides after a result, on sessions of growing length;
# the step and the throughput each in the open configuration (no users)
# and the deployed one (deploy/nats.conf, every service under its own
# user, the client signed in with a credential), one after the other; what
# judging an event read from a session log costs next to decoding it alone;
# a request through egress, tunnelled and intercepted, next to one direct;
# sandbox cold start and warm call; throughput with 64 sessions; resume
# after SIGKILL, next to the same step with no kill; the steps of 64
# sessions while each service restarts gracefully, next to those while
# none does; another tenant's call while one floods the queue, next to
# the same call on an idle platform; corral stop killing a running call,
# next to killing a bare process; workspace snapshots and restores;
# resume from suspension, what a suspended sandbox holds, and how many idle
# sessions one node holds; a session prepared from a repository, next to
# git clone, and one of a cached environment, next to one with none; the
# billed input of a session with prompt caching, next to none cached; the
# model's first streamed text on corral run's output, next to a bare core
# NATS message.
#   scripts/bench.sh [N]    # N iterations per latency benchmark (default 500)
#   IDLE_SESSIONS=10000     # sessions of the idle-sessions benchmark
#   CORRAL_HARNESS_SPEEDUPS # the harness's speed-ups in the benchmarks
#                           # that run it (default all; see README)
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-500}"
command -v bwrap >/dev/null 2>&1 || { echo "bench.sh: install bubblewrap first (scripts/test.sh does)" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr)"
(cd services/sandbox-manager && go test -run '^$' -bench 'ForkExecTrue|ForkExecBash|BwrapTrue|WarmCall|ColdStart|ResumeSuspended|Thaw' -benchtime "${n}x" ./internal/sandbox) | tee -a "$out"
(cd services/sandbox-manager && go test -run '^$' -bench 'SuspendedMemory' -benchtime 100x ./internal/sandbox) | tee -a "$out"
(cd services/corral && go test -run '^$' -bench 'JetStreamRoundTrip|ModelRoundTrip|ToolCallRoundTrip|StepRoundTrip|DurableFloor' -benchtime "${n}x" .) | tee -a "$out"
(cd services/corral && go test -run '^$' -bench 'Throughput' -benchtime "$((n * 20))x" .) | tee -a "$out"
(cd pkg && go test -run '^$' -bench 'Judge' -benchtime "$((n * 1000))x" ./sessionlog) | tee -a "$out"
# What a step decides once a call's result is in (the model asked next),
# on sessions of 20, 200 and 1,000 turns.
(cd services/harness && go test -run '^$' -bench 'Next' -benchtime "$((n * 100))x" ./internal/core) | tee -a "$out"
# Decoding a model's turn from its stream, next to the same turn whole.
(cd pkg && go test -run '^$' -bench 'Decode(Streamed|JSON)' -benchtime "$((n * 10))x" ./model) | tee -a "$out"
# Egress: a small HTTPS request on a fresh connection, direct on loopback,
# tunnelled and intercepted through the proxy; a 100 MB download each way;
# and the sandbox's relay from 127.0.0.1:3128 to its socket, next to
# dialling the socket.
(cd services/egress && go test -run '^$' -bench '^Benchmark(Direct|Tunnel|Intercept)$' -benchtime "${n}x" ./internal/proxy) | tee -a "$out"
(cd services/egress && go test -run '^$' -bench 'Download100MB' -benchtime 5x ./internal/proxy) | tee -a "$out"
(cd services/sandbox-manager && go test -run '^$' -bench 'EgressRelay' -benchtime "${n}x" ./internal/sandbox) | tee -a "$out"
(cd pkg && go test -run '^$' -bench 'CallSignature' -benchtime "$((n * 10))x" ./bus) | tee -a "$out"
(cd services/corral && go test -run '^$' -bench 'Resume' -benchtime 20x .) | tee -a "$out"
(cd services/corral && go test -run '^$' -bench 'GracefulRestart' -benchtime 5x .) | tee -a "$out"
(cd services/corral && go test -run '^$' -bench 'Fairness' -benchtime 20x .) | tee -a "$out"
(cd services/corral && go test -run '^$' -bench 'Stop|KillProcess' -benchtime "$((n / 10 + 1))x" .) | tee -a "$out"
(cd services/sandbox-manager && go test -run '^$' -bench 'SnapshotCallChanges|1MB' -benchtime "$((n / 10 + 1))x" . && go test -run '^$' -bench '100MB' -benchtime 3x .) | tee -a "$out"
# A session's preparation: from a 10 MB repository (next to git clone on
# the host), and of a cached environment (next to none).
(cd services/corral && go test -run '^$' -bench 'Prepare' -benchtime "$((n / 50 + 5))x" .) | tee -a "$out"
# The billed input of a 30-turn session with prompt caching, next to the
# same input with nothing cached.
(cd services/corral && go test -run '^$' -bench 'PromptCache' -benchtime 3x .) | tee -a "$out"
# The provider's first streamed text → on corral run's output (p50, p95,
# p99), next to a core NATS message from one connection to another.
(cd services/corral && go test -run '^$' -bench 'LiveText' -benchtime "${n}x" .) | tee -a "$out"
# The gateway: a session's event appended → on an API event stream's
# client (p50, p95, p99), next to the same append → an ordered consumer's
# handler; pages of a 1,000-turn session's events per second on one core,
# next to the same page from a bare handler, and (a few) as each page cost
# before: the whole log read.
(cd services/gateway && go test -run '^$' -bench 'EventToSSE' -benchtime "${n}x" .) | tee -a "$out"
(cd services/gateway && go test -run '^$' -bench 'ListEvents/(page|http)' -benchtime "$((n * 4))x" -cpu 1 . && go test -run '^$' -bench 'ListEvents/whole-log' -benchtime 5x -cpu 1 .) | tee -a "$out"
# Last: the idle sessions' ten thousand workspaces keep the disk busy for a
# while after.
(cd services/sandbox-manager && go test -run '^$' -bench 'IdleSessions' -benchtime "${IDLE_SESSIONS:-10000}x" -timeout 30m ./internal/sandbox) | tee -a "$out"

echo
echo "| benchmark | p50 | p99 | other |"
echo "|---|---|---|---|"
awk '
# ratios prints own as multiples of the bare round trip: paired with it,
# alone, and back to back.
function ratios(own, what, paired, alone, hot, target,    r, more) {
	r = ""; more = ""
	if (paired > 0) r = sprintf("%.2f×", own / paired)
	if (alone > 0) more = more sprintf("; to the round trip alone %.2f×", own / alone)
	if (hot > 0) more = more sprintf("; back to back %.2f×", own / hot)
	printf "| %s / JetStreamRoundTrip | %s | | target ≤ %s%s |\n", what, r, target, more
}
/^Benchmark/ {
	name=$1; sub(/-[0-9]+$/, "", name); sub(/^Benchmark/, "", name)
	p50=""; p99=""; mean=""; other=""
	for (i = 3; i < NF; i += 2) {
		unit=$(i+1)
		if (unit ~ /^steady-/) other=other $i " " unit " "
		else if (unit == "paired-js-p50-ms") paired[name]=$i
		else if (unit == "paired-js-p99-ms") continue
		else if (unit ~ /p50-ms$/) p50=$i " ms"
		else if (unit ~ /p99-ms$/) p99=$i " ms"
		else if (unit == "ns/op") mean=$i
		else if (unit !~ /^(B|allocs)\/op$/) other=other $i " " unit " "
		if (unit == "calls/s") tp[name]=$i
		if (unit == "MB/s") mbs[name]=$i
	}
	if (p50 == "" && mean != "" && (other == "" || other ~ /MB\/s/)) {
		if (mean < 1e5) { p50=sprintf("%.2f µs (mean)", mean / 1e3); us[name]=mean / 1e3 }
		else p50=sprintf("%.2f ms (mean)", mean / 1e6)
	}
	if (name in paired) other=other "(bare round trip beside it: " paired[name] " ms) "
	printf "| %s | %s | %s | %s|\n", name, p50, p99, other
	split(p50, v, " "); ms[name]=v[1]
	split(p99, v, " "); ms99[name]=v[1]
}
END {
	# The ratios are to the bare round trip idle before each op, as the
	# call, the warm call and the step are: measured beside the call and
	# the step, op for op (paired), and alone; then to the same round trip
	# back to back.
	js = ("JetStreamRoundTrip" in ms) ? ms["JetStreamRoundTrip"] : 0
	hot = ("JetStreamRoundTripBackToBack" in ms) ? ms["JetStreamRoundTripBackToBack"] : 0
	if (("ToolCallRoundTrip" in ms) && ("WarmCall" in ms)) {
		own = ms["ToolCallRoundTrip"] - ms["WarmCall"]
		printf "| OwnCost (ToolCallRoundTrip - WarmCall) | %.2f ms | | |\n", own
		ratios(own, "OwnCost", paired["ToolCallRoundTrip"], js, hot, "2×")
	}
	for (c = 1; c <= 2; c++) {
		step = c == 1 ? "StepRoundTrip/open" : "StepRoundTrip/deployed"
		if ((step in ms) && ("WarmCall" in ms) && ("ModelRoundTrip" in ms)) {
			own = ms[step] - ms["WarmCall"] - ms["ModelRoundTrip"]
			printf "| StepOwnCost%s (%s - WarmCall - ModelRoundTrip) | %.2f ms | | |\n", c == 1 ? "" : "/deployed", step, own
			ratios(own, "StepOwnCost" (c == 1 ? "" : "/deployed"), paired[step], js, hot, "3×")
		}
	}
	# What the writes of a call and of a step cost with no Corral code
	# (BenchmarkDurableFloor), as multiples of the round trip beside them:
	# the least OwnCost and StepOwnCost could come to with this design, and
	# with designs that write less.
	split("call step step-dispatch-in-response step-calls-from-log", fl, " ")
	for (i = 1; i <= 4; i++) {
		f = "DurableFloor/" fl[i]
		if ((f in ms) && paired[f] > 0)
			printf "| %s / JetStreamRoundTrip | %.2f× | | paired; the least %s could cost |\n", f, ms[f] / paired[f], i == 1 ? "OwnCost" : "StepOwnCost"
	}
	if (("StepRoundTrip/open" in ms) && ("StepRoundTrip/deployed" in ms))
		printf "| StepRoundTrip deployed/open | %.2f× | %.2f× | |\n", ms["StepRoundTrip/deployed"] / ms["StepRoundTrip/open"], ms99["StepRoundTrip/deployed"] / ms99["StepRoundTrip/open"]
	if (("StepRoundTrip/open" in ms) && ("StepRoundTrip/open-whole" in ms))
		printf "| StepRoundTrip streamed/whole | %.2f× | %.2f× | target ≤ 1× |\n", ms["StepRoundTrip/open"] / ms["StepRoundTrip/open-whole"], ms99["StepRoundTrip/open"] / ms99["StepRoundTrip/open-whole"]
	if (("Throughput/open" in tp) && ("Throughput/deployed" in tp))
		printf "| Throughput deployed/open | | | %.2f× |\n", tp["Throughput/deployed"] / tp["Throughput/open"]
	if (("Tunnel" in ms) && ("Direct" in ms))
		printf "| Tunnel - Direct (added by egress) | %.2f ms | | target ≤ 1 ms |\n", ms["Tunnel"] - ms["Direct"]
	if (("Intercept" in ms) && ("Direct" in ms))
		printf "| Intercept - Direct (added by egress) | %.2f ms | | target ≤ 3 ms |\n", ms["Intercept"] - ms["Direct"]
	if (("Download100MBTunnel" in mbs) && ("Download100MBDirect" in mbs))
		printf "| Download100MB tunnel/direct | | | %.0f%% (target ≥ 80%%) |\n", 100 * mbs["Download100MBTunnel"] / mbs["Download100MBDirect"]
	if (("Download100MBIntercept" in mbs) && ("Download100MBDirect" in mbs))
		printf "| Download100MB intercept/direct | | | %.0f%% (target ≥ 80%%) |\n", 100 * mbs["Download100MBIntercept"] / mbs["Download100MBDirect"]
	if (("EventToSSE/sse" in ms) && ("EventToSSE/jetstream" in ms))
		printf "| EventToSSE sse (jetstream) | %.3f ms (%.3f ms; target ≤ 2 ms) | | |\n", ms["EventToSSE/sse"], ms["EventToSSE/jetstream"]
	if (("Judge/judge" in us) && ("Judge/parse" in us))
		printf "| JudgeCost (Judge/judge - Judge/parse) | %.2f µs (mean) | | per event |\n", us["Judge/judge"] - us["Judge/parse"]
}' "$out"
