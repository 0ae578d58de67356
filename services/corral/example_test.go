package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/event"
	"corral.dev/pkg/logtest"
)

const exampleScript = "../../scripts/examples/start-session.sh"

// The README's example of starting a session without Go,
// scripts/examples/start-session.sh, shown there verbatim, works against
// the platform, as it is, with the real nats CLI (scripts/test.sh installs
// it) signed in with a credential.
func TestPublisherExample(t *testing.T) {
	script, err := os.ReadFile(exampleScript)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte("```sh\n"+string(script)+"```\n")) {
		t.Errorf("README.md does not show %s verbatim", exampleScript)
	}
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("the example needs jq")
	}

	p := startDev(t, echoPrompt, nil)
	// Quotes, a shell variable and a nats CLI template: all sent as they are.
	prompt := `say "hi" to $USER {{Count}}`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", exampleScript, "acme", "ada", prompt)
	creds := devClientEnv(p.data)
	cmd.Env = append(os.Environ(), "NATS_URL="+p.url, "NATS_USER="+creds["CORRAL_NATS_USER"], "NATS_PASSWORD="+creds["CORRAL_NATS_PASSWORD"])
	var stdout, stderr logtest.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr

	if _, err := exec.LookPath("nats"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("the example needs the nats CLI (scripts/test.sh installs it)")
		}
		t.Skip("the example needs the nats CLI (scripts/test.sh installs it)")
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the example failed: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("the example did not end\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	if got, want := strings.TrimSpace(stdout.String()), "answer to "+prompt; got != want {
		t.Errorf("the example printed %q, want %q", got, want)
	}
	session := sessionOf(t, stderr.String())
	var req *event.SessionRequested
	for _, ev := range p.events(t, session) {
		if r, ok := ev.(*event.SessionRequested); ok {
			req = r
		}
	}
	if req == nil || req.Tenant != "acme" || req.User != "ada" || req.Prompt != prompt {
		t.Errorf("the session recorded %+v, want tenant acme, user ada, prompt %q", req, prompt)
	}
}
