package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/approvalapi"
	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/memoryapi"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/tool"
)

// echo has the server publish body on target for js's user, as a
// compromised service could: it stores body in the PAYLOADS stream, which
// every service may write, and asks for it back with target as the
// answer's subject. The server checks no permission on a reply subject,
// and within one account the JetStream API answers on any subject.
func echo(t *testing.T, js jetstream.JetStream, tenant, target string, body []byte) {
	t.Helper()
	ctx := context.Background()
	subject := bus.PayloadSubject(tenant, fmt.Sprintf("%064x", time.Now().UnixNano()))
	if _, err := js.Publish(ctx, subject, body); err != nil {
		t.Fatalf("store the body to echo: %v", err)
	}
	req, _ := json.Marshal(map[string]string{"last_by_subj": subject})
	if err := js.Conn().PublishRequest("$JS.API.DIRECT.GET."+bus.StreamPayloads, target, req); err != nil {
		t.Fatal(err)
	}
	if err := js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestServiceEcho: a compromised sandbox-manager has the server answer it
// on the memory and approval APIs' subjects and on the memory service's
// queue, with bodies it wrote. The APIs answer only requests that came from
// the clients' account through its imports, and the memory service runs
// only calls the harness signed, so neither the forged skills nor the
// forged decision are taken: no skill is written, the forged call is
// dead-lettered, and the approval stays pending until a reviewer decides.
func TestServiceEcho(t *testing.T) {
	d := startDeployment(t, byPrompt(map[string][]modeltest.Call{
		"clean": {bash("echo rm -rf /workspace")},
	}), nil)
	ctx := context.Background()
	sjs := d.js[credential.UserSandbox]

	// A skill, which a client may publish and the model may write only
	// with a reviewer's approval.
	skill := "/skills/echoed/SKILL.md"
	put, _ := json.Marshal(memoryapi.APIRequest{Path: skill, Content: "---\nname: echoed\ndescription: FORGED\n---\nFORGED", Op: uuid.Must(uuid.NewV7())})
	echo(t, sjs, "acme", memoryapi.Subject("acme", "ada", memoryapi.OpPut), put)

	// A decision on a call waiting for a reviewer.
	run := d.runBackground(t, "acme", "clean")
	id, _ := d.pending(t, "acme")
	decide, _ := json.Marshal(approvalapi.DecideRequest{ID: id, Approve: true, Reason: "FORGED"})
	echo(t, sjs, "acme", approvalapi.Subject("acme", "grace", bus.OpDecide), decide)

	// A call that writes a skill, on the memory service's queue for the
	// waiting session: once unsigned, once signed with a key of its own.
	session := d.firstSession(t, "acme")
	callSkill := "/skills/queued/SKILL.md"
	input, _ := json.Marshal(map[string]string{"file_path": callSkill, "content": "---\nname: queued\ndescription: FORGED\n---\nFORGED"})
	_, ownKey, _ := ed25519.GenerateKey(nil)
	for _, key := range []ed25519.PrivateKey{nil, ownKey} {
		c := event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "acme", session), Call: uuid.Must(uuid.NewV7()), Turn: 1, User: "ada", Name: tool.Write, Input: input}
		if key != nil {
			c.Sign(key, bus.ServiceMemory)
		}
		body, _ := json.Marshal(&c)
		echo(t, sjs, "acme", bus.ToolSubject(bus.ServiceMemory, "acme", session), body)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(natstest.DeadLetters(t, d.admin, "deadletter.>")); n < 2 {
			return fmt.Errorf("%d dead letters, want the two forged calls", n)
		}
		return nil
	})

	// A follow-up of the waiting session, as its user's, and a request
	// starting a session of its own.
	for _, s := range []uuid.UUID{session, uuid.Must(uuid.NewV7())} {
		req := event.Request{Header: event.NewHeader(event.TypeRequest, "acme", s), User: "ada", Prompt: "FORGED request"}
		body, _ := json.Marshal(&req)
		echo(t, sjs, "acme", bus.RequestSubject("acme", s, "ada"), body)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(natstest.DeadLetters(t, d.admin, "deadletter."+bus.StreamRequests+".>")); n < 2 {
			return fmt.Errorf("%d requests dead-lettered, want the two echoed", n)
		}
		return nil
	})
	for _, m := range natstest.DeadLetters(t, d.admin, "deadletter."+bus.StreamRequests+".>") {
		if !strings.Contains(m.Reason, "echo of a stream's answer") {
			t.Errorf("an echoed request dead-lettered for %q", m.Reason)
		}
	}

	// The echoes have been answered, or dropped, once a request sent
	// after them on the same subjects is.
	for _, s := range []string{memoryapi.Subject("acme", "ada", memoryapi.OpList), approvalapi.Subject("acme", "ada", bus.OpList)} {
		if _, err := d.admin.Conn().RequestWithContext(ctx, s, []byte(`{}`)); err != nil {
			t.Logf("%s as the admin: %v", s, err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	for _, path := range []string{skill, callSkill} {
		if code, stdout, stderr := d.corral(t, "memories", "cat", path); code == 0 || !strings.Contains(stderr, "no such file") {
			t.Errorf("the echoed skill %s was written: corral memories cat exited %d: %s%s", path, code, stdout, stderr)
		}
	}
	if _, listing := d.pending(t, "acme"); !strings.Contains(listing, id.String()) {
		t.Errorf("the echoed decision was taken: %s is no longer pending:\n%s", id, listing)
	}
	if msgs, err := bus.ReadAll(ctx, d.admin, bus.StreamEvents, "events.acme.>"); err != nil {
		t.Fatal(err)
	} else {
		for _, m := range msgs {
			if strings.Contains(string(m.Data), "FORGED request") {
				t.Errorf("an echoed request was recorded: %s on %s", m.Data, m.Subject)
			}
		}
	}

	// The session still finishes on a reviewer's decision.
	if code, _, stderr := d.corral(t, "deny", id.String(), "--reason", "not today"); code != 0 {
		t.Fatalf("corral deny: exit %d: %s", code, stderr)
	}
	if r := wait(t, run); r.code != 0 {
		t.Fatalf("corral run exited %d: %s", r.code, r.stderr)
	}
}
