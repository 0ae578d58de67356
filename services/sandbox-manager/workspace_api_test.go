package sandboxmanager

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/workspaceapi"
)

// ask sends req to op of the workspace API as ada of tenant, and decodes
// the reply into resp; it returns the error code and description the API
// answered with instead, if any.
func ask(t *testing.T, nc *nats.Conn, tenant, op string, req, resp any) (code, desc string) {
	t.Helper()
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	msg := natstest.Request(t, nc, workspaceapi.Subject(tenant, "ada", op), data)
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		return code, msg.Header.Get("Nats-Service-Error")
	}
	if err := json.Unmarshal(msg.Data, resp); err != nil {
		t.Fatal(err)
	}
	return "", ""
}

// readAll reads a file of the snapshot of session in pieces of n bytes,
// each continuing from the last one's cursor.
func readAll(t *testing.T, nc *nats.Conn, session uuid.UUID, p string, n int64) ([]byte, int) {
	t.Helper()
	var out []byte
	var cur *workspaceapi.Cursor
	var seq uint64
	pieces := 0
	for {
		var r workspaceapi.ReadReply
		if code, desc := ask(t, nc, "acme", workspaceapi.OpRead, workspaceapi.ReadRequest{Session: session, Path: p, Offset: int64(len(out)), Length: n, Seq: seq, Cursor: cur}, &r); code != "" {
			t.Fatalf("cat %s at %d: %s %s", p, len(out), code, desc)
		}
		out, cur, seq = append(out, r.Data...), r.Next, r.Seq
		pieces++
		if int64(len(out)) >= r.Entry.Size {
			return out, pieces
		}
	}
}

