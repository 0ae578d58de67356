package sandboxmanager

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/preview"
)

// previewOf is the request for a preview of an Edit of session's file p,
// signed by sign.
func previewOf(session uuid.UUID, p, oldString, newString string, sign func(*event.ToolCall)) *event.ToolCall {
	input, _ := json.Marshal(map[string]string{"file_path": p, "old_string": oldString, "new_string": newString})
	c := &event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "acme", session), Call: uuid.Must(uuid.NewV7()), Turn: 3, User: "ada", Name: "Edit", Input: input}
	sign(c)
	return c
}

func signedPreview(c *event.ToolCall) { c.SignPreview(callKey, bus.ServiceSandbox) }

// A held Edit of a workspace file is previewed from the workspace of the
// node its session is placed on, whichever node the request reaches: a
// diff of the file with its context, or a line saying why there is none.
// The preview waits for no call of the session, places no session, and
// is shown to no request the harness did not sign for a preview by the
// sandbox.
func TestPreviewOfAWorkspaceEdit(t *testing.T) {
	_, nc, js := natstest.Run(t)
	ctx := context.Background()
	a, _ := startNode(t, js, nil)
	session := uuid.Must(uuid.NewV7())
	notes := "alpha\nbeta\ngamma\ndelta\nepsilon\nzeta\neta\ntheta\n"
	write, _ := json.Marshal(map[string]string{"file_path": "/workspace/notes.txt", "content": notes})
	dispatch(t, js, session, uuid.Must(uuid.NewV7()), "Write", string(write), "write")
	dispatch(t, js, session, uuid.Must(uuid.NewV7()), "Bash", `{"command":"head -c 1100000 /dev/zero | tr '\\0' x > big.txt; printf 'a\\0b gamma' > blob.bin"}`, "files")
	resultsOf(t, js, session, 2)
	// A call holding the session's turn, and its sandbox, meanwhile.
	dispatch(t, js, session, uuid.Must(uuid.NewV7()), "Bash", `{"command":"sleep 5"}`, "sleep")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !running(a, "acme", session) {
			return errors.New("the sleep does not run yet")
		}
		return nil
	})

	ask := func(c *event.ToolCall) (string, error) {
		return preview.Ask(ctx, nc, bus.ServiceSandbox, c)
	}
	diff := "--- a/workspace/notes.txt\n+++ b/workspace/notes.txt\n@@ -1,6 +1,6 @@\n alpha\n beta\n-gamma\n+GAMMA\n delta\n epsilon\n zeta\n"
	for _, tc := range []struct{ path, want string }{
		{"/workspace/notes.txt", diff},
		{"notes.txt", diff},
		{"/workspace/big.txt", "No diff: /workspace/big.txt is 1100000 bytes: previews are made of files of up to 1 MiB."},
		{"/workspace/blob.bin", "No diff: /workspace/blob.bin is a binary file: previews are made of text files."},
		{"/workspace/nope.txt", "No diff: file does not exist: /workspace/nope.txt: the Edit will be refused."},
	} {
		start := time.Now()
		got, err := ask(previewOf(session, tc.path, "gamma", "GAMMA", signedPreview))
		if err != nil || got != tc.want {
			t.Errorf("preview of %s = %q, %v\nwant %q", tc.path, got, err, tc.want)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("preview of %s took %s: it waited for the session's call", tc.path, d)
		}
	}

	// Another node forwards the request to the session's.
	b := newNode(t, js, nil)
	t.Cleanup(b.driver.Close)
	req := previewOf(session, "/workspace/notes.txt", "gamma", "GAMMA", signedPreview)
	data, _ := json.Marshal(req)
	fctx, cancel := context.WithTimeout(ctx, preview.Timeout)
	defer cancel()
	got, err := b.answerPreview(fctx, &nats.Msg{Subject: bus.PreviewSubject(bus.ServiceSandbox, "acme", session), Data: data})
	if err != nil || got != diff {
		t.Errorf("preview through another node = %q, %v\nwant %q", got, err, diff)
	}
	if hasWorkspace(b, session) {
		t.Error("the forwarding node made a workspace")
	}

	// A session placed nowhere has nothing to show, and is not placed.
	nowhere := uuid.Must(uuid.NewV7())
	if got, err := ask(previewOf(nowhere, "/workspace/notes.txt", "gamma", "GAMMA", signedPreview)); err != nil || got != "" {
		t.Errorf("preview in a session placed nowhere = %q, %v; want nothing", got, err)
	}
	kv, err := js.KeyValue(ctx, bus.BucketPlacements)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, bus.PlacementKey("acme", nowhere)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("placement of the session after its preview: %v; want none", err)
	}

	// Only the harness's request for a preview by the sandbox is
	// answered, from the queue or forwarded.
	_, otherKey, _ := ed25519.GenerateKey(nil)
	forged := map[string]func(*event.ToolCall){
		"unsigned":              func(c *event.ToolCall) { c.Signature = nil },
		"signed by another key": func(c *event.ToolCall) { c.SignPreview(otherKey, bus.ServiceSandbox) },
		"signed to run":         func(c *event.ToolCall) { c.Sign(callKey, bus.ServiceSandbox) },
		"signed for memory":     func(c *event.ToolCall) { c.SignPreview(callKey, bus.ServiceMemory) },
		"signed, then altered":  func(c *event.ToolCall) { signedPreview(c); c.User = "mallory" },
	}
	for name, sign := range forged {
		c := previewOf(session, "/workspace/notes.txt", "gamma", "GAMMA", sign)
		if got, err := ask(c); err == nil || strings.Contains(got, "gamma") {
			t.Errorf("%s: preview = %q, %v; want a refusal, and no content", name, got, err)
		}
		m := nats.NewMsg(bus.NodePreviewSubject(a.cfg.Node))
		m.Data, _ = json.Marshal(c)
		m.Header.Set(subjectHeader, bus.PreviewSubject(bus.ServiceSandbox, "acme", session))
		if got, err := preview.Request(fctx, nc, m); err == nil || strings.Contains(got, "gamma") {
			t.Errorf("%s, sent to the node: preview = %q, %v; want a refusal, and no content", name, got, err)
		}
	}
	// Nor is a forwarded request answered by a node the session is not
	// placed on: b has the request forwarded to it.
	m := nats.NewMsg(bus.NodePreviewSubject(b.cfg.Node))
	m.Data = data
	m.Header.Set(subjectHeader, bus.PreviewSubject(bus.ServiceSandbox, "acme", session))
	if got, err := b.answerForwardedPreview(fctx, m); err == nil || got != "" {
		t.Errorf("a forwarded preview answered by a node the session is not placed on = %q, %v; want a refusal", got, err)
	}
	resultsOf(t, js, session, 3)
}
