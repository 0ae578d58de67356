package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/metrics"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/process"
	"corral.dev/pkg/seal"
	"corral.dev/services/gateway"
	"corral.dev/services/gateway/otlptest"
)

// waitForTraces waits for the gateway's traces consumer, which takes the
// events stored from its creation on.
func waitForTraces(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	natstest.WaitFor(t, 20*time.Second, func() error {
		_, err := js.Consumer(context.Background(), bus.StreamEvents, bus.ConsumerGatewayTraces)
		return err
	})
}

// sessionSpans waits until the receiver has want spans of session (by
// ID, an ID received twice counted once) and returns them by name.
func sessionSpans(t *testing.T, rcv *otlptest.Receiver, session uuid.UUID, want int) map[string][]otlptest.Span {
	t.Helper()
	trace := strings.ReplaceAll(session.String(), "-", "")
	var byName map[string][]otlptest.Span
	natstest.WaitFor(t, 30*time.Second, func() error {
		seen := map[string]otlptest.Span{}
		for _, s := range rcv.Spans() {
			if s.TraceID != trace {
				continue
			}
			if prev, ok := seen[s.ID]; ok && (prev.Name != s.Name || !prev.End.Equal(s.End)) {
				return fmt.Errorf("span %s received as %s and as %s", s.ID, prev.Name, s.Name)
			}
			seen[s.ID] = s
		}
		byName = map[string][]otlptest.Span{}
		for _, s := range seen {
			byName[s.Name] = append(byName[s.Name], s)
		}
		if len(seen) != want {
			return fmt.Errorf("%d spans of session %s, want %d: %v", len(seen), session, want, byName)
		}
		return nil
	})
	return byName
}

// checkSessionSpans checks the spans of a session that asked the model
// three times and ran two calls, under one run: their names, parents and
// attributes.
func checkSessionSpans(t *testing.T, byName map[string][]otlptest.Span, session uuid.UUID, failed string) {
	t.Helper()
	runs, chats, tools := byName["invoke_agent corral"], byName["chat gpt-test"], byName["execute_tool Bash"]
	if len(runs) != 1 || len(chats) != 3 || len(tools) != 2 {
		t.Fatalf("spans %v: want a run, 3 chats and 2 calls", byName)
	}
	run := runs[0]
	common := func(s otlptest.Span) {
		t.Helper()
		if s.Attrs["gen_ai.conversation.id"] != session.String() || s.Attrs["corral.tenant"] != "acme" || s.Attrs["corral.user"] != "ada" {
			t.Errorf("%s: attributes %v, want the session, tenant and user", s.Name, s.Attrs)
		}
		if s.Start.After(s.End) || s.Start.Before(run.Start) {
			t.Errorf("%s: %s to %s, in a run from %s", s.Name, s.Start, s.End, run.Start)
		}
	}
	common(run)
	if run.Parent != "" || run.Attrs["gen_ai.operation.name"] != "invoke_agent" || run.Attrs["gen_ai.agent.name"] != "corral" ||
		run.Attrs["gen_ai.provider.name"] != "openai" || run.Attrs["corral.outcome"] != "completed" {
		t.Errorf("run: parent %q, attributes %v", run.Parent, run.Attrs)
	}
	for _, c := range chats {
		common(c)
		if c.Parent != run.ID || c.Kind != 3 /* client */ || c.Attrs["gen_ai.operation.name"] != "chat" || c.Attrs["gen_ai.provider.name"] != "openai" ||
			c.Attrs["gen_ai.request.model"] != "gpt-test" || c.Attrs["gen_ai.response.model"] != "gpt-test" ||
			c.Attrs["gen_ai.usage.input_tokens"].(int64) <= 0 || c.Attrs["gen_ai.usage.output_tokens"] == nil || c.Attrs["gen_ai.response.finish_reasons"] == nil {
			t.Errorf("chat: parent %q (want %q), attributes %v", c.Parent, run.ID, c.Attrs)
		}
	}
	var errored int
	for _, c := range tools {
		common(c)
		if c.Parent != run.ID || c.Attrs["gen_ai.operation.name"] != "execute_tool" || c.Attrs["gen_ai.tool.name"] != "Bash" ||
			c.Attrs["gen_ai.tool.call.id"] == "" || c.Attrs["gen_ai.tool.type"] != "extension" || c.Attrs["corral.call.id"] == nil {
			t.Errorf("call: parent %q (want %q), attributes %v", c.Parent, run.ID, c.Attrs)
		}
		if c.Status == 2 /* error */ {
			errored++
		}
	}
	if failed != "" && errored != 1 {
		t.Errorf("%d calls with an error status, want the one that %s", errored, failed)
	}
}

