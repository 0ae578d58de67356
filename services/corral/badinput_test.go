package main

import (
	"context"
	"net"
	"strings"
	"testing"

	"corral.dev/pkg/logtest"
	"corral.dev/pkg/natstest"
)

// echoResults answers with every tool result it was given, so a test can
// read what the model saw.
func echoResults(seen []string) string { return "results: " + strings.Join(seen, " | ") }

// corral run of a session the harness fails for an unknown model exits 1
// with the code and the reason. (The harness's own tests cover the
// models it refuses.)
func TestUnknownModelFailsTheSession(t *testing.T) {
	p := startDev(t, steps(echoResults), map[string]string{"ANTHROPIC_API_KEY": "", "ANTHROPIC_BASE_URL": ""})
	code, _, stderr := p.corral(t, "run", "--model", "anthropic:claude-x", "hello")
	if code != 1 || !strings.Contains(stderr, "provider_not_configured") || !strings.Contains(stderr, "ANTHROPIC_API_KEY in the harness's environment") {
		t.Errorf("exit %d, stderr %q; want 1, and provider_not_configured with the reason", code, stderr)
	}
}

func TestDevSaysWhatToDoWhenThePortIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var out logtest.Buffer
	code := run(context.Background(), []string{"dev", "--data", t.TempDir(), "--listen", ln.Addr().String()}, func(string) string { return "" }, &out, &out)
	if code == 0 {
		t.Fatal("corral dev on a taken port exited 0")
	}
	for _, want := range []string{"already in use", "corral dev --listen", "CORRAL_NATS_URL"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("message lacks %q:\n%s", want, out.String())
		}
	}
}

func TestDevSaysWhatToDoWhenThePagePortIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var out logtest.Buffer
	code := run(context.Background(), []string{"dev", "--data", t.TempDir(), "--listen", natstest.FreeAddr(t), "--approvals", ln.Addr().String()}, func(string) string { return "" }, &out, &out)
	if code == 0 {
		t.Fatal("corral dev with the page's port taken exited 0")
	}
	for _, want := range []string{"reviewers' page cannot listen on " + ln.Addr().String(), "--approvals HOST:PORT"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("message lacks %q:\n%s", want, out.String())
		}
	}
}

func TestClientSaysWhenNoPlatformRuns(t *testing.T) {
	var out logtest.Buffer
	code := run(context.Background(), []string{"run", "--nats", "nats://" + natstest.FreeAddr(t), "hi"}, func(string) string { return "" }, &out, &out)
	if code == 0 || !strings.Contains(out.String(), "corral dev") {
		t.Errorf("exit %d, output %q; want a failure that says to start corral dev", code, out.String())
	}
}
