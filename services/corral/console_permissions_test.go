package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/snapshot"
	"corral.dev/pkg/workspaceapi"
)

// Under deploy/nats.conf, the approval service's sessions console hears
// the sessions' output and sends stops on the console's request subject;
// it publishes no request on a user's subject (a prompt as that user),
// reads no one's requests, and writes no stop (nor any other event but its
// decisions) into a session's log itself.
func TestDeployedConsolePermissions(t *testing.T) {
	url, _ := startDeployedServer(t)
	ajs, av := connectAs(t, url, "approval")
	hjs, _ := connectAs(t, url, "harness")
	session := uuid.Must(uuid.NewV7())

	heard := make(chan *nats.Msg, 1)
	sub, err := ajs.Conn().ChanSubscribe(bus.LiveSubject("acme", session), heard)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := ajs.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := hjs.Conn().Publish(bus.LiveSubject("acme", session), []byte(`{"kind":"text","text":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-heard:
	case <-time.After(5 * time.Second):
		t.Error("the approval service did not hear a session's output")
	}

	stop := bus.ConsoleStopSubject("acme", session)
	if err := ajs.Conn().Publish(stop, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"events.acme." + session.String() + ".session.stopped.harness", "events.acme." + session.String() + ".session.stopped.approval",
		bus.RequestSubject("acme", session, "ada")}
	for _, subject := range forbidden {
		_ = ajs.Conn().Publish(subject, []byte(`{}`))
	}
	if _, err := ajs.Conn().SubscribeSync("requests.>"); err != nil {
		t.Fatal(err)
	}
	_ = ajs.Conn().Flush()
	for _, subject := range append(forbidden, "requests.>") {
		natstest.WaitFor(t, 5*time.Second, func() error {
			if !av.seen(subject) {
				return fmt.Errorf("no permission violation reported for %s", subject)
			}
			return nil
		})
	}
	if av.seen(stop) || av.seen("live.acme") {
		t.Errorf("the approval service was refused a stop or a session's output: %v", av.all())
	}

	// It reads the sessions' workspace snapshots, as the sandbox-manager
	// stores them, for the console's workspace pages.
	ctx := context.Background()
	admin, _ := connectAs(t, url, credential.UserAdmin)
	if err := bus.Setup(ctx, admin); err != nil {
		t.Fatal(err)
	}
	sjs, _ := connectAs(t, url, "sandbox-manager")
	store, err := sjs.ObjectStore(ctx, bus.BucketWorkspaces)
	if err != nil {
		t.Fatal(err)
	}
	content := []byte("hello\n")
	hash := sha256.Sum256(content)
	manifest := fmt.Sprintf(`{"seq":7,"files":[{"path":"app.txt","mode":420,"hash":"%x","size":%d}]}`, hash, len(content))
	if _, err := store.PutBytes(ctx, fmt.Sprintf("b.%x", hash), content); err != nil {
		t.Fatal(err)
	}
	if _, err := store.PutBytes(ctx, snapshot.ManifestName("acme", session), []byte(manifest)); err != nil {
		t.Fatal(err)
	}
	r, err := snapshot.NewReader(ctx, ajs, sessionlog.New(ajs, sessionlog.Options{Reader: "approval-console"}))
	if err != nil {
		t.Fatalf("the approval service opens the snapshots: %v", err)
	}
	got, err := r.Read(ctx, "acme", &workspaceapi.ReadRequest{Session: session, Path: "app.txt"})
	if err != nil || string(got.Data) != string(content) || got.Seq != 7 {
		t.Errorf("the approval service reads a snapshot's file: %+v, %v (violations %v)", got, err, av.all())
	}
}
