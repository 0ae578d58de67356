package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"corral.dev/pkg/event"
	"corral.dev/schemas"
)

// FuzzParse checks that a message Parse accepts is of the type it names,
// and that its encoding parses to a value that encodes the same: what is
// recorded is what is read back.
func FuzzParse(f *testing.F) {
	for _, typ := range schemas.Types() {
		examples, err := schemas.Examples(typ)
		if err != nil {
			f.Fatal(err)
		}
		for _, ex := range examples {
			f.Add([]byte(ex))
		}
	}
	f.Add([]byte(`{"type":"corral.tool.v1.completed","TYPE":"corral.session.v1.completed"}`))
	f.Add([]byte(`{"type":"corral.nope.v1.x"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := event.Parse(data)
		if err != nil {
			if v != nil {
				t.Fatalf("Parse(%q) returned %#v with its error %v", data, v, err)
			}
			return
		}
		var probe struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(data, &probe); err != nil {
			t.Fatal(err)
		}
		if ev, ok := v.(event.Event); ok && ev.Head().Type != probe.Type {
			t.Fatalf("Parse(%q): a %q message decoded as a %q event", data, probe.Type, ev.Head().Type)
		}
		once, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("Parse(%q) = %#v, which does not encode: %v", data, v, err)
		}
		again, err := event.Parse(once)
		if err != nil {
			if errors.Is(err, event.ErrUnknownType) {
				t.Fatalf("Parse(%q): its encoding %s names another type: %v", data, once, err)
			}
			t.Fatalf("Parse(%q): its encoding %s does not parse: %v", data, once, err)
		}
		twice, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(once, twice) {
			t.Fatalf("Parse(%q) encodes as\n%s\nwhich parses to what encodes as\n%s", data, once, twice)
		}
	})
}
