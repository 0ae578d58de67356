package harness

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// The model's answer is published on its session's live subject as it
// streams, before its turn's response is recorded: its text, and a call's
// input with the call's name on its first piece, each placed by turn,
// attempt and sequence.
func TestModelOutputPublishedLive(t *testing.T) {
	hold := make(chan struct{})
	const text = "Let me look at the files in the workspace first."
	js, _ := start(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			return modeltest.Turn{Text: text, Calls: []modeltest.Call{{Name: "Glob", Input: map[string]any{"pattern": "/workspace/*"}}}, Hold: hold}, nil
		}
		return modeltest.Turn{}, errors.New("one turn only")
	})
	session := uuid.Must(uuid.NewV7())
	var mu sync.Mutex
	var heard []event.Live
	sub, err := js.Conn().Subscribe(bus.LiveSubject("acme", session), func(m *nats.Msg) {
		var l event.Live
		if err := json.Unmarshal(m.Data, &l); err != nil {
			t.Errorf("live piece %q: %v", m.Data, err)
		}
		mu.Lock()
		heard = append(heard, l)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	request(t, js, session, "look")
	natstest.WaitFor(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(heard) == 0 {
			return errors.New("nothing heard on the live subject while the model streams")
		}
		return nil
	})
	if msgs := sessionEvents(t, js, session, event.TypeModelResponded); len(msgs) != 0 {
		t.Fatalf("the turn's response is recorded while the model still streams it")
	}
	close(hold)
	natstest.WaitFor(t, 20*time.Second, func() error {
		if len(sessionEvents(t, js, session, event.TypeModelResponded)) == 0 {
			return errors.New("the turn's response is not recorded")
		}
		return nil
	})

	mu.Lock()
	defer mu.Unlock()
	var got strings.Builder
	var input strings.Builder
	named := ""
	for i, l := range heard {
		if l.Turn != 1 {
			continue
		}
		if l.Attempt != 1 || l.Seq != i+1 {
			t.Errorf("piece %d: %+v, want attempt 1, seq %d", i, l, i+1)
		}
		switch l.Kind {
		case event.LiveText:
			got.WriteString(l.Text)
		case event.LiveToolInput:
			if input.Len() == 0 && named == "" {
				named = l.Name
			}
			input.WriteString(l.Text)
		}
	}
	if got.String() != text {
		t.Errorf("turn 1's text heard %q, want %q", got.String(), text)
	}
	if named != "Glob" || input.String() != `{"pattern":"/workspace/*"}` {
		t.Errorf("the call's input heard %q, named %q; want the Glob call's input", input.String(), named)
	}
}
