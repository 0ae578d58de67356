package bus_test

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// A tool call is believed for the tenant and session its subject names,
// and only if the harness signed it for the subject's service: a body
// naming others, or signed by another key, for another service or over
// other arguments, is rejected.
func TestDecodeToolCall(t *testing.T) {
	t.Parallel()
	s, other := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	pub, key, _ := ed25519.GenerateKey(nil)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	call := func(tenant string, session uuid.UUID) *event.ToolCall {
		c := &event.ToolCall{Header: event.NewHeader(event.TypeToolCall, tenant, session), Call: uuid.New(), Turn: 1, User: "alice", Name: "Bash", Input: json.RawMessage(`{"command":"ls"}`)}
		c.Sign(key, bus.ServiceSandbox)
		return c
	}
	encode := func(v any) []byte {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	good := call("acme", s)
	noID := call("acme", s)
	noID.Call = uuid.Nil
	wrongType := call("acme", s)
	wrongType.Type = event.TypeToolCompleted
	unsigned := call("acme", s)
	unsigned.Signature = nil
	forged := call("acme", s)
	forged.Sign(otherKey, bus.ServiceSandbox)
	otherArgs := call("acme", s)
	otherArgs.Input = json.RawMessage(`{"command":"rm -rf /workspace"}`)
	otherUser := call("acme", s)
	otherUser.User = "bob"
	// The result's ID is not signed (it says only where the result goes),
	// but it goes into the result's headers: only the form the harness
	// makes passes.
	withResultID := func(id func(c *event.ToolCall) string) *event.ToolCall {
		c := call("acme", s)
		c.ResultID = id(c)
		return c
	}
	resultID := withResultID(func(c *event.ToolCall) string { return event.ResultID(c.Call, make([]byte, 32)) })
	injected := withResultID(func(c *event.ToolCall) string {
		return c.Call.String() + ":result:00000000000000000000000000000000\r\nNats-Expected-Stream: X"
	})
	othersResultID := withResultID(func(*event.ToolCall) string { return event.ResultID(uuid.New(), make([]byte, 32)) })
	shortResultID := withResultID(func(c *event.ToolCall) string { return c.Call.String() + ":result:00" })
	upperResultID := withResultID(func(c *event.ToolCall) string { return c.Call.String() + ":result:0000000000000000000000000000000A" })
	tests := []struct {
		name    string
		subject string
		data    []byte
		ok      bool
	}{
		{"good call", bus.ToolSubject(bus.ServiceSandbox, "acme", s), encode(good), true},
		{"body of another tenant", bus.ToolSubject(bus.ServiceSandbox, "acme", s), encode(call("evil", s)), false},
		{"body of another session", bus.ToolSubject(bus.ServiceSandbox, "acme", s), encode(call("acme", other)), false},
		{"subject of another tenant", bus.ToolSubject(bus.ServiceMemory, "evil", s), encode(good), false},
		{"no call ID", bus.ToolSubject(bus.ServiceSandbox, "acme", s), encode(noID), false},
		{"not a call", bus.ToolSubject(bus.ServiceSandbox, "acme", s), encode(wrongType), false},
		{"undecodable", bus.ToolSubject(bus.ServiceSandbox, "acme", s), []byte(`{not json`), false},
		{"subject without a session", "tools.sandbox.acme", encode(good), false},
		{"subject with a bad session", "tools.sandbox.acme.not-a-uuid", encode(good), false},
		{"bad tenant on both", bus.ToolSubject(bus.ServiceSandbox, "ACME", s), encode(call("ACME", s)), false},
		{"unsigned", bus.ToolSubject(bus.ServiceSandbox, "acme", s), encode(unsigned), false},
		{"signed by another key", bus.ToolSubject(bus.ServiceSandbox, "acme", s), encode(forged), false},
		{"signed for another service", bus.ToolSubject(bus.ServiceMemory, "acme", s), encode(good), false},
		{"other arguments", bus.ToolSubject(bus.ServiceSandbox, "acme", s), encode(otherArgs), false},
		{"another user", bus.ToolSubject(bus.ServiceSandbox, "acme", s), encode(otherUser), false},
		{"result ID", bus.ToolSubject(bus.ServiceSandbox, "acme", s), encode(resultID), true},
		{"result ID with a header in it", bus.ToolSubject(bus.ServiceSandbox, "acme", s), encode(injected), false},
		{"result ID of another call", bus.ToolSubject(bus.ServiceSandbox, "acme", s), encode(othersResultID), false},
		{"result ID too short", bus.ToolSubject(bus.ServiceSandbox, "acme", s), encode(shortResultID), false},
		{"result ID in capitals", bus.ToolSubject(bus.ServiceSandbox, "acme", s), encode(upperResultID), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := bus.DecodeToolCall(bus.Msg{Subject: tc.subject, Data: tc.data}, pub)
			if !tc.ok {
				if !errors.Is(err, bus.ErrRejected) {
					t.Fatalf("DecodeToolCall = %+v, %v; want an error matching ErrRejected", c, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeToolCall: %v", err)
			}
			var sent event.ToolCall
			_ = json.Unmarshal(tc.data, &sent)
			if c.Tenant != "acme" || c.Session != s || c.Call != sent.Call || c.ResultID != sent.ResultID || c.Name != "Bash" || string(c.Input) != `{"command":"ls"}` {
				t.Errorf("DecodeToolCall = %+v, want the call as sent", c)
			}
		})
	}
}

// A request for a preview is believed as a call is, but only if the harness
// signed it for a preview by the subject's service: a call signed to run
// is no request for a preview, and a request for a preview never runs.
func TestDecodePreview(t *testing.T) {
	t.Parallel()
	s := uuid.Must(uuid.NewV7())
	pub, key, _ := ed25519.GenerateKey(nil)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	call := func(sign func(*event.ToolCall)) []byte {
		c := &event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "acme", s), Call: uuid.New(), Turn: 1, User: "alice", Name: "Edit",
			Input: json.RawMessage(`{"file_path":"/memories/f.md","old_string":"a","new_string":"b"}`), ExpectVersion: 3}
		sign(c)
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	preview := call(func(c *event.ToolCall) { c.SignPreview(key, bus.ServiceMemory) })
	run := call(func(c *event.ToolCall) { c.Sign(key, bus.ServiceMemory) })
	tests := []struct {
		name    string
		subject string
		data    []byte
		ok      bool
	}{
		{"request for a preview", bus.PreviewSubject(bus.ServiceMemory, "acme", s), preview, true},
		{"call signed to run", bus.PreviewSubject(bus.ServiceMemory, "acme", s), run, false},
		{"unsigned", bus.PreviewSubject(bus.ServiceMemory, "acme", s), call(func(*event.ToolCall) {}), false},
		{"signed by another key", bus.PreviewSubject(bus.ServiceMemory, "acme", s), call(func(c *event.ToolCall) { c.SignPreview(otherKey, bus.ServiceMemory) }), false},
		{"for another service", bus.PreviewSubject(bus.ServiceSandbox, "acme", s), preview, false},
		{"of another tenant", bus.PreviewSubject(bus.ServiceMemory, "beta", s), preview, false},
		{"on a tool call's subject", bus.ToolSubject(bus.ServiceMemory, "acme", s), preview, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := bus.DecodePreview(bus.Msg{Subject: tc.subject, Data: tc.data}, pub)
			if !tc.ok {
				if !errors.Is(err, bus.ErrRejected) {
					t.Fatalf("DecodePreview = %+v, %v; want an error matching ErrRejected", c, err)
				}
				return
			}
			if err != nil || c.Tenant != "acme" || c.Session != s || c.ExpectVersion != 3 {
				t.Fatalf("DecodePreview = %+v, %v; want the request as sent", c, err)
			}
		})
	}
	// Nor does a request for a preview pass for a call to run.
	if c, err := bus.DecodeToolCall(bus.Msg{Subject: bus.ToolSubject(bus.ServiceMemory, "acme", s), Data: preview}, pub); !errors.Is(err, bus.ErrRejected) {
		t.Errorf("DecodeToolCall of a request for a preview = %+v, %v; want an error matching ErrRejected", c, err)
	}
}
