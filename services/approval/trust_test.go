package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

// deadLetter waits for the dead letter of the event at stream sequence seq
// and returns its reason.
func deadLetter(t *testing.T, js jetstream.JetStream, seq uint64) string {
	t.Helper()
	var reason string
	natstest.WaitFor(t, 10*time.Second, func() error {
		for _, dl := range natstest.DeadLetters(t, js, "deadletter.EVENTS.>") {
			if dl.StreamSeq == seq {
				reason = dl.Reason
				return nil
			}
		}
		return fmt.Errorf("no dead letter of event %d", seq)
	})
	return reason
}

// kept reports whether any tenant's approval has ID id.
func (f *fixture) kept(t *testing.T, id uuid.UUID) bool {
	t.Helper()
	keys, err := f.svc.kv.ListKeysFiltered(context.Background(), "*.*."+id.String())
	if err != nil {
		t.Fatal(err)
	}
	for range keys.Keys() {
		return true
	}
	return false
}

// An approval request whose args_hash is of another command than the input
// it shows is refused: nothing is kept for a reviewer to approve, it is
// dead-lettered with its reason, and no decision on it can be signed. A
// reviewer approving "ls" must never sign a hash that lets "git push
// --force" run.
func TestMismatchedHashIsRefused(t *testing.T) {
	f := start(t, nil)
	session := f.session(t, "acme", "ada")
	shown := json.RawMessage(`{"command":"ls -la /workspace"}`)
	runs := json.RawMessage(`{"command":"git push --force origin main"}`)
	forged := &event.ApprovalRequested{
		Header: event.NewHeader(event.TypeApprovalRequested, "acme", session),
		Call:   uuid.Must(uuid.NewV7()), Turn: 1, User: "ada", Tool: "Bash", Input: shown,
		ArgsHash: event.ArgsHash("Bash", runs), Rule: "risky-shell", Reason: "pushes code",
	}
	seq := natstest.Forge(t, f.js, sessionlog.Subject("acme", session, event.TypeApprovalRequested, sessionlog.Harness), forged)

	if reason := deadLetter(t, f.js, seq); !strings.Contains(reason, sessionlog.ReasonHash) {
		t.Errorf("dead letter reason = %q, want %s", reason, sessionlog.ReasonHash)
	}
	// The same request with the hash of what it shows is kept, with that
	// hash: the service did read past the forgery.
	honest := *forged
	honest.Header = event.NewHeader(event.TypeApprovalRequested, "acme", session)
	honest.Call = uuid.Must(uuid.NewV7())
	honest.ArgsHash = event.ArgsHash("Bash", shown)
	f.record(t, &honest, honest.Call.String()+":approval")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !f.has(honest.Call) {
			return errors.New("the honest request was never kept")
		}
		return nil
	})
	if f.kept(t, forged.Call) {
		t.Fatal("the request with a mismatched hash was kept")
	}
	if _, err := f.svc.Decide(context.Background(), Ref{ID: forged.Call, Tenant: "acme", Session: session}, true, "alice", "looks fine"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Decide on the refused request: %v, want ErrNotFound", err)
	}
	for _, d := range decisions(t, f.js, "acme", session) {
		if d.Call == forged.Call || d.ArgsHash == forged.ArgsHash {
			t.Errorf("a decision was signed over the forged request: %+v", d)
		}
	}
	a, err := f.svc.Decide(context.Background(), Ref{ID: honest.Call, Tenant: "acme", Session: session}, true, "alice", "ok")
	if err != nil {
		t.Fatal(err)
	}
	if a.ArgsHash != event.ArgsHash("Bash", shown) || a.Decision.ArgsHash != a.ArgsHash {
		t.Errorf("signed hash %q, want the hash of the input shown", a.Decision.ArgsHash)
	}
}

