package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	slackbridge "corral.dev/services/slack-bridge"
)

// TestSlackBridgeUser checks the slack-bridge user of deploy/nats.conf:
// after `corral setup` it finds the streams and its bucket, keeps threads
// in the bucket and publishes requests; it may not decide approvals, write
// another bucket or create a stream.
func TestSlackBridgeUser(t *testing.T) {
	url, _ := startDeployedServer(t)
	admin := map[string]string{"CORRAL_NATS_USER": "admin", "CORRAL_NATS_PASSWORD": password("admin")}
	var out, errs syncBuffer
	if code := run(context.Background(), []string{"setup", "--nats", url}, func(k string) string { return admin[k] }, &out, &errs); code != 0 {
		t.Fatalf("corral setup exited %d: %s", code, errs.String())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, v := connectAs(t, url, "slack-bridge")
	if err := bus.Setup(ctx, js); err != nil {
		t.Fatalf("setup as slack-bridge: %v", err)
	}
	kv, err := slackbridge.Setup(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	if _, err := kv.Put(pctx, "thread.x", []byte(`{}`)); err != nil {
		t.Errorf("put a thread: %v", err)
	}
	session := uuid.Must(uuid.NewV7())
	req := event.Request{Header: event.NewHeader(event.TypeRequest, "acme", session), User: "ada", Prompt: "hi"}
	if err := bus.Publish(ctx, js, bus.RequestSubject("acme", session, req.User), req.ID.String(), &req); err != nil {
		t.Errorf("publish a request: %v", err)
	}

	for _, subject := range []string{
		sessionlog.Subject("acme", session, event.TypeApprovalDecided, sessionlog.Approval),
		"$KV." + bus.BucketLeases + "." + session.String(),
	} {
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := bus.Publish(pctx, js, subject, uuid.NewString(), map[string]string{"type": "x"})
		pcancel()
		if err == nil {
			t.Errorf("slack-bridge published to %s", subject)
			continue
		}
		natstest.WaitFor(t, 5*time.Second, func() error {
			if !v.seen(subject) {
				return fmt.Errorf("no permission violation reported for %s (publish error: %v)", subject, err)
			}
			return nil
		})
	}
	sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer scancel()
	if _, err := js.CreateStream(sctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}}); err == nil {
		t.Error("slack-bridge created a stream")
	}
}
