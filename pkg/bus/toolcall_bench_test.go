package bus_test

import (
	"crypto/ed25519"
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// BenchmarkCallSignature measures what the harness's signature costs a
// call: signing it (the harness, once per call), and decoding it with and
// without checking the signature (a tool service), the latter the
// baseline. Compare the difference with a step round trip
// (BenchmarkStepRoundTrip in services/corral).
func BenchmarkCallSignature(b *testing.B) {
	pub, key, _ := ed25519.GenerateKey(nil)
	s := uuid.Must(uuid.NewV7())
	c := event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "acme", s), Call: uuid.Must(uuid.NewV7()), Turn: 1, User: "ada", Name: "Bash", Input: json.RawMessage(`{"command":"go test ./..."}`)}
	c.Sign(key, bus.ServiceSandbox)
	data, err := json.Marshal(&c)
	if err != nil {
		b.Fatal(err)
	}
	m := bus.Msg{Subject: bus.ToolSubject(bus.ServiceSandbox, "acme", s), Data: data}
	b.Run("sign", func(b *testing.B) {
		for b.Loop() {
			c.Sign(key, bus.ServiceSandbox)
		}
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := bus.DecodeToolCall(m, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode+verify", func(b *testing.B) {
		for b.Loop() {
			if _, err := bus.DecodeToolCall(m, pub); err != nil {
				b.Fatal(err)
			}
		}
	})
}