// A raise of a session's caps becomes an approval only when the session's
// own user asked for it: one published under another user's token, and
// one recorded naming another user, are refused and dead-lettered.
func TestRaiseByAnotherUserIsRefused(t *testing.T) {
	f := start(t, nil)
	session := f.session(t, "acme", "ada")
	raise := func(user string) *event.BudgetRaise {
		return &event.BudgetRaise{
			Header: event.NewHeader(event.TypeBudgetRaise, "acme", session),
			Raise:  uuid.Must(uuid.NewV7()), User: user, Limits: json.RawMessage(`{"max_cost_usd":1000}`),
		}
	}
	for _, tc := range []struct {
		name   string
		writer sessionlog.Writer
		user   string
	}{
		{"under mallory's token", sessionlog.Writer(bus.UserToken("mallory")), "mallory"},
		// Clients write no raises: the harness records them for the
		// session's user, once it has checked the request's user.
		{"under ada's own token", sessionlog.Writer(bus.UserToken("ada")), "ada"},
		{"naming mallory", sessionlog.Harness, "mallory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := raise(tc.user)
			seq := natstest.Forge(t, f.js, sessionlog.Subject("acme", session, event.TypeBudgetRaise, tc.writer), r)
			if reason := deadLetter(t, f.js, seq); !strings.Contains(reason, sessionlog.ReasonWriter) {
				t.Errorf("dead letter reason = %q, want %s", reason, sessionlog.ReasonWriter)
			}
			if f.kept(t, r.Raise) {
				t.Errorf("the raise was turned into an approval")
			}
		})
	}
	// The session's user's raise, as the harness records it, is kept.
	r := raise("ada")
	f.record(t, r, "control:"+r.ID.String())
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !f.has(r.Raise) {
			return errors.New("the owner's raise was never kept")
		}
		return nil
	})
}

// A request on a subject of one tenant whose body names another is
// refused: nothing is kept in either tenant.
func TestRequestNamingAnotherTenantIsRefused(t *testing.T) {
	f := start(t, nil)
	session := f.session(t, "acme", "ada")
	input := json.RawMessage(`{"command":"git push"}`)
	ev := &event.ApprovalRequested{
		Header: event.NewHeader(event.TypeApprovalRequested, "initech", session),
		Call:   uuid.Must(uuid.NewV7()), Turn: 1, User: "ada", Tool: "Bash", Input: input,
		ArgsHash: event.ArgsHash("Bash", input), Rule: "risky-shell", Reason: "pushes code",
	}
	seq := natstest.Forge(t, f.js, sessionlog.Subject("acme", session, event.TypeApprovalRequested, sessionlog.Harness), ev)
	if reason := deadLetter(t, f.js, seq); !strings.Contains(reason, sessionlog.ReasonTenant) {
		t.Errorf("dead letter reason = %q, want %s", reason, sessionlog.ReasonTenant)
	}
	if f.kept(t, ev.Call) {
		t.Errorf("kept: %+v", f.svc.list(""))
	}
}

// Session and raise IDs are picked by clients, so two tenants may hold an
// approval under the same session and ID. A decision that does not name
// the tenant is refused; one that does (the page's) decides that tenant's
// alone.
func TestDecisionNamesItsTenant(t *testing.T) {
	f := start(t, nil)
	session, id := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	for _, tenant := range []string{"acme", "initech"} {
		f.sessionAt(t, tenant, session, "ada")
		r := &event.BudgetRaise{Header: event.NewHeader(event.TypeBudgetRaise, tenant, session), Raise: id, User: "ada", Limits: json.RawMessage(`{"steps":5}`)}
		f.record(t, r, "raise")
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(f.svc.list("", Pending)); n != 2 {
			return fmt.Errorf("%d pending, want 2", n)
		}
		return nil
	})
	if _, err := f.svc.Decide(context.Background(), Ref{ID: id, Session: session}, true, "alice", "ok"); !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "tenant") {
		t.Errorf("a decision naming no tenant: %v, want ErrAmbiguous naming tenants", err)
	}
	c := f.client(t)
	csrf := f.signIn(t, c, aliceToken)
	form := url.Values{"id": {id.String()}, "tenant": {"initech"}, "session": {session.String()}, "verdict": {"approve"}, "csrf": {csrf}}
	if code, body := post(t, c, f.srv.URL+"/decide", form, nil); code != http.StatusSeeOther {
		t.Fatalf("decide on the page: %d\n%s", code, body)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if got := f.svc.list("initech", Approved); len(got) != 1 {
			return fmt.Errorf("initech's approved = %+v, want its raise", got)
		}
		return nil
	})
	if got := f.svc.list("acme", Pending); len(got) != 1 {
		t.Errorf("acme's pending = %+v, want its raise still pending", got)
	}
	if ds := decisions(t, f.js, "acme", session); len(ds) != 0 {
		t.Errorf("decisions in acme's session: %+v", ds)
	}
}

