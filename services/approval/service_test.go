package approval

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
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
	if _, err := f.svc.kv.Create(context.Background(), key(a.Tenant, a.Session, a.ID), data); err != nil {
		t.Fatal(err)
	}
	var d *event.ApprovalDecided
	natstest.WaitFor(t, 10*time.Second, func() error {
		ds := decisions(t, f.js, "acme", a.Session)
		if len(ds) == 0 {
			return errors.New("the decision was never published")
		}
		d = ds[0]
		return nil
	})
	pub := f.svc.cfg.SigningKey.Public().(ed25519.PublicKey)
	if err := d.Verify(pub, "acme", a.Session, a.ID, a.ArgsHash); err != nil || d.Approved || d.Reason != "not now" {
		t.Errorf("published %+v: %v", d, err)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		e, err := f.svc.kv.Get(context.Background(), key(a.Tenant, a.Session, a.ID))
		if err != nil {
			return err
		}
		var got Approval
		if err := json.Unmarshal(e.Value(), &got); err != nil || !got.Published {
			return fmt.Errorf("not marked published (%v)", err)
		}
		return nil
	})
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

// A request egress held (a push) outlives the turn that made it: the model
// retries it in a later turn, once approved. Only a stop cancels it. A
// held call is cancelled whenever its session ends.
func TestEgressApprovalOutlivesItsTurn(t *testing.T) {
	f := start(t, nil)
	session := f.session(t, "acme", "ada")
	egressLog := sessionlog.New(f.js, sessionlog.Options{As: sessionlog.Egress})
	input := json.RawMessage(`{"method":"POST","url":"https://git.example.test/app.git/git-receive-pack"}`)
	held := &event.ApprovalRequested{
		Header: event.NewHeader(event.TypeApprovalRequested, "acme", session),
		Call:   uuid.Must(uuid.NewV7()), User: "ada", Tool: event.EgressTool, Input: input,
		ArgsHash: event.ArgsHash(event.EgressTool, input), Rule: "git-push", Reason: "a push publishes code",
	}
	if err := egressLog.Record(context.Background(), held, "egress:"+held.Call.String()); err != nil {
		t.Fatal(err)
	}
	call := &event.ApprovalRequested{
		Header: event.NewHeader(event.TypeApprovalRequested, "acme", session),
		Call:   uuid.Must(uuid.NewV7()), Turn: 1, User: "ada", Tool: "Bash", Input: json.RawMessage(`{"command":"rm -rf x"}`),
		ArgsHash: event.ArgsHash("Bash", json.RawMessage(`{"command":"rm -rf x"}`)), Rule: "risky-shell",
	}
	f.record(t, call, call.Call.String()+":approval")
	status := func(id uuid.UUID) string {
		for _, a := range f.svc.list("") {
			if a.ID == id {
				return a.Status
			}
		}
		return ""
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if status(held.Call) != Pending || status(call.Call) != Pending {
			return fmt.Errorf("held %q, call %q; want both pending", status(held.Call), status(call.Call))
		}
		return nil
	})
	f.record(t, &event.SessionCompleted{Header: event.NewHeader(event.TypeSessionCompleted, "acme", session), Answer: "waiting for the push"}, "done-"+session.String())
	natstest.WaitFor(t, 10*time.Second, func() error {
		if status(call.Call) != Cancelled {
			return fmt.Errorf("the held call is %q once the session completed, want cancelled", status(call.Call))
		}
		return nil
	})
	if got := status(held.Call); got != Pending {
		t.Errorf("the held push is %q once the turn ended, want pending", got)
	}
	f.record(t, &event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, "acme", session), By: "ada"}, "stop-"+session.String())
	natstest.WaitFor(t, 10*time.Second, func() error {
		if status(held.Call) != Cancelled {
			return fmt.Errorf("the held push is %q once the session stopped, want cancelled", status(held.Call))
		}
		return nil
	})
}
