#!/usr/bin/env bash
# Starts a Corral session with the nats CLI and jq alone, and prints its
# answer (or why it failed) once it ends. NATS_URL, or the nats CLI's
# context, names the server.
#
#   scripts/examples/start-session.sh TENANT USER PROMPT
set -euo pipefail
tenant=$1 user=$2 prompt=$3
uuid() { cat /proc/sys/kernel/random/uuid 2>/dev/null || uuidgen | tr A-F a-f; }
session=$(uuid)
request=$(uuid)

# A corral.session.v1.request (schemas/session/v1/request.json). Its id is
# also its Nats-Msg-Id, so publishing it again starts nothing twice.
nats pub --jetstream --no-templates "requests.$tenant.$session" --header "Nats-Msg-Id:$request" "$(jq -cn \
  --arg id "$request" --arg tenant "$tenant" --arg session "$session" --arg user "$user" --arg prompt "$prompt" \
  '{type: "corral.session.v1.request", id: $id, time: (now | todate), tenant: $tenant, session: $session, user: $user, prompt: $prompt}')"
echo "session $session" >&2

# The session's log is events.<tenant>.<session>.<domain>.<name> in the EVENTS
# stream (schemas/session/v1/*.json): wait for its end, the first
# session.completed, session.failed or session.stopped.
s="events.$tenant.$session.session"
nats sub --stream EVENTS --all --count 1 --raw --ignore-subject "$s.requested" "$s.*" | jq -r '
  if .type == "corral.session.v1.completed" then .answer
  elif .type == "corral.bus.v1.offloaded" then "over 16 KiB: nats object get payloads \(.object)"
  else "\(.type): \(.code // .by) \(.reason // "")" end'