// The API answers for its subject's tenant alone, whatever the body says:
// a list on acme's subject never shows initech's approvals, and a decision
// on acme's subject never decides initech's, even one under the same
// session and ID. The decision is the subject's user's.
func TestAPIIsScopedToTheSubjectTenant(t *testing.T) {
	f := start(t, nil)
	session, shared, theirs := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	raise := func(tenant string, id uuid.UUID) {
		r := &event.BudgetRaise{Header: event.NewHeader(event.TypeBudgetRaise, tenant, session), Raise: id, User: "ada", Limits: json.RawMessage(`{"steps":5}`)}
		f.record(t, r, "raise:"+id.String())
	}
	f.sessionAt(t, "acme", session, "ada")
	f.sessionAt(t, "initech", session, "ada")
	raise("acme", shared)
	raise("initech", shared)
	raise("initech", theirs)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(f.svc.list("", Pending)); n != 3 {
			return fmt.Errorf("%d pending, want 3", n)
		}
		return nil
	})

	list := Subject("acme", "grace", bus.OpList)
	for _, all := range []bool{false, true} {
		resp, code, desc := f.apiCall(t, list, ListRequest{All: all})
		if code != "" {
			t.Fatalf("list (all %v): %q %s", all, code, desc)
		}
		if len(resp.Approvals) != 1 || resp.Approvals[0].Tenant != "acme" || resp.Approvals[0].ID != shared {
			t.Errorf("acme's list (all %v) = %s, want acme's raise alone", all, brief(resp.Approvals))
		}
	}
	if resp, code, _ := f.apiCall(t, list, ListRequest{Tenant: "initech", All: true}); code != CodeBadRequest || len(resp.Approvals) != 0 {
		t.Errorf("acme's list naming initech: %q %s, want %s and nothing listed", code, brief(resp.Approvals), CodeBadRequest)
	}

	decide := Subject("acme", "grace", bus.OpDecide)
	if _, code, desc := f.apiCall(t, decide, DecideRequest{ID: theirs, Session: session, Approve: true}); code != CodeNotFound {
		t.Errorf("acme deciding initech's approval: %q %s, want %s", code, desc, CodeNotFound)
	}
	resp, code, desc := f.apiCall(t, decide, DecideRequest{ID: shared, Session: session, Approve: true, Reason: "ok"})
	if code != "" {
		t.Fatalf("acme deciding its own: %q %s", code, desc)
	}
	if len(resp.Approvals) != 1 || resp.Approvals[0].Tenant != "acme" || resp.Approvals[0].Reviewer != "grace" {
		t.Errorf("decided %s, want acme's, by grace", brief(resp.Approvals))
	}
	if got := f.svc.list("initech", Pending); len(got) != 2 {
		t.Errorf("initech's pending = %s, want both its raises still pending", brief(got))
	}
	if ds := decisions(t, f.js, "initech", session); len(ds) != 0 {
		t.Errorf("decisions in initech's session: %+v", ds)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		ds := decisions(t, f.js, "acme", session)
		if len(ds) != 1 {
			return fmt.Errorf("%d decisions in acme's session, want 1", len(ds))
		}
		if d := ds[0]; d.Call != shared || !d.Approved || d.Reviewer != "grace" {
			t.Errorf("acme's decision = %+v, want its raise approved by grace", d)
		}
		return nil
	})
}

// brief describes approvals for a test's message: tenant, ID, status and
// reviewer of each.
func brief(as []*Approval) string {
	var b strings.Builder
	b.WriteString("[")
	for i, a := range as {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s/%s:%s", a.Tenant, a.ID, a.Status)
		if a.Reviewer != "" {
			fmt.Fprintf(&b, " by %s", a.Reviewer)
		}
	}
	b.WriteString("]")
	return b.String()
}
