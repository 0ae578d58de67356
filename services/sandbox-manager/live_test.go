package sandboxmanager

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
)

// liveHeard collects what a session's live subject carries.
type liveHeard struct {
	mu     sync.Mutex
	pieces []event.Live
}

func listenLive(t *testing.T, nc *nats.Conn, tenant string, session uuid.UUID) *liveHeard {
	t.Helper()
	h := &liveHeard{}
	sub, err := nc.Subscribe(bus.LiveSubject(tenant, session), func(m *nats.Msg) {
		var l event.Live
		if err := json.Unmarshal(m.Data, &l); err != nil {
			t.Errorf("live piece %q: %v", m.Data, err)
			return
		}
		h.mu.Lock()
		h.pieces = append(h.pieces, l)
		h.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return h
}

// text returns the text heard so far, and checks every piece names call.
func (h *liveHeard) text(t *testing.T, call uuid.UUID) string {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for i, l := range h.pieces {
		if l.Kind != event.LiveOutput || l.Call != call || l.Name != "Bash" || l.Seq != i+1 {
			t.Errorf("piece %d: %+v, want output of Bash call %s, seq %d", i, l, call, i+1)
		}
		b.WriteString(l.Text)
	}
	return b.String()
}

// A running Bash call's output is published on its session's live
// subject as it is written, before its result is recorded, and the result
// recorded is the whole output as before.
func TestBashOutputPublishedLive(t *testing.T) {
	js, cfg := start(t)
	session, call := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	h := listenLive(t, js.Conn(), "acme", session)
	dispatch(t, js, session, call, "Bash", `{"command":"echo first; printf 'é\\n' >&2; while [ ! -e release ]; do sleep 0.01; done; echo second"}`, call.String())
	natstest.WaitFor(t, 20*time.Second, func() error {
		if got := h.text(t, call); got != "first\né\n" {
			return fmt.Errorf("heard %q so far", got)
		}
		return nil
	})
	if rs := results(t, js, "acme", session); len(rs) != 0 {
		t.Fatalf("the call's result %+v is recorded before its first line was heard", rs)
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "workspaces", "acme", session.String(), "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := resultsOf(t, js, session, 1)[0]
	if r.Output != "first\né\nsecond\n" || r.IsError || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Errorf("result %+v, want the whole output", r)
	}
	if got := h.text(t, call); got != r.Output {
		t.Errorf("heard %q, result %q: want the same", got, r.Output)
	}
}

// Live output is bounded per call: past the bound one note says it stops,
// and the result recorded is as it would have been, the output limit
// applied.
func TestBashLiveOutputBounded(t *testing.T) {
	js, _ := start(t)
	session, call := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	h := listenLive(t, js.Conn(), "acme", session)
	const written = 3 << 20
	dispatch(t, js, session, call, "Bash", fmt.Sprintf(`{"command":"head -c %d /dev/zero | tr '\\0' a"}`, written), call.String())
	r := resultsOf(t, js, session, 1)[0]
	want := strings.Repeat("a", 30000) + fmt.Sprintf("\n[output truncated: %d bytes omitted]", written-30000)
	if r.Output != want {
		t.Errorf("result %.80q… (%d bytes), want %d a's and the note of what was omitted", r.Output, len(r.Output), 30000)
	}
	wantLive := strings.Repeat("a", 1<<20) + liveCut
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got := h.text(t, call); got != wantLive {
			return fmt.Errorf("heard %d bytes ending %q, want 1 MiB of a's and the note that live output stops", len(got), got[max(0, len(got)-100):])
		}
		return nil
	})
}

func TestSplitRune(t *testing.T) {
	t.Parallel()
	e := "é" // 2 bytes
	k := "한" // 3 bytes
	g := "😀" // 4 bytes
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 3},
		{"a" + e, 3},
		{"a" + e[:1], 1},
		{"a" + k[:2], 1},
		{"a" + g[:3], 1},
		{"a" + g, 5},
		{"a\xff", 2},
		{"a\x80", 2},
	} {
		if got := splitRune([]byte(tc.in)); got != tc.want {
			t.Errorf("splitRune(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
