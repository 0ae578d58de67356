package memory_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/natstest"
	"corral.dev/services/memory"
)

// ask sends req to the memory API on subject and returns its answer, or
// the error it answered with ("<code>: <description>").
func ask(t *testing.T, js jetstream.JetStream, subject string, req memory.APIRequest) (*memory.APIResponse, string) {
	t.Helper()
	data, err := json.Marshal(&req)
	if err != nil {
		t.Fatal(err)
	}
	msg := natstest.Request(t, js.Conn(), subject, data)
	if desc := msg.Header.Get("Nats-Service-Error"); desc != "" {
		return nil, msg.Header.Get("Nats-Service-Error-Code") + ": " + desc
	}
	var resp memory.APIResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		t.Fatalf("answer on %s: %v", subject, err)
	}
	return &resp, ""
}

// mustAsk is ask for a request that must succeed.
func mustAsk(t *testing.T, js jetstream.JetStream, subject string, req memory.APIRequest) *memory.APIResponse {
	t.Helper()
	resp, errDesc := ask(t, js, subject, req)
	if errDesc != "" {
		t.Fatalf("%s: %s", subject, errDesc)
	}
	return resp
}

// Every operation answers on its subject, for the subject's tenant and
// user: what put writes, ls lists and cat reads, as written by the
// subject's user, and rm removes it.
func TestAPIOperations(t *testing.T) {
	js, _ := start(t)
	put := mustAsk(t, js, memory.Subject("acme", "ada", memory.OpPut), memory.APIRequest{Path: "/memories/team.md", Content: "ship on fridays", Op: uuid.Must(uuid.NewV7())})
	if len(put.Files) != 1 || put.Files[0].Path != "/memories/team.md" || put.Files[0].UpdatedBy != "ada" {
		t.Errorf("put = %+v, want /memories/team.md updated by ada", put.Files)
	}
	ls := mustAsk(t, js, memory.Subject("acme", "grace", memory.OpList), memory.APIRequest{Path: "/memories"})
	if len(ls.Files) != 1 || ls.Files[0].Path != "/memories/team.md" {
		t.Errorf("ls /memories = %+v, want the shared file", ls.Files)
	}
	cat := mustAsk(t, js, memory.Subject("acme", "grace", memory.OpGet), memory.APIRequest{Path: "/memories/team.md"})
	if len(cat.Files) != 1 || cat.Files[0].Content != "ship on fridays" || cat.Files[0].UpdatedBy != "ada" {
		t.Errorf("cat = %+v, want ada's content", cat.Files)
	}
	// Another tenant shares nothing with acme.
	if resp, errDesc := ask(t, js, memory.Subject("initech", "ada", memory.OpGet), memory.APIRequest{Path: "/memories/team.md"}); !strings.HasPrefix(errDesc, "400") {
		t.Errorf("initech's cat of acme's file = %+v, %q: want not found", resp, errDesc)
	}
	rm := mustAsk(t, js, memory.Subject("acme", "grace", memory.OpRemove), memory.APIRequest{Path: "/memories/team.md", Op: uuid.Must(uuid.NewV7())})
	if rm.Removed != 1 {
		t.Errorf("rm removed %d, want 1", rm.Removed)
	}
	if resp, errDesc := ask(t, js, memory.Subject("acme", "ada", memory.OpGet), memory.APIRequest{Path: "/memories/team.md"}); !strings.Contains(errDesc, memory.ErrNotFound.Error()) {
		t.Errorf("cat after rm = %+v, %q: want not found", resp, errDesc)
	}
	// An error names the file as the request wrote it, not by the
	// store's key (tenant, owner, path).
	for _, path := range []string{"/memories/team.md", "/memories/private/x.md", "/skills/a/b.md/"} {
		_, errDesc := ask(t, js, memory.Subject("acme", "ada", memory.OpGet), memory.APIRequest{Path: path})
		if !strings.Contains(errDesc, path+": "+memory.ErrNotFound.Error()) || strings.Contains(errDesc, "acme:") {
			t.Errorf("cat of %s: %q, want it to name %s as written", path, errDesc, path)
		}
	}
}

