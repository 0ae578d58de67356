package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/credentialtest"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// jsonLines returns the JSON objects of out, one a line, failing the test
// when a line is none or when anything in out is escaped for HTML.
func jsonLines(t *testing.T, what, out string) []map[string]any {
	t.Helper()
	for _, esc := range []string{`\u0026`, `\u003c`, `\u003e`} {
		if strings.Contains(out, esc) {
			t.Errorf("%s escapes for HTML (%s):\n%s", what, esc, out)
		}
	}
	var objs []map[string]any
	for line := range strings.Lines(out) {
		var o map[string]any
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("%s: line %q is no JSON object: %v", what, line, err)
		}
		objs = append(objs, o)
	}
	return objs
}

// wantFields fails the test unless o's fields are those of fields: each
// one it names, and those marked with a leading ? (omitted when empty) if
// it has them, nothing else.
func wantFields(t *testing.T, what string, o map[string]any, fields string) {
	t.Helper()
	allowed := map[string]bool{}
	for _, f := range strings.Fields(fields) {
		name, optional := strings.CutPrefix(f, "?")
		allowed[name] = true
		if _, ok := o[name]; !ok && !optional {
			t.Errorf("%s: no field %s in %v", what, name, o)
		}
	}
	for k := range o {
		if !allowed[k] {
			t.Errorf("%s: field %s is not among the documented %s", what, k, fields)
		}
	}
}

// one returns the one object of out, failing the test unless it has
// exactly one.
func one(t *testing.T, what, out string) map[string]any {
	t.Helper()
	objs := jsonLines(t, what, out)
	if len(objs) != 1 {
		t.Fatalf("%s: %d JSON lines, want 1:\n%s", what, len(objs), out)
	}
	return objs[0]
}

// The JSON fields of each command, as the README lists them.
const (
	sessionFields     = "tenant session user status model turns cost_usd input_tokens output_tokens started last_event title ?environment ?code ?reason ?held requests seq"
	approvalFields    = "id status tenant session turn user tool input rule why ?preview requested_at ?expires_at ?reviewer ?reason ?decided_at"
	usageFields       = "day tenant user steps input_tokens cache_read_tokens cache_write_tokens output_tokens cost_usd sandbox_seconds"
	fileFields        = "path ?skill ?owner size version updated_by updated_at"
	vaultFields       = "name user hosts paths ?header ?prefix ?basic_user version created_at ?rotated_at"
	environmentFields = "name description version default built ?built_at ?setup_ms updated_at spec"
	wsEntryFields     = "path type mode size ?sha256 ?link"
	jobStatusFields   = "id batch tenant session status ?code ?error"
	credentialFields  = "id tenant role user ?label created"
)

