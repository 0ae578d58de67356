package preview_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/preview"
	"corral.dev/pkg/tool"
)

const file = "one\ntwo\nthree make deploy\nfour\nfive\nsix\nseven\neight\nnine make deploy\nten\n"

// An Edit's preview is the diff of exactly what it replaces, with three
// lines of context; one that cannot apply, or is too large to show, gets
// a reason instead.
func TestEdit(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x\n", preview.MaxBytes/4) + "end\n"
	many := strings.Repeat("a\n", 2000)
	long := strings.Repeat("b"+strings.Repeat("a", 200<<10)+"\n", 4)
	tests := []struct {
		name    string
		content string
		edit    tool.EditArgs
		want    string // the diff, or a part of the error
		fails   bool
	}{
		{"one occurrence", "one\ntwo\nthree\nfour make deploy\nfive\n", tool.EditArgs{OldString: "make deploy", NewString: "make ship"},
			"--- a/memories/f.md\n+++ b/memories/f.md\n@@ -1,5 +1,5 @@\n one\n two\n three\n-four make deploy\n+four make ship\n five\n", false},
		{"every occurrence", file, tool.EditArgs{OldString: "make deploy", NewString: "make ship", ReplaceAll: true},
			"--- a/memories/f.md\n+++ b/memories/f.md\n@@ -1,10 +1,10 @@\n one\n two\n-three make deploy\n+three make ship\n four\n five\n six\n seven\n eight\n-nine make deploy\n+nine make ship\n ten\n", false},
		{"lines added", "a\nb\n", tool.EditArgs{OldString: "a\n", NewString: "a\nmore\n"},
			"--- a/memories/f.md\n+++ b/memories/f.md\n@@ -1,2 +1,3 @@\n a\n+more\n b\n", false},
		{"not there", file, tool.EditArgs{OldString: "make ship", NewString: "x"}, "old_string is not in /memories/f.md", true},
		{"twice without replace_all", file, tool.EditArgs{OldString: "make deploy", NewString: "x"}, "occurs 2 times", true},
		{"file too large", big + big, tool.EditArgs{OldString: "end", NewString: "x"}, "previews are made of files of up to 1 MiB", true},
		{"result too large", big, tool.EditArgs{OldString: "end", NewString: big}, "the Edit would make /memories/f.md", true},
		{"diff too large", long, tool.EditArgs{OldString: "b", NewString: "c", ReplaceAll: true}, "the diff the Edit makes to /memories/f.md is", true},
		{"too many occurrences", many, tool.EditArgs{OldString: "a", NewString: "b", ReplaceAll: true}, "replaces 2000 occurrences", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.edit.FilePath = "/memories/f.md"
			got, err := preview.Edit("/memories/f.md", tc.content, &tc.edit)
			switch {
			case tc.fails && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Edit = %q, %v; want an error saying %q", got, err, tc.want)
			case !tc.fails && (err != nil || got != tc.want):
				t.Errorf("Edit = %q, %v\nwant %q", got, err, tc.want)
			}
		})
	}
}

// A request for a preview gets the text its answer makes, or the refusal;
// with no one serving, none, within the bound.
func TestAskAndServe(t *testing.T) {
	t.Parallel()
	_, nc, _ := natstest.Run(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- preview.Serve(ctx, nc, bus.PreviewFilter(bus.ServiceMemory), bus.PreviewQueue(bus.ServiceMemory), func(ctx context.Context, m *nats.Msg) (string, error) {
			if strings.Contains(string(m.Data), "refuse me") {
				return "", errors.New("not signed")
			}
			return "the diff of " + m.Subject, nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	call := func(input string) *event.ToolCall {
		return &event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "acme", uuid.Must(uuid.NewV7())), Call: uuid.Must(uuid.NewV7()), Name: tool.Edit, Input: []byte(input)}
	}
	c := call(`{"file_path":"/memories/f.md","old_string":"a","new_string":"b"}`)
	var got string
	natstest.WaitFor(t, 5*time.Second, func() error {
		var err error
		got, err = preview.Ask(context.Background(), nc, bus.ServiceMemory, c)
		return err
	})
	if want := "the diff of " + bus.PreviewSubject(bus.ServiceMemory, "acme", c.Session); got != want {
		t.Errorf("Ask = %q, want %q", got, want)
	}
	if got, err := preview.Ask(context.Background(), nc, bus.ServiceMemory, call(`"refuse me"`)); err == nil || !strings.Contains(err.Error(), "not signed") {
		t.Errorf("Ask of a refused request = %q, %v; want the refusal", got, err)
	}
	start := time.Now()
	if got, err := preview.Ask(context.Background(), nc, bus.ServiceSandbox, c); err == nil {
		t.Errorf("Ask with no one serving = %q, want an error", got)
	}
	if d := time.Since(start); d > preview.Timeout+time.Second {
		t.Errorf("Ask with no one serving took %s", d)
	}
}

// A service decodes only requests for its own previews, of Edits of its
// own files, signed by the harness for that service.
func TestDecode(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	session := uuid.Must(uuid.NewV7())
	request := func(service, file string) (string, []byte) {
		c := event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "acme", session), Call: uuid.Must(uuid.NewV7()), User: "ada",
			Name: tool.Edit, Input: json.RawMessage(`{"file_path":"` + file + `","old_string":"a","new_string":"b"}`)}
		c.SignPreview(key, service)
		data, err := json.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		return bus.PreviewSubject(service, "acme", session), data
	}
	tests := []struct {
		name, signedFor, file, decodedBy string
		ok                               bool
	}{
		{"a workspace Edit, by the sandbox-manager", bus.ServiceSandbox, "/workspace/f", bus.ServiceSandbox, true},
		{"a memory Edit, by the memory service", bus.ServiceMemory, "/memories/f.md", bus.ServiceMemory, true},
		{"a memory Edit's request, by the sandbox-manager", bus.ServiceMemory, "/memories/f.md", bus.ServiceSandbox, false},
		{"a memory Edit signed for the sandbox-manager", bus.ServiceSandbox, "/memories/f.md", bus.ServiceSandbox, false},
		{"a workspace Edit's request, by the memory service", bus.ServiceSandbox, "/workspace/f", bus.ServiceMemory, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			subject, data := request(tc.signedFor, tc.file)
			_, a, err := preview.Decode(subject, data, pub, tc.decodedBy)
			if tc.ok && (err != nil || a.FilePath != tc.file) {
				t.Errorf("= %+v, %v; want the Edit of %s", a, err, tc.file)
			}
			if !tc.ok && err == nil {
				t.Errorf("decoded, want it refused")
			}
		})
	}
}
