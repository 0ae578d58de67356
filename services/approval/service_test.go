package approval

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// A decision kept but not yet in the session's log (the service died in
// between) is published by the next instance's sweep.
func TestUnpublishedDecisionIsPublished(t *testing.T) {
	f := start(t, nil)
	a := &Approval{
		ID: uuid.Must(uuid.NewV7()), Tenant: "acme", Session: uuid.Must(uuid.NewV7()), Turn: 1, User: "ada",
		Tool: "Bash", Input: json.RawMessage(`{"command":"git push"}`), Status: Denied, Reviewer: "grace",
		Reason: "not now", RequestedAt: time.Now(), DecidedAt: time.Now(),
	}
	a.ArgsHash = event.ArgsHash(a.Tool, a.Input)
	a.Decision = &event.ApprovalDecided{Header: event.NewHeader(event.TypeApprovalDecided, a.Tenant, a.Session), Call: a.ID, ArgsHash: a.ArgsHash, Reviewer: "grace", Reason: "not now"}
	a.Decision.Sign(f.svc.cfg.SigningKey)
	data, _ := json.Marshal(a)
	if _, err := f.svc.kv.Create(context.Background(), a.key(), data); err != nil {
		t.Fatal(err)
	}
	var msgs []bus.Msg
	deadline := time.Now().Add(10 * time.Second)
	for len(msgs) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the decision was never published")
		}
		time.Sleep(50 * time.Millisecond)
		var err error
		msgs, err = bus.ReadAll(context.Background(), f.js, bus.StreamEvents, bus.EventSubject("acme", a.Session, event.TypeApprovalDecided))
		if err != nil {
			t.Fatal(err)
		}
	}
	var d event.ApprovalDecided
	if err := json.Unmarshal(msgs[0].Data, &d); err != nil {
		t.Fatal(err)
	}
	pub := f.svc.cfg.SigningKey.Public().(ed25519.PublicKey)
	if err := d.Verify(pub, "acme", a.Session, a.ID, a.ArgsHash); err != nil || d.Approved || d.Reason != "not now" {
		t.Errorf("published %+v: %v", d, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		e, err := f.svc.kv.Get(context.Background(), a.key())
		if err != nil {
			t.Fatal(err)
		}
		var got Approval
		_ = json.Unmarshal(e.Value(), &got)
		if got.Published {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not marked published")
		}
	}
}

func TestConfigRefusesBadSettings(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(nil)
	good := map[string]string{"CORRAL_APPROVAL_SIGNING_KEY": event.EncodeKey(key)}
	for _, tc := range []struct{ name, k, v, want string }{
		{"no key", "CORRAL_APPROVAL_SIGNING_KEY", "", "CORRAL_APPROVAL_SIGNING_KEY"},
		{"bad key", "CORRAL_APPROVAL_SIGNING_KEY", "bm90IGEga2V5", "Ed25519"},
		{"short token", "CORRAL_REVIEWER_TOKENS", "alice=short", "at least 16"},
		{"no name", "CORRAL_REVIEWER_TOKENS", "0123456789abcdefgh", "name=token"},
		{"bad timeout", "CORRAL_APPROVAL_TIMEOUT", "soon", "CORRAL_APPROVAL_TIMEOUT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range good {
				env[k] = v
			}
			env[tc.k] = tc.v
			_, err := LoadConfig(func(k string) string { return env[k] })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	cfg, err := LoadConfig(func(k string) string {
		return map[string]string{"CORRAL_APPROVAL_SIGNING_KEY": event.EncodeKey(key), "CORRAL_REVIEWER_TOKENS": "alice=0123456789abcdef, bob=fedcba9876543210"}[k]
	})
	if err != nil || cfg.Reviewers["0123456789abcdef"] != "alice" || cfg.Reviewers["fedcba9876543210"] != "bob" {
		t.Errorf("cfg = %+v, %v", cfg.Reviewers, err)
	}
}
