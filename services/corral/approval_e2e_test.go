package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

func bash(command string) modeltest.Call {
	return modeltest.Call{Name: "Bash", Input: map[string]any{"command": command}}
}

// runResult is what a `corral run` in the background ended with.
type runResult struct {
	code           int
	stdout, stderr string
}

// runBackground starts `corral run` and returns where its outcome arrives.
func (p *platform) runBackground(t *testing.T, tenant, prompt string) <-chan runResult {
	t.Helper()
	ch := make(chan runResult, 1)
	go func() {
		code, stdout, stderr := p.corral(t, "run", "--tenant", tenant, "--user", "ada", prompt)
		ch <- runResult{code, stdout, stderr}
	}()
	return ch
}

func wait(t *testing.T, ch <-chan runResult) runResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(70 * time.Second):
		t.Fatal("corral run did not end")
		return runResult{}
	}
}

// pending waits until `corral approvals --tenant tenant` lists one approval,
// and returns its ID and the listing.
func (p *platform) pending(t *testing.T, tenant string) (uuid.UUID, string) {
	t.Helper()
	var id uuid.UUID
	var listing string
	natstest.WaitFor(t, 30*time.Second, func() error {
		code, stdout, stderr := p.corral(t, "approvals", "--tenant", tenant)
		if code != 0 {
			return fmt.Errorf("corral approvals exited %d: %s", code, stderr)
		}
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if len(lines) < 2 {
			return fmt.Errorf("nothing pending yet: %s", stdout)
		}
		var err error
		id, err = uuid.Parse(strings.Fields(lines[1])[0])
		listing = stdout
		return err
	})
	return id, listing
}

