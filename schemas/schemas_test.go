package schemas

import (
	"strings"
	"testing"
)

func TestExamplesValidate(t *testing.T) {
	types := Types()
	if len(types) < 9 {
		t.Fatalf("got %d schemas, want at least 9: %v", len(types), types)
	}
	for _, typ := range types {
		t.Run(typ, func(t *testing.T) {
			ex, err := Examples(typ)
			if err != nil {
				t.Fatal(err)
			}
			if len(ex) == 0 {
				t.Fatal("schema has no example")
			}
			for _, e := range ex {
				if err := Validate(typ, e); err != nil {
					t.Errorf("example does not validate: %v", err)
				}
			}
		})
	}
}

func TestValidateNamesTheField(t *testing.T) {
	tests := []struct {
		name, data, want string
	}{
		{"missing prompt", `{"type":"corral.session.v1.request","id":"33333333-3333-7333-8333-333333333333","time":"2026-11-22T10:00:00Z","tenant":"acme","session":"11111111-1111-7111-8111-111111111111","user":"ada"}`, "/prompt: missing"},
		{"bad tenant", `{"type":"corral.session.v1.request","id":"33333333-3333-7333-8333-333333333333","time":"2026-11-22T10:00:00Z","tenant":"ACME!","session":"11111111-1111-7111-8111-111111111111","user":"ada","prompt":"hi"}`, "/tenant"},
		{"bad uuid", `{"type":"corral.session.v1.request","id":"nope","time":"2026-11-22T10:00:00Z","tenant":"acme","session":"11111111-1111-7111-8111-111111111111","user":"ada","prompt":"hi"}`, "/id"},
		{"unknown field", `{"type":"corral.session.v1.request","id":"33333333-3333-7333-8333-333333333333","time":"2026-11-22T10:00:00Z","tenant":"acme","session":"11111111-1111-7111-8111-111111111111","user":"ada","prompt":"hi","promt":"x"}`, "/promt: unknown field"},
		{"wrong type", `{"type":"corral.session.v1.request","id":"33333333-3333-7333-8333-333333333333","time":"2026-11-22T10:00:00Z","tenant":"acme","session":"11111111-1111-7111-8111-111111111111","user":"ada","prompt":"hi","model":7}`, "/model: got number, want string"},
		{"not an object", `[1]`, "/: got array, want object"},
		{"not json", `{`, "not JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate("corral.session.v1.request", []byte(tc.data))
			if err == nil {
				t.Fatal("got nil error, want one")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestPath(t *testing.T) {
	if got, want := Path("corral.tool.v1.call"), "tool/v1/call.json"; got != want {
		t.Errorf("Path = %q, want %q", got, want)
	}
	if _, err := Schema("corral.nope.v1.x"); err == nil {
		t.Error("Schema of an unknown type: got nil error")
	}
}
