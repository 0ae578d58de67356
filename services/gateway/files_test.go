package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/upload"
	"corral.dev/services/gateway/internal/wire"
)

// send sends a request of method to path with the API's key (or, given,
// another's) as user ada, and returns the answer's status and body.
func (a *testAPI) send(t *testing.T, key, method, path, contentType string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, a.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", key)
	req.Header.Set(headerUser, "ada")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// form is a multipart form: its fields, then the file part.
func form(t *testing.T, name, content string, fields ...string) (string, io.Reader) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		if err := w.WriteField(fields[i], fields[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if name != "-" {
		fw, err := w.CreateFormFile("file", name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(fw, content)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.FormDataContentType(), &b
}

// uploadFile uploads content as name, and returns the file.
func (a *testAPI) uploadFile(t *testing.T, name, content string) wire.File {
	t.Helper()
	ct, body := form(t, name, content)
	status, b := a.send(t, a.key, http.MethodPost, "/v1/files", ct, body)
	var f wire.File
	if status != http.StatusOK || json.Unmarshal(b, &f) != nil {
		t.Fatalf("upload %s: %d %s", name, status, b)
	}
	return f
}

// TestFilesAPI checks the Files API: a file uploaded is shown, listed a
// page at a time, downloaded as it was sent, and deleted; another
// tenant's key finds none of it; and what Corral cannot honour is
// refused, saying so.
func TestFilesAPI(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	f := a.uploadFile(t, "notes.txt", "hello, files\n")
	if !strings.HasPrefix(f.ID, "file_") || f.Filename != "notes.txt" || f.SizeBytes != 13 || !strings.HasPrefix(f.MimeType, "text/plain") ||
		f.Type != "file" || !f.Downloadable || f.ExpiresAt.Sub(f.CreatedAt) < bus.UploadMaxAge-bus.UploadMaxAge/100 {
		t.Errorf("uploaded: %+v", f)
	}
	status, b := a.send(t, a.key, http.MethodGet, "/v1/files/"+f.ID, "", nil)
	var got wire.File
	if status != http.StatusOK || json.Unmarshal(b, &got) != nil || got.ID != f.ID || got.SizeBytes != f.SizeBytes {
		t.Errorf("metadata: %d %s", status, b)
	}
	status, b = a.send(t, a.key, http.MethodGet, "/v1/files/"+f.ID+"/content", "", nil)
	if status != http.StatusOK || string(b) != "hello, files\n" {
		t.Errorf("content: %d %q", status, b)
	}

	// Pages, newest first.
	g, h := a.uploadFile(t, "", "{}"), a.uploadFile(t, "c.csv", "a,b\n")
	if g.Filename != "unnamed" && !strings.HasPrefix(g.Filename, "unnamed.") {
		t.Errorf("a file sent without a name is named %q", g.Filename)
	}
	var ids []string
	next := ""
	for pages := 0; ; pages++ {
		q := "/v1/files?limit=2"
		if next != "" {
			q += "&page=" + next
		}
		status, b := a.send(t, a.key, http.MethodGet, q, "", nil)
		var page wire.Page[wire.File]
		if status != http.StatusOK || json.Unmarshal(b, &page) != nil || pages > 2 {
			t.Fatalf("list: %d %s", status, b)
		}
		for _, f := range page.Data {
			ids = append(ids, f.ID)
		}
		if page.NextPage == nil {
			break
		}
		next = *page.NextPage
	}
	if want := []string{h.ID, g.ID, f.ID}; strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("listed %v, want %v", ids, want)
	}
	status, b = a.send(t, a.key, http.MethodGet, "/v1/files?ids[]="+g.ID+"&ids[]="+f.ID, "", nil)
	if status != http.StatusOK || strings.Contains(string(b), h.ID) || !strings.Contains(string(b), g.ID) {
		t.Errorf("listed by ID: %d %s", status, b)
	}

	// Another tenant's key finds nothing of acme's.
	srv := a.s
	cnc, cjs := natstest.Connect(t, a.nc.ConnectedUrl())
	const theirs = "c-fedcba9876543210fedcba9876543210:secret"
	injectKey(srv.clients, theirs, &client{nc: cnc, js: cjs, cred: credential.Credential{ID: "c-fedcba9876543210fedcba9876543210", Tenant: "initech", Role: credential.RoleBot},
		logs: sessionlog.New(cjs, sessionlog.Options{Reader: "gateway-client", Client: true})})
	for _, req := range [][2]string{{http.MethodGet, "/v1/files/" + f.ID}, {http.MethodGet, "/v1/files/" + f.ID + "/content"}, {http.MethodDelete, "/v1/files/" + f.ID}} {
		if status, b := a.send(t, theirs, req[0], req[1], "", nil); status != http.StatusNotFound {
			t.Errorf("initech's %s %s: %d %s, want 404", req[0], req[1], status, b)
		}
	}
	if status, b := a.send(t, theirs, http.MethodGet, "/v1/files", "", nil); status != http.StatusOK || strings.Contains(string(b), "file_") {
		t.Errorf("initech's list: %d %s, want none of acme's", status, b)
	}

	// Deleted, it is gone.
	status, b = a.send(t, a.key, http.MethodDelete, "/v1/files/"+f.ID, "", nil)
	if status != http.StatusOK || !strings.Contains(string(b), `"file_deleted"`) {
		t.Errorf("delete: %d %s", status, b)
	}
	for _, p := range []string{"/v1/files/" + f.ID, "/v1/files/" + f.ID + "/content"} {
		if status, b := a.send(t, a.key, http.MethodGet, p, "", nil); status != http.StatusNotFound {
			t.Errorf("%s once deleted: %d %s", p, status, b)
		}
	}

	// Refused, saying what.
	for _, tc := range []struct {
		name, path string
		form       []string
		want       string
	}{
		{"a scope", "/v1/files?scope_id=sesn_1", nil, "not supported"},
		{"an expiry Corral cannot keep", "", []string{"expires_in_seconds", "7776000"}, "not supported"},
		{"an expiry out of the API's bounds", "", []string{"expires_in_seconds", "60"}, "3600"},
		{"a form field Corral does not know", "", []string{"purpose", "assistants"}, "not supported"},
		{"no file", "", []string{"-"}, "no part named"},
	} {
		var status int
		var b []byte
		if tc.path != "" {
			status, b = a.send(t, a.key, http.MethodGet, tc.path, "", nil)
		} else {
			name := "x.txt"
			if len(tc.form) == 1 {
				name, tc.form = "-", nil
			}
			ct, body := form(t, name, "x", tc.form...)
			status, b = a.send(t, a.key, http.MethodPost, "/v1/files", ct, body)
		}
		var e wire.ErrorBody
		if status != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Error.Type != wire.InvalidRequest || !strings.Contains(e.Error.Message, tc.want) {
			t.Errorf("%s: %d %s, want a 400 saying %q", tc.name, status, b, tc.want)
		}
	}
}

// TestFileResources checks that a session's file resources make a file
// list that lays the files out at their mount paths, and that a mount
// path outside /workspace, one named twice, one inside another file, a
// file that is not the caller's, and files with a repository are
// refused.
func TestFileResources(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	csv, txt, empty := a.uploadFile(t, "data.csv", "a,b\n1,2\n"), a.uploadFile(t, "n.txt", "note"), a.uploadFile(t, "e", "")
	c := a.caller(t)
	resources := func(s string) []json.RawMessage {
		var raw []json.RawMessage
		if err := json.Unmarshal([]byte(s), &raw); err != nil {
			t.Fatal(err)
		}
		return raw
	}
	rec := &sessionRecord{}
	err := a.s.workspaceFrom(t.Context(), c, rec, resources(`[
		{"type": "file", "file_id": "`+csv.ID+`", "mount_path": "/workspace/in/data.csv"},
		{"type": "file", "file_id": "`+txt.ID+`"},
		{"type": "file", "file_id": "`+empty.ID+`", "mount_path": "/workspace/in/deep/e"}]`))
	if err != nil || rec.Files == "" || rec.Repo != nil {
		t.Fatalf("files: %+v, %v", rec, err)
	}
	if len(rec.Resources) != 3 || !strings.Contains(string(rec.Resources[1]), `"mount_path":"/workspace/uploads/`+txt.ID+`"`) {
		t.Errorf("the session shows %s", rec.Resources)
	}
	dir := filepath.Join(t.TempDir(), "workspace")
	if _, _, err := upload.Layout(t.Context(), upload.DirectChunks(a.js), "acme", "ada", rec.Files, dir, upload.Bounds{}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"in/data.csv": "a,b\n1,2\n", "uploads/" + txt.ID: "note", "in/deep/e": ""} {
		if got, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(got) != want {
			t.Errorf("/workspace/%s: %q, %v; want %q", p, got, err, want)
		}
	}

	file := func(id, mount string) string {
		return `{"type": "file", "file_id": "` + id + `", "mount_path": "` + mount + `"}`
	}
	for _, tc := range []struct{ name, resources, want string }{
		{"an escape", `[` + file(csv.ID, "/workspace/../etc/passwd") + `]`, "clean path"},
		{"elsewhere", `[` + file(csv.ID, "/mnt/session/uploads/x") + `]`, "not supported"},
		{"the workspace itself", `[` + file(csv.ID, "/workspace") + `]`, "not supported"},
		{"a relative path", `[` + file(csv.ID, "data.csv") + `]`, "absolute path"},
		{"twice", `[` + file(csv.ID, "/workspace/a") + `,` + file(txt.ID, "/workspace/a") + `]`, "resources[0]'s too"},
		{"inside a file", `[` + file(csv.ID, "/workspace/a") + `,` + file(txt.ID, "/workspace/a/b") + `]`, "directory"},
		{"no such file", `[` + file("file_0123456789abcdef0123456789abcdef", "/workspace/a") + `]`, "no file"},
		{"no file ID", `[{"type": "file", "file_id": "../x"}]`, "no file"},
		{"a field Corral does not know", `[{"type": "file", "file_id": "` + csv.ID + `", "read_only": true}]`, "not supported"},
		{"with a repository", `[` + file(csv.ID, "/workspace/a") + `, {"type": "github_repository", "url": "https://github.com/acme/app"}]`, "not both"},
	} {
		err := a.s.workspaceFrom(t.Context(), c, &sessionRecord{}, resources(tc.resources))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	// Another user's file is not ada's to name.
	bob := *c
	bob.user = "bob"
	if err := a.s.workspaceFrom(t.Context(), &bob, &sessionRecord{}, resources(`[`+file(csv.ID, "/workspace/a")+`]`)); err == nil || !strings.Contains(err.Error(), "no file") {
		t.Errorf("bob naming ada's file: %v", err)
	}
}