// signingKey is the key `corral dev` made for the platform in data.
func signingKey(t *testing.T, data string) ed25519.PrivateKey {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "approval.key"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := event.DecodePrivateKey(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// publish records ev in its session's log as if it came from the service
// that writes its kind.
func (p *platform) publish(t *testing.T, ev event.Event, msgID string) {
	t.Helper()
	nc, err := p.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	w := sessionlog.Writer(sessionlog.Writers(ev.Head().Type)[0])
	if err := sessionlog.New(js, sessionlog.Options{As: w}).Record(context.Background(), ev, msgID); err != nil {
		t.Fatal(err)
	}
}

// startedSession waits for a session to start on p, and returns the ID of
// the first that did.
func (p *platform) startedSession(t *testing.T) uuid.UUID {
	t.Helper()
	var session uuid.UUID
	natstest.WaitFor(t, 30*time.Second, func() error {
		evs := p.eventsWhere(t, func(ev any) bool { _, ok := ev.(*event.SessionRequested); return ok })
		if len(evs) == 0 {
			return fmt.Errorf("no session yet")
		}
		session = evs[0].Head().Session
		return nil
	})
	return session
}

// eventsWhere returns every event of every session that keep accepts.
func (p *platform) eventsWhere(t *testing.T, keep func(ev any) bool) []event.Event {
	t.Helper()
	nc, err := p.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	msgs, err := bus.ReadAll(context.Background(), js, bus.StreamEvents, "events.>")
	if err != nil {
		t.Fatal(err)
	}
	var out []event.Event
	for _, ev := range judged(t, js, msgs) {
		if keep(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// hiddenPush is a command whose bidi override would make its tail, a
// recursive delete, read as a comment, too long for any one-line summary.
var hiddenPush = "git push --force origin main \u202e;rm -rf /workspace # " + strings.Repeat("padding ", 40) + "THE-END"

func TestApprovalsFromTheCLI(t *testing.T) {
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"remove it": {bash("echo rm -rf would go here > removed.txt && cat removed.txt")},
		"deny it":   {bash(hiddenPush)},
	}), nil)

	run := p.runBackground(t, "acme", "remove it")
	id, listing := p.pending(t, "acme")
	wantIn(t, "corral approvals", listing, "Bash", "pending", "risky-shell", "rm -rf would go here")

	// Decisions that do not verify do nothing: signed by another key, for
	// other arguments, or a real decision on another call replayed here.
	var session uuid.UUID
	evs := p.eventsWhere(t, func(ev any) bool {
		r, ok := ev.(*event.ApprovalRequested)
		return ok && r.Call == id
	})
	asked := evs[0].(*event.ApprovalRequested)
	session = asked.Session
	_, otherKey, _ := ed25519.GenerateKey(nil)
	realKey := signingKey(t, p.data)
	forge := func(key ed25519.PrivateKey, hash string, call uuid.UUID) *event.ApprovalDecided {
		d := &event.ApprovalDecided{
			Header: event.NewHeader(event.TypeApprovalDecided, "acme", session),
			Call:   call, ArgsHash: hash, Approved: true, Reviewer: "mallory",
		}
		d.Sign(key)
		return d
	}
	p.publish(t, forge(otherKey, asked.ArgsHash, id), "forged-1")
	p.publish(t, forge(realKey, event.ArgsHash("Bash", []byte(`{"command":"echo harmless"}`)), id), "forged-2")
	tampered := forge(realKey, asked.ArgsHash, id)
	tampered.Reviewer = "someone else" // altered after signing
	p.publish(t, tampered, "forged-3")
	// A genuine approval of the same call and arguments made for another
	// session, replayed into this session's log.
	replayed := forge(realKey, asked.ArgsHash, id)
	replayed.Session = uuid.Must(uuid.NewV7())
	replayed.Sign(realKey)
	nc, err := p.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if err := bus.Publish(context.Background(), js, sessionlog.Subject("acme", session, event.TypeApprovalDecided, sessionlog.Approval), "replayed", replayed); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if ds := dispatches(p.events(t, session)); len(ds) > 0 {
		t.Fatal("a call ran on a decision that does not verify")
	}
	if _, listing := p.pending(t, "acme"); !strings.Contains(listing, id.String()) {
		t.Fatalf("approval %s no longer pending after forged decisions:\n%s", id, listing)
	}

	code, stdout, stderr := p.corral(t, "approve", "--tenant", "acme", "--user", "grace", id.String())
	if code != 0 {
		t.Fatalf("corral approve exited %d: %s", code, stderr)
	}
	wantIn(t, "corral approve", stdout, "approved", id.String())
	r := wait(t, run)
	if r.code != 0 {
		t.Fatalf("corral run exited %d:\n%s", r.code, r.stderr)
	}
	wantIn(t, "answer", r.stdout, "rm -rf would go here")

	// A second decision is refused, saying who decided.
	code, _, stderr = p.corral(t, "deny", "--tenant", "acme", "--user", "heidi", id.String(), "--reason", "too late")
	if code != 1 {
		t.Errorf("deny after approve exited %d, want 1", code)
	}
	wantIn(t, "second decision", stderr, "already approved by grace")

	// A call longer than the listing's column is marked cut there, and
	// shown whole, its bidi override named, by approvals show.
	run = p.runBackground(t, "acme", "deny it")
	id2, listing := p.pending(t, "acme")
	wantIn(t, "corral approvals", listing, "command=git push --force origin main <U+202E>", "[cut]")
	code, stdout, stderr = p.corral(t, "approvals", "show", "--tenant", "acme", id2.String())
	if code != 0 {
		t.Fatalf("corral approvals show exited %d: %s", code, stderr)
	}
	wantIn(t, "corral approvals show", stdout, "status: pending", "tool: Bash\n",
		"  | git push --force origin main <U+202E>;rm -rf /workspace # "+strings.Repeat("padding ", 40)+"THE-END\n",
		"note: 1 invisible or bidirectional code point(s) shown as <U+XXXX>")
	if strings.ContainsRune(stdout, '\u202e') {
		t.Errorf("corral approvals show printed the bidi override as it is")
	}
	if code, _, stderr := p.corral(t, "approvals", "show", "--tenant", "acme", uuid.NewString()); code != 1 || !strings.Contains(stderr, "no approval") {
		t.Errorf("show of an unknown ID: exit %d, %s", code, stderr)
	}
	if code, _, stderr := p.corral(t, "deny", "--tenant", "acme", id2.String()); code != 2 || !strings.Contains(stderr, "--reason") {
		t.Errorf("deny without a reason: exit %d, %s", code, stderr)
	}
	if code, _, stderr := p.corral(t, "deny", "--tenant", "acme", "--user", "grace", id2.String(), "--reason", "never force-push main"); code != 0 {
		t.Fatalf("corral deny exited %d: %s", code, stderr)
	}
	r = wait(t, run)
	if r.code != 0 {
		t.Fatalf("corral run exited %d:\n%s", r.code, r.stderr)
	}
	wantIn(t, "answer", r.stdout, "a reviewer (grace) denied this call", "never force-push main")

	code, stdout, _ = p.corral(t, "approvals", "--tenant", "acme", "--all")
	if code != 0 {
		t.Fatalf("corral approvals --all exited %d", code)
	}
	wantIn(t, "corral approvals --all", stdout, "approved by grace", "denied by grace")
	if code, _, stderr := p.corral(t, "approve", "--tenant", "acme", uuid.NewString()); code != 1 || !strings.Contains(stderr, "no approval") {
		t.Errorf("approve of an unknown ID: exit %d, %s", code, stderr)
	}
}

func TestApprovalExpires(t *testing.T) {
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"clean": {bash("rm -rf build")},
	}), map[string]string{"CORRAL_APPROVAL_TIMEOUT": "1s"})
	out := p.runOK(t, "acme", "ada", "clean")
	wantIn(t, "answer", out, "a reviewer (corral) denied this call", "no reviewer decided within 1s")
}