// TestTracesOfADevSession runs a session with two calls, the second
// failing, through corral dev with traces on: the test's OTLP receiver
// gets its run, each model response and each call, as the GenAI
// conventions name them, linked and timed by the session's log.
func TestTracesOfADevSession(t *testing.T) {
	t.Parallel()
	rcv := otlptest.New(t)
	p := startDev(t, steps(echoResults, bash("echo one"), bash("echo two; exit 3")), map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rcv.URL})
	nc, err := p.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	waitForTraces(t, js)

	code, stdout, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "ada", "trace it")
	if code != 0 {
		t.Fatalf("corral run exited %d: %s", code, stderr)
	}
	wantIn(t, "answer", stdout, "one", "two")
	session := sessionOf(t, stderr)
	checkSessionSpans(t, sessionSpans(t, rcv, session, 6), session, "exited 3")
}

// TestTracesAcrossAGatewayRestart runs the gateway under its own user of
// deploy/nats.conf, exporting traces, and stops it while a session's
// second call waits for a reviewer: the call is approved and the session
// ends with no gateway running, and once it runs again every span of the
// session arrives (some perhaps twice, by ID), with no permission refused.
func TestTracesAcrossAGatewayRestart(t *testing.T) {
	d := startDeployment(t, byPrompt(map[string][]modeltest.Call{"clean": {bash("echo first"), bash("echo rm -rf ok")}}), nil)
	p, ctx := d.platform, context.Background()
	if err := gateway.Setup(ctx, d.admin); err != nil {
		t.Fatal(err)
	}
	rcv := otlptest.New(t)
	vars := map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rcv.URL, "CORRAL_NATS_URL": d.url, "CORRAL_GATEWAY_WEBHOOK_KEY": seal.NewKey()}
	getenv := func(k string) string {
		if v, ok := vars[k]; ok {
			return v
		}
		return p.getenv(k)
	}
	var refused []*violations // what the server refused each gateway
	startGateway := func() (stop func()) {
		env := process.NewEnv(getenv, slog.New(slog.DiscardHandler), metrics.NewRegistry(), func(user string) (*nats.Conn, error) {
			js, v := connectAs(t, d.url, user)
			refused = append(refused, v)
			return js.Conn(), nil
		})
		r, err := components[credential.UserGateway](ctx, env)
		if err != nil {
			t.Fatal(err)
		}
		serving := natstest.Serve(t, r.Run)
		return func() { serving(); _ = env.Close() }
	}
	stop := startGateway()
	waitForTraces(t, d.admin)

	run := p.runBackground(t, "acme", "clean")
	id, _ := p.pending(t, "acme")
	session := d.firstSession(t, "acme")
	// The first response, its call and the second response are exported.
	sessionSpans(t, rcv, session, 3)
	stop()

	if code, _, stderr := p.corral(t, "approve", id.String()); code != 0 {
		t.Fatalf("corral approve exited %d: %s", code, stderr)
	}
	if r := wait(t, run); r.code != 0 {
		t.Fatalf("corral run exited %d: %s", r.code, r.stderr)
	}
	startGateway()
	checkSessionSpans(t, sessionSpans(t, rcv, session, 6), session, "")
	for _, v := range refused {
		if errs := v.all(); len(errs) > 0 {
			t.Errorf("the gateway hit permission violations: %v", errs)
		}
	}
	// No other service, and no client, may take the gateway's events
	// from its consumer.
	cjs, _ := connectWith(t, d.url, p.getenv("CORRAL_NATS_USER"), p.getenv("CORRAL_NATS_PASSWORD"))
	for who, js := range map[string]jetstream.JetStream{"the sandbox-manager": d.js[credential.UserSandbox], "a client": cjs} {
		sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		if _, err := js.Consumer(sctx, bus.StreamEvents, bus.ConsumerGatewayTraces); err == nil {
			t.Errorf("%s looked up the gateway's traces consumer", who)
		}
		cancel()
	}
}
