package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/preview"
)

func edit(p, oldString, newString string) modeltest.Call {
	return modeltest.Call{Name: "Edit", Input: map[string]any{"file_path": p, "old_string": oldString, "new_string": newString}}
}

// heldEdit waits for an approval asked for an Edit of path, but for the
// calls in skip, and returns it.
func (p *platform) heldEdit(t *testing.T, path string, skip ...uuid.UUID) *event.ApprovalRequested {
	t.Helper()
	var held *event.ApprovalRequested
	natstest.WaitFor(t, 30*time.Second, func() error {
		for _, ev := range p.eventsWhere(t, func(ev any) bool { _, ok := ev.(*event.ApprovalRequested); return ok }) {
			a := ev.(*event.ApprovalRequested)
			var in struct {
				FilePath string `json:"file_path"`
			}
			if a.Tool == "Edit" && json.Unmarshal(a.Input, &in) == nil && in.FilePath == path && !slices.Contains(skip, a.Call) {
				held = a
				return nil
			}
		}
		return fmt.Errorf("no Edit of %s is held yet", path)
	})
	return held
}

// Under the deployed permissions, a held Edit of a memory file and one of
// a workspace file each come with the diff of the whole file, with its
// context, made by the service that would run the call; one of a memory
// file changed since the session read it says that the Edit will be
// refused, which it is. Only the harness can ask for a preview, and only
// a request it signed for one is answered.
func TestDeployedHeldEditsShowTheirDiffs(t *testing.T) {
	policy := writeTemp(t, `rules:
  - name: edits
    when: tool == "Edit"
    decision: approve
    reason: edits are reviewed
  - name: pushes
    when: tool == "Bash" && args.command.matches("git push")
    decision: approve
    reason: the command pushes code
`)
	notes := "# Releases\nbuild with make\ntag the release\npush the tag\nannounce it\n"
	todo := "1. write the code\n2. test it\n3. ship it\n4. celebrate\n"
	d := startDeployment(t, byPrompt(map[string][]modeltest.Call{
		"tidy": {
			write("/memories/release.md", notes),
			write("/workspace/todo.md", todo),
			edit("/memories/release.md", "tag the release", "tag and sign the release"),
			edit("/workspace/todo.md", "3. ship it", "3. ship it on Friday"),
		},
		"stale": {
			read("/memories/release.md"),
			bash("git push --dry-run"),
			edit("/memories/release.md", "announce it", "announce it loudly"),
		},
	}), map[string]string{"CORRAL_POLICY_FILE": policy})
	p := d.platform
	approve := func(a *event.ApprovalRequested) {
		t.Helper()
		// Once the approval service has it.
		natstest.WaitFor(t, 20*time.Second, func() error {
			if code, _, stderr := p.corral(t, "approvals", "show", a.Call.String()); code != 0 {
				return fmt.Errorf("corral approvals show exited %d: %s", code, stderr)
			}
			return nil
		})
		if code, _, stderr := p.corral(t, "approve", a.Call.String()); code != 0 {
			t.Fatalf("corral approve exited %d: %s", code, stderr)
		}
	}

	run := p.runBackground(t, "acme", "tidy")
	held := p.heldEdit(t, "/memories/release.md")
	if want := "--- a/memories/release.md\n+++ b/memories/release.md\n@@ -1,5 +1,5 @@\n # Releases\n build with make\n-tag the release\n+tag and sign the release\n push the tag\n announce it\n"; held.Preview != want {
		t.Errorf("preview of the memory Edit = %q\nwant %q", held.Preview, want)
	}
	var stdout string
	natstest.WaitFor(t, 20*time.Second, func() error {
		code, out, stderr := p.corral(t, "approvals", "show", held.Call.String())
		if code != 0 {
			return fmt.Errorf("corral approvals show exited %d: %s", code, stderr)
		}
		stdout = out
		return nil
	})
	wantIn(t, "corral approvals show", stdout, "preview of the change (informational, not what is approved):\n", "-tag the release\n+tag and sign the release\n push the tag\n")
	approve(held)
	first, tidy := held.Call, held.Session
	held = p.heldEdit(t, "/workspace/todo.md")
	if want := "--- a/workspace/todo.md\n+++ b/workspace/todo.md\n@@ -1,4 +1,4 @@\n 1. write the code\n 2. test it\n-3. ship it\n+3. ship it on Friday\n 4. celebrate\n"; held.Preview != want {
		t.Errorf("preview of the workspace Edit = %q\nwant %q", held.Preview, want)
	}
	approve(held)
	if r := wait(t, run); r.code != 0 || !strings.Contains(r.stdout, "Edited /memories/release.md") || !strings.Contains(r.stdout, "Edited /workspace/todo.md") {
		t.Fatalf("corral run exited %d:\n%s%s", r.code, r.stdout, r.stderr)
	}

	// The file changes while the session waits between its Read and its
	// Edit.
	run = p.runBackground(t, "acme", "stale")
	id, _ := p.pending(t, "acme")
	if code, _, stderr := p.corral(t, "memories", "put", "/memories/release.md", writeTemp(t, "rewritten\nannounce it\n"), "--tenant", "acme"); code != 0 {
		t.Fatalf("corral memories put exited %d: %s", code, stderr)
	}
	if code, _, stderr := p.corral(t, "approve", id.String()); code != 0 {
		t.Fatalf("corral approve exited %d: %s", code, stderr)
	}
	held = p.heldEdit(t, "/memories/release.md", first)
	if want := "No diff: /memories/release.md changed since this session read it (it read version 2, and it is at version 3 now): the Edit will be refused as it stands."; held.Preview != want {
		t.Errorf("preview of the stale Edit = %q\nwant %q", held.Preview, want)
	}
	approve(held)
	if r := wait(t, run); !strings.Contains(r.stdout, "has changed since this session last read it") {
		t.Errorf("the stale Edit's result:\n%s%s", r.stdout, r.stderr)
	}
	for name, v := range d.violations {
		if errs := v.all(); len(errs) > 0 {
			t.Errorf("%s hit permission violations in normal work: %v", name, errs)
		}
	}

	// No other service may ask for a preview: the sandbox-manager, which
	// runs the model's commands, cannot have the memory service show a
	// file, nor the memory service a node.
	stale := held.Session
	for _, tc := range []struct{ user, service string }{{credential.UserSandbox, bus.ServiceMemory}, {credential.UserMemory, bus.ServiceSandbox}} {
		subject := bus.PreviewSubject(tc.service, "acme", stale)
		if _, err := d.js[tc.user].Conn().Request(subject, []byte("{}"), 500*time.Millisecond); err == nil {
			t.Errorf("%s asked for a preview on %s", tc.user, subject)
		}
		natstest.WaitFor(t, 5*time.Second, func() error {
			if !d.violations[tc.user].seen(subject) {
				return fmt.Errorf("no permission violation reported for %s's request on %s", tc.user, subject)
			}
			return nil
		})
	}
	// And the services answer only the harness's own requests for
	// previews, even on its connection.
	key, err := event.DecodePrivateKey(callKeys["CORRAL_CALL_SIGNING_KEY"])
	if err != nil {
		t.Fatal(err)
	}
	hnc := d.js[credential.UserHarness].Conn()
	for name, sign := range map[string]func(*event.ToolCall, string){
		"signed for a preview": func(c *event.ToolCall, service string) { c.SignPreview(key, service) },
		"unsigned":             func(c *event.ToolCall, _ string) { c.Signature = nil },
		"signed to run":        func(c *event.ToolCall, service string) { c.Sign(key, service) },
	} {
		for _, tc := range []struct {
			service, path, old string
			session            uuid.UUID
			version            int64
		}{{bus.ServiceMemory, "/memories/release.md", "announce it", stale, 3}, {bus.ServiceSandbox, "/workspace/todo.md", "4. celebrate", tidy, 0}} {
			input, _ := json.Marshal(map[string]string{"file_path": tc.path, "old_string": tc.old, "new_string": "x"})
			c := &event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "acme", tc.session), Call: uuid.Must(uuid.NewV7()), Turn: 9, User: "ada", Name: "Edit", Input: input, ExpectVersion: tc.version}
			sign(c, tc.service)
			got, err := preview.Ask(context.Background(), hnc, tc.service, c)
			switch {
			case name == "signed for a preview" && (err != nil || !strings.Contains(got, "-"+tc.old+"\n+x\n")):
				t.Errorf("%s request to the %s: preview = %q, %v; want the diff", name, tc.service, got, err)
			case name != "signed for a preview" && (err == nil || got != ""):
				t.Errorf("%s request to the %s: preview = %q, %v; want a refusal, and no content", name, tc.service, got, err)
			}
		}
	}
}
