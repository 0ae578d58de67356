#!/usr/bin/env bash
# Starts a Corral session with the nats CLI and jq alone, and prints its
# answer (or why it failed) once it ends. NATS_URL, or the nats CLI's
# context, names the server; NATS_USER and NATS_PASSWORD a credential of the
# tenant (corral credentials issue), whose replies come to _INBOX.<its ID>.
#
#   scripts/examples/start-session.sh TENANT USER PROMPT
set -euo pipefail
tenant=$1 user=$2 prompt=$3
uuid() { cat /proc/sys/kernel/random/uuid 2>/dev/null || uuidgen | tr A-F a-f; }
session=$(uuid)
request=$(uuid)
inbox=()
if [ -n "${NATS_USER:-}" ]; then inbox=(--inbox-prefix "_INBOX.$NATS_USER"); fi

# A corral.session.v1.request (schemas/session/v1/request.json) on
# requests.<tenant>.<session>.u-<user in unpadded base64url>: the harness
# takes the user from the subject. Its id is also its Nats-Msg-Id, so
# publishing it again starts nothing twice.
user_token="u-$(printf %s "$user" | basenc --base64url -w0 | tr -d '=')"
nats ${inbox[@]+"${inbox[@]}"} pub --jetstream --no-templates "requests.$tenant.$session.$user_token" --header "Nats-Msg-Id:$request" "$(jq -cn \
  --arg id "$request" --arg tenant "$tenant" --arg session "$session" --arg user "$user" --arg prompt "$prompt" \
  '{type: "corral.session.v1.request", id: $id, time: (now | todate), tenant: $tenant, session: $session, user: $user, prompt: $prompt}')"
echo "session $session" >&2

# The session's log is events.<tenant>.<session>.<domain>.<name>.<writer> in
# the EVENTS stream (schemas/session/v1/*.json): wait for its end, the first
# session.completed, session.failed or session.stopped, or for a pause over a
# budget, session.paused, which a reviewer's raise ends. Only the harness
# writes a session's lifecycle, so only its writer token is read. A
# credential reads through a consumer whose one filter its create subject
# names (the server checks the two agree), pulling one event at a time.
filter="events.$tenant.$session.session.*.harness"
consumer="start-session-$session"
nats ${inbox[@]+"${inbox[@]}"} req --raw "\$JS.API.CONSUMER.CREATE.EVENTS.$consumer.$filter" "$(jq -cn --arg name "$consumer" --arg filter "$filter" \
  '{stream_name: "EVENTS", config: {name: $name, filter_subject: $filter, deliver_policy: "all", ack_policy: "none", inactive_threshold: 60000000000}}')" |
  jq -e 'has("error") | not' >/dev/null
while :; do
  ev=$(nats ${inbox[@]+"${inbox[@]}"} req --raw --timeout 10s "\$JS.API.CONSUMER.MSG.NEXT.EVENTS.$consumer" '{"batch": 1, "expires": 5000000000}')
  case $(jq -r '.type // empty' <<<"$ev" 2>/dev/null) in
  "" | corral.session.v1.requested) continue ;; # no event yet, or the start
  esac
  jq -r '
    if .type == "corral.session.v1.completed" then .answer
    elif .type == "corral.bus.v1.offloaded" then "over 16 KiB: nats stream get PAYLOADS --last-for payloads.\(.tenant).\(.object | ltrimstr("sha256-"))"
    elif .type == "corral.session.v1.paused" then "\(.type): \(.budget): \(.reason); to go on: \(.resume)"
    else "\(.type): \(.code // .by) \(.reason // "")" end' <<<"$ev"
  break
done