// The tenant and user of a request are its subject's, which the NATS
// permissions vouch for: a request on ada's subject reads ada's private
// memories, and one whose body names bob, or tenant initech, is refused
// and never answered with theirs.
func TestAPITakesTenantAndUserFromTheSubject(t *testing.T) {
	js, _ := start(t)
	const private = "/memories/private/notes.md"
	for _, w := range []struct{ tenant, user, content string }{
		{"acme", "ada", "ada's notes"},
		{"acme", "bob", "bob's notes"},
		{"initech", "ada", "initech ada's notes"},
	} {
		mustAsk(t, js, memory.Subject(w.tenant, w.user, memory.OpPut), memory.APIRequest{Path: private, Content: w.content, Op: uuid.Must(uuid.NewV7())})
	}

	cat := mustAsk(t, js, memory.Subject("acme", "ada", memory.OpGet), memory.APIRequest{Path: private})
	if len(cat.Files) != 1 || cat.Files[0].Content != "ada's notes" || cat.Files[0].Owner != "ada" || cat.Files[0].UpdatedBy != "ada" {
		t.Errorf("ada's cat of %s = %+v, want ada's own notes", private, cat.Files)
	}
	// A body naming the subject's own tenant and user is fine.
	cat = mustAsk(t, js, memory.Subject("acme", "ada", memory.OpGet), memory.APIRequest{Tenant: "acme", User: "ada", Path: private})
	if len(cat.Files) != 1 || cat.Files[0].Content != "ada's notes" {
		t.Errorf("ada's cat naming herself = %+v, want ada's own notes", cat.Files)
	}

	for _, tc := range []struct {
		name, op string
		req      memory.APIRequest
		want     string
	}{
		{"cat naming bob", memory.OpGet, memory.APIRequest{User: "bob", Path: private}, `user "bob"`},
		{"cat naming initech", memory.OpGet, memory.APIRequest{Tenant: "initech", Path: private}, `tenant "initech"`},
		{"ls naming bob", memory.OpList, memory.APIRequest{User: "bob", Path: "/memories/private"}, `user "bob"`},
		{"put naming bob", memory.OpPut, memory.APIRequest{User: "bob", Path: private, Content: "planted", Op: uuid.Must(uuid.NewV7())}, `user "bob"`},
		{"rm naming initech", memory.OpRemove, memory.APIRequest{Tenant: "initech", User: "ada", Path: private, Op: uuid.Must(uuid.NewV7())}, `tenant "initech"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, errDesc := ask(t, js, memory.Subject("acme", "ada", tc.op), tc.req)
			if !strings.HasPrefix(errDesc, "400") || !strings.Contains(errDesc, tc.want) {
				t.Errorf("answer = %+v, %q: want a 400 naming %s", resp, errDesc, tc.want)
			}
		})
	}

	// Whatever ada's subject asks, bob's notes never come back, and
	// nothing of his or initech's changed.
	ls := mustAsk(t, js, memory.Subject("acme", "ada", memory.OpList), memory.APIRequest{Path: "/memories/private"})
	if len(ls.Files) != 1 || ls.Files[0].Owner != "ada" {
		t.Errorf("ada's ls of /memories/private = %+v, want her file alone", ls.Files)
	}
	for _, w := range []struct{ tenant, user, content string }{
		{"acme", "bob", "bob's notes"},
		{"initech", "ada", "initech ada's notes"},
	} {
		cat := mustAsk(t, js, memory.Subject(w.tenant, w.user, memory.OpGet), memory.APIRequest{Path: private})
		if len(cat.Files) != 1 || cat.Files[0].Content != w.content {
			t.Errorf("%s's %s in %s = %+v, want %q", w.user, private, w.tenant, cat.Files, w.content)
		}
	}
}

// A subject whose user token or tenant is not one is refused.
func TestAPIRefusesMalformedSubjects(t *testing.T) {
	js, _ := start(t)
	for _, subject := range []string{
		bus.MemoryAPI("acme", "ada", memory.OpGet),
		bus.MemoryAPI("acme", "u-", memory.OpGet),
		bus.MemoryAPI("ACME", bus.UserToken("ada"), memory.OpGet),
	} {
		if resp, errDesc := ask(t, js, subject, memory.APIRequest{Path: "/memories/team.md"}); !strings.HasPrefix(errDesc, "400") {
			t.Errorf("%s: answer = %+v, %q: want a 400", subject, resp, errDesc)
		}
	}
}