// The workspace API lists and reads a session's last snapshot: sizes,
// modes and links as the workspace had them, a large file in pieces; it
// refuses paths out of the workspace, finds no session of another tenant,
// and says when a session has no snapshot yet.
func TestWorkspaceAPI(t *testing.T) {
	_, nc, js := natstest.Run(t)
	svc := newNode(t, js, nil)
	svc.cfg.Clients = "" // no accounts on this server
	natstest.Serve(t, svc.Run)

	session := uuid.Must(uuid.NewV7())
	record(t, js, sessionlog.Harness, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", session), Request: uuid.Must(uuid.NewV7()), User: "ada", Model: "openai:gpt-test", Prompt: "hi"})
	dispatch(t, js, session, uuid.Must(uuid.NewV7()), "Bash", `{"command":"mkdir -p src/deep && echo hi > src/deep/a.txt && printf '#!/bin/sh\\necho ok\\n' > run.sh && chmod 755 run.sh && ln -s src/deep/a.txt link && head -c 5000000 /dev/urandom > big"}`, "write")
	if r := resultsOf(t, js, session, 1)[0]; r.IsError {
		t.Fatalf("the call failed: %s", r.Output)
	}
	dir := filepath.Join(svc.cfg.DataDir, "workspaces", "acme", session.String())
	big, err := os.ReadFile(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("ls", func(t *testing.T) {
		var all workspaceapi.ListReply
		if code, desc := ask(t, nc, "acme", workspaceapi.OpList, workspaceapi.ListRequest{Session: session, Recursive: true}, &all); code != "" {
			t.Fatalf("ls: %s %s", code, desc)
		}
		got := map[string]workspaceapi.Entry{}
		for _, e := range all.Entries {
			got[e.Path] = e
		}
		for _, want := range []workspaceapi.Entry{
			{Path: "src", Mode: fs.ModeDir | 0o755},
			{Path: "src/deep/a.txt", Mode: 0o644, Size: 3},
			{Path: "run.sh", Mode: 0o755, Size: 18},
			{Path: "link", Mode: fs.ModeSymlink | 0o777, Link: "src/deep/a.txt"},
			{Path: "big", Mode: 0o644, Size: 5000000},
		} {
			e := got[want.Path]
			e.SHA256 = ""
			if e != want {
				t.Errorf("entry %s = %+v, want %+v", want.Path, got[want.Path], want)
			}
		}
		var top workspaceapi.ListReply
		ask(t, nc, "acme", workspaceapi.OpList, workspaceapi.ListRequest{Session: session, Path: "/workspace/src"}, &top)
		if len(top.Entries) != 1 || top.Entries[0].Path != "src/deep" {
			t.Errorf("ls /workspace/src = %+v, want src/deep alone", top.Entries)
		}
	})

	t.Run("cat", func(t *testing.T) {
		var r workspaceapi.ReadReply
		if code, desc := ask(t, nc, "acme", workspaceapi.OpRead, workspaceapi.ReadRequest{Session: session, Path: "link"}, &r); code != "" || string(r.Data) != "hi\n" || r.Entry.Path != "src/deep/a.txt" {
			t.Errorf("cat link = %q (%+v), %s %s; want the file it links to", r.Data, r.Entry, code, desc)
		}
		got, pieces := readAll(t, nc, session, "/workspace/big", 1<<20)
		if !bytes.Equal(got, big) || pieces != 5 {
			t.Errorf("big read in %d pieces: %d bytes, equal %v; want 5 pieces of the file's 5000000 bytes", pieces, len(got), bytes.Equal(got, big))
		}
		// An odd length, so that pieces end within the store's chunks.
		got, _ = readAll(t, nc, session, "big", 300_001)
		if !bytes.Equal(got, big) {
			t.Errorf("big read in pieces of 300001 bytes differs")
		}
		// Without a cursor, from an offset.
		ask(t, nc, "acme", workspaceapi.OpRead, workspaceapi.ReadRequest{Session: session, Path: "big", Offset: 4_999_990}, &r)
		if !bytes.Equal(r.Data, big[4_999_990:]) {
			t.Errorf("the last 10 bytes read = %x, want %x", r.Data, big[4_999_990:])
		}
	})

	t.Run("refused", func(t *testing.T) {
		other := uuid.Must(uuid.NewV7())
		record(t, js, sessionlog.Harness, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", other), Request: uuid.Must(uuid.NewV7()), User: "ada", Model: "openai:gpt-test", Prompt: "hi"})
		tests := []struct {
			name, tenant, op string
			req              any
			code, want       string
		}{
			{"dot-dot", "acme", workspaceapi.OpRead, workspaceapi.ReadRequest{Session: session, Path: "../../etc/passwd"}, workspaceapi.CodeBadRequest, "no .. element"},
			{"absolute", "acme", workspaceapi.OpList, workspaceapi.ListRequest{Session: session, Path: "/etc"}, workspaceapi.CodeBadRequest, "not a path in /workspace"},
			{"directory", "acme", workspaceapi.OpRead, workspaceapi.ReadRequest{Session: session, Path: "src"}, workspaceapi.CodeBadRequest, "is a directory"},
			{"missing", "acme", workspaceapi.OpRead, workspaceapi.ReadRequest{Session: session, Path: "nope"}, workspaceapi.CodeNotFound, "no /workspace/nope in the last snapshot"},
			{"another tenant", "initech", workspaceapi.OpList, workspaceapi.ListRequest{Session: session}, workspaceapi.CodeNotFound, "no session " + session.String() + " in tenant initech"},
			{"body names another tenant", "initech", workspaceapi.OpList, workspaceapi.ListRequest{Tenant: "acme", Session: session}, workspaceapi.CodeBadRequest, "names tenant \"acme\""},
			{"no snapshot yet", "acme", workspaceapi.OpList, workspaceapi.ListRequest{Session: other}, workspaceapi.CodeNotFound, "no snapshot of session " + other.String() + " yet: its workspace is saved after a call that changes it"},
			{"snapshot changed", "acme", workspaceapi.OpRead, workspaceapi.ReadRequest{Session: session, Path: "big", Seq: 99}, workspaceapi.CodeChanged, "snapshotted again"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				var resp json.RawMessage
				code, desc := ask(t, nc, tc.tenant, tc.op, tc.req, &resp)
				if code != tc.code || !strings.Contains(desc, tc.want) {
					t.Errorf("got %q %q (reply %s), want %s ...%s...", code, desc, resp, tc.code, tc.want)
				}
			})
		}
	})
}
