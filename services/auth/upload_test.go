package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/upload"
)

// A client stages its uploads under its own tenant and user, and finds
// them there (a second upload sends nothing). Another user of its tenant
// and a bot of another tenant can neither read them nor write in their
// place, and no publish there purges what is staged: the upload is laid
// out as it was sent.
func TestUploadsStayWithTheirUser(t *testing.T) {
	p := start(t, DefaultTTL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	signIn := func(tenant, user string, role credential.Role) (*client, jetstream.JetStream) {
		t.Helper()
		cred, secret := p.issue(t, tenant, user, role)
		c := p.mustConnect(t, cred.ID, secret)
		js, err := jetstream.New(c.Conn)
		if err != nil {
			t.Fatal(err)
		}
		return c, js
	}
	_, adaJS := signIn("acme", "ada", credential.RoleUser)
	bob, bobJS := signIn("acme", "bob", credential.RoleUser)
	evil, evilJS := signIn("initech", "initech-bot", credential.RoleBot)

	src := t.TempDir()
	const body = "ada's own work\n"
	if err := os.WriteFile(filepath.Join(src, "work.txt"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	ref, st, err := upload.Upload(ctx, adaJS, "acme", "ada", src)
	if err != nil || st.Blobs != 1 {
		t.Fatalf("ada's upload: %+v, %v; want her file sent", st, err)
	}
	if _, st, err := upload.Upload(ctx, adaJS, "acme", "ada", src); err != nil || st.Blobs != 0 || st.Sent != 0 {
		t.Errorf("ada's upload again: %+v, %v; want nothing sent", st, err)
	}

	sum := sha256.Sum256([]byte(body))
	staged := bus.UploadSubject("acme", bus.UserToken("ada"), hex.EncodeToString(sum[:]), 0)
	for _, a := range []struct {
		name string
		c    *client
		js   jetstream.JetStream
	}{{"bob of acme", bob, bobJS}, {"initech's bot", evil, evilJS}} {
		t.Run(a.name, func(t *testing.T) {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if m, err := bus.LastBySubject(rctx, a.js, bus.StreamUploads, staged); err == nil {
				t.Errorf("read ada's upload: %q", m.Data)
			}
			if err := a.c.refusal("$JS.API.DIRECT.GET."+bus.StreamUploads+"."+staged, 5*time.Second); err != nil {
				t.Error(err)
			}
			rctx, cancel = context.WithTimeout(ctx, time.Second)
			defer cancel()
			if _, err := a.js.Publish(rctx, staged, []byte("not ada's work\n")); err == nil {
				t.Error("wrote in ada's upload")
			}
			if err := a.c.refusal(staged, 5*time.Second); err != nil {
				t.Error(err)
			}
		})
	}

	// A roll-up of ada's own would purge the other subjects it names.
	rollup := nats.NewMsg(staged)
	rollup.Data = []byte(body)
	rollup.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	if _, err := adaJS.PublishMsg(ctx, rollup); err == nil {
		t.Error("a roll-up was stored")
	}

	chunks, err := p.js.Stream(ctx, bus.StreamUploads)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if files, _, err := upload.Layout(ctx, chunks, "acme", "ada", ref, dir, upload.Bounds{}); err != nil || files != 1 {
		t.Fatalf("layout of ada's upload: %d files, %v", files, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "work.txt")); err != nil || string(b) != body {
		t.Errorf("work.txt laid out as %q, %v; want %q", b, err, body)
	}
}