// TestCLIJSON checks each listing command's --json against corral dev:
// one JSON object a line with the documented fields, nothing escaped for
// HTML, nothing at all for an empty list; and IDs given by prefix, with
// the tenant found from the session.
func TestCLIJSON(t *testing.T) {
	const prompt = "tidy <b> & <i>"
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		prompt:      {write("/workspace/a&b<c>.txt", "x & y")},
		"remove it": {bash("echo rm -rf would go here > removed.txt")},
	}), nil)
	acme := func(args ...string) []string { return append(args, "--tenant", "acme", "--user", "ada") }

	// Empty lists print nothing.
	for _, args := range [][]string{
		{"approvals", "--tenant", "acme", "--json"},
		acme("vaults", "ls", "--json"),
		{"environments", "ls", "--tenant", "acme", "--json"},
		{"usage", "--tenant", "acme", "--json"},
		{"sessions", "--tenant", "acme", "--json"},
	} {
		if out := p.corralOK(t, args...); out != "" {
			t.Errorf("corral %s, of nothing: %q, want nothing", strings.Join(args, " "), out)
		}
	}

	code, _, stderr := p.corral(t, acme("run", prompt)...)
	if code != 0 {
		t.Fatalf("corral run: exit %d\n%s", code, stderr)
	}
	session := sessionOf(t, stderr)
	// UUIDv7s of sessions started together share their first digits:
	// enough of its random ones to be unique.
	prefix := session.String()[:24]
	wantIn(t, "corral logs", p.corralOK(t, "logs", prefix), `prompt="tidy <b> & <i>"`)
	wantIn(t, "corral logs --json", p.corralOK(t, "logs", "--json", prefix), `"prompt":"tidy <b> & <i>"`)

	var s map[string]any
	natstest.WaitFor(t, 10*time.Second, func() error {
		s = one(t, "corral sessions --json", p.corralOK(t, "sessions", "--tenant", "acme", "--json"))
		if s["status"] != "completed" {
			return fmt.Errorf("session %v, not yet completed", s)
		}
		return nil
	})
	wantFields(t, "corral sessions --json", s, sessionFields)
	if s["title"] != prompt || s["session"] != session.String() {
		t.Errorf("corral sessions --json: %v, want title %q of session %s", s, prompt, session)
	}

	entries := jsonLines(t, "corral workspace ls --json", p.corralOK(t, "workspace", prefix, "ls", "--json"))
	i := slices.IndexFunc(entries, func(e map[string]any) bool { return e["path"] == "a&b<c>.txt" })
	if i < 0 {
		t.Fatalf("corral workspace ls --json: %v, want a&b<c>.txt", entries)
	}
	wantFields(t, "corral workspace ls --json", entries[i], wsEntryFields)
	if entries[i]["type"] != "file" || entries[i]["size"] != float64(len("x & y")) || entries[i]["mode"] != "0644" {
		t.Errorf("corral workspace ls --json: %v, want a file of 5 bytes, mode 0644", entries[i])
	}
	if code, _, stderr := p.corral(t, "workspace", prefix, "diff", "--json"); code != exitUsage {
		t.Errorf("corral workspace diff --json: exit %d, want %d: %s", code, exitUsage, stderr)
	}

	// Usage is counted from the logs a moment after it is spent, as the
	// other tests of corral usage wait for.
	var rows []map[string]any
	natstest.WaitFor(t, 10*time.Second, func() error {
		rows = jsonLines(t, "corral usage --json", p.corralOK(t, "usage", "--tenant", "acme", "--json"))
		if len(rows) != 2 { // the tenant's day, and ada's
			return fmt.Errorf("corral usage --json: %v, want the tenant's and ada's", rows)
		}
		return nil
	})
	for _, r := range rows {
		wantFields(t, "corral usage --json", r, usageFields)
	}

	// Memories, skills, vaults and environments.
	p.corralOK(t, acme("memories", "put", "/memories/notes & <x>.md", writeTemp(t, "a & b"))...)
	m := one(t, "corral memories ls --json", p.corralOK(t, acme("memories", "ls", "--json")...))
	wantFields(t, "corral memories ls --json", m, fileFields)
	if m["path"] != "/memories/notes & <x>.md" || m["size"] != float64(5) {
		t.Errorf("corral memories ls --json: %v", m)
	}
	skill := t.TempDir()
	if err := os.WriteFile(filepath.Join(skill, "SKILL.md"), []byte("---\nname: ship\ndescription: ships <it> & more\n---\nship it\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.corralOK(t, acme("skills", "push", skill)...)
	sk := one(t, "corral skills ls --json", p.corralOK(t, acme("skills", "ls", "--json")...))
	wantFields(t, "corral skills ls --json", sk, fileFields)
	if sk["skill"] != "ship" || sk["path"] != "/skills/ship/SKILL.md" {
		t.Errorf("corral skills ls --json: %v", sk)
	}
	p.vault(t, "acme", "ada", "s3cret-value", "gh", "--host", "github.com", "--header", "Authorization", "--prefix", "Bearer ")
	out := p.corralOK(t, acme("vaults", "ls", "--json")...)
	wantNotIn(t, "corral vaults ls --json", out, "s3cret-value")
	v := one(t, "corral vaults ls --json", out)
	wantFields(t, "corral vaults ls --json", v, vaultFields)
	if v["name"] != "gh" || v["user"] != "ada" || v["header"] != "Authorization" {
		t.Errorf("corral vaults ls --json: %v", v)
	}
	envFile := writeTemp(t, "name: tools\ndescription: HTTP <libs> & more\n")
	p.corralOK(t, "environments", "create", envFile, "--tenant", "acme")
	en := one(t, "corral environments ls --json", p.corralOK(t, "environments", "ls", "--tenant", "acme", "--json"))
	wantFields(t, "corral environments ls --json", en, environmentFields)
	shown := one(t, "corral environments show --json", p.corralOK(t, "environments", "show", "tools", "--tenant", "acme", "--json"))
	wantFields(t, "corral environments show --json", shown, environmentFields)
	if en["description"] != "HTTP <libs> & more" || shown["version"] != en["version"] || en["built"] != false {
		t.Errorf("corral environments ls --json: %v\nshow --json: %v", en, shown)
	}

	// A batch file's jobs, none submitted.
	jobs := filepath.Join(t.TempDir(), "jobs.jsonl")
	if err := os.WriteFile(jobs, []byte(`{"id":"j&1","prompt":"x"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := one(t, "corral batch status --json", p.corralOK(t, "batch", "status", "--tenant", "acme", "--json", jobs))
	wantFields(t, "corral batch status --json", j, jobStatusFields)
	if j["id"] != "j&1" || j["status"] != statusNotSubmitted {
		t.Errorf("corral batch status --json: %v", j)
	}

	// An approval, shown and decided by a prefix of its ID.
	run := p.runBackground(t, "acme", "remove it")
	id, listing := p.pending(t, "acme")
	wantIn(t, "corral approvals", listing, "here > removed.txt")
	a := one(t, "corral approvals --json", p.corralOK(t, "approvals", "--tenant", "acme", "--json"))
	wantFields(t, "corral approvals --json", a, approvalFields)
	if a["id"] != id.String() || a["status"] != "pending" || a["tool"] != "Bash" {
		t.Errorf("corral approvals --json: %v, want approval %s pending", a, id)
	}
	aPrefix := id.String()[:24]
	a = one(t, "corral approvals show --json", p.corralOK(t, "approvals", "show", aPrefix, "--tenant", "acme", "--json"))
	wantFields(t, "corral approvals show --json", a, approvalFields)
	wantIn(t, "corral approve", p.corralOK(t, "approve", aPrefix, "--tenant", "acme"), "approved "+id.String())
	if r := wait(t, run); r.code != 0 {
		t.Fatalf("corral run after the approval: exit %d\n%s", r.code, r.stderr)
	}

	// A credential of acme alone finds the session's tenant: no --tenant.
	c, secret := credentialtest.Issue(t, p.adminJS(t), "acme", "ada", credential.RoleUser)
	user := p.as(c.ID, secret, "ada")
	wantIn(t, "a user's corral logs", user.corralOK(t, "logs", prefix), `prompt="tidy <b> & <i>"`)
	user.corralOK(t, "run", "--session", prefix, "and again")
	wantIn(t, "a user's corral stop", user.corralOK(t, "stop", prefix), "has completed already")
	if n := len(jsonLines(t, "corral sessions --json", p.corralOK(t, "sessions", "--tenant", "acme", "--json"))); n != 2 {
		t.Errorf("corral sessions --json: %d sessions, want 2 (the follow-up starts none)", n)
	}

	// The administrator's credentials, never their secrets' hashes.
	admin := p.as(credential.UserAdmin, p.adminPassword(t), "")
	for _, cr := range jsonLines(t, "corral credentials ls --json", admin.corralOK(t, "credentials", "ls", "--json")) {
		wantFields(t, "corral credentials ls --json", cr, credentialFields)
	}
}

// as is p, with its commands signed in as id with password, acting as
// user (when not "").
func (p *platform) as(id, password, user string) *platform {
	q := *p
	q.getenv = func(k string) string {
		switch {
		case k == "CORRAL_NATS_USER":
			return id
		case k == "CORRAL_NATS_PASSWORD":
			return password
		case k == "CORRAL_USER" && user != "":
			return user
		}
		return p.getenv(k)
	}
	return &q
}

// adminPassword is the password of the administrator of p, a corral dev.
func (p *platform) adminPassword(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.data, devAuthFile))
	if err != nil {
		t.Fatal(err)
	}
	var a devAuth
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return a.Passwords[credential.UserAdmin]
}

// adminJS is JetStream on p as its administrator, closed when the test
// ends.
func (p *platform) adminJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := p.connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