func TestApprovalCancelledWhenTheSessionStops(t *testing.T) {
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"clean": {bash("rm -rf build")},
	}), nil)
	run := p.runBackground(t, "acme", "clean")
	id, _ := p.pending(t, "acme")
	evs := p.eventsWhere(t, func(ev any) bool {
		r, ok := ev.(*event.ApprovalRequested)
		return ok && r.Call == id
	})
	session := evs[0].Head().Session
	if code, stdout, stderr := p.corral(t, "stop", "--tenant", "acme", session.String(), "--by", "grace"); code != 0 || !strings.Contains(stdout, "stopped") {
		t.Fatalf("corral stop: exit %d, %s%s", code, stdout, stderr)
	}
	r := wait(t, run)
	if r.code == 0 {
		t.Errorf("corral run of a stopped session exited 0")
	}
	wantIn(t, "corral run", r.stderr, "stopped by grace")
	natstest.WaitFor(t, 10*time.Second, func() error {
		_, stdout, _ := p.corral(t, "approvals", "--tenant", "acme", "--all")
		if !strings.Contains(stdout, "cancelled") {
			return fmt.Errorf("not cancelled yet:\n%s", stdout)
		}
		return nil
	})
	if code, _, stderr := p.corral(t, "approve", "--tenant", "acme", "--user", "grace", id.String()); code != 1 || !strings.Contains(stderr, "cancelled") {
		t.Errorf("approve after stop: exit %d, %s", code, stderr)
	}
}

func TestStopKillsTheRunningCall(t *testing.T) {
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"slow": {bash("echo started > started.txt; sleep 60; echo finished > finished.txt")},
	}), nil)
	run := p.runBackground(t, "acme", "slow")
	session := p.startedSession(t)
	natstest.WaitFor(t, 30*time.Second, func() error {
		_, err := os.Stat(filepath.Join(p.data, "workspaces", "acme", session.String(), "started.txt"))
		return err
	})
	asked := len(p.model.Requests())
	stopped := time.Now()
	if code, _, stderr := p.corral(t, "stop", "--tenant", "acme", session.String(), "--by", "grace", "--reason", "wrong repo"); code != 0 {
		t.Fatalf("corral stop exited %d: %s", code, stderr)
	}
	r := wait(t, run)
	if r.code != 1 {
		t.Errorf("corral run exited %d, want 1", r.code)
	}
	wantIn(t, "corral run", r.stderr, "stopped by grace: wrong repo")
	var res *event.ToolCompleted
	natstest.WaitFor(t, 10*time.Second, func() error {
		rs := results(p.events(t, session))
		if len(rs) == 0 {
			return fmt.Errorf("no result yet")
		}
		res = rs[0]
		return nil
	})
	if !res.IsError || !strings.Contains(res.Output, "Killed: the session was stopped") {
		t.Errorf("result of the killed call = %+v", res)
	}
	// The call started at res.Time and ran for DurationMS: it ended soon
	// after the stop, not when its sleep would have.
	if ended := res.Time.Add(time.Duration(res.DurationMS) * time.Millisecond); ended.Sub(stopped) > 5*time.Second {
		t.Errorf("the call ended %s after the stop", ended.Sub(stopped))
	}
	ws := filepath.Join(p.data, "workspaces", "acme", session.String())
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, err := os.Stat(ws); !os.IsNotExist(err) {
			return fmt.Errorf("workspace still there: %v", err)
		}
		return nil
	})
	if n := len(p.model.Requests()); n != asked {
		t.Errorf("the model was asked %d more times after the stop", n-asked)
	}
	if code, stdout, _ := p.corral(t, "stop", "--tenant", "acme", session.String()); code != 0 || !strings.Contains(stdout, "stopped already") {
		t.Errorf("second stop: exit %d, %q", code, stdout)
	}
}
