package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/tool"
)

// heard is what an [Output] heard, safe to read while a call runs.
type heard struct {
	mu   sync.Mutex
	out  []byte
	cuts int
	// pieces counts the calls.
	pieces int
}

func (h *heard) output(p []byte, cut bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.out = append(h.out, p...)
	h.pieces++
	if cut {
		h.cuts++
	}
}

func (h *heard) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.out)
}

// A running call's output is heard as it is written, long before the call
// ends, and its result is byte for byte the result of the same call
// unheard.
func TestOutputHeardAsWritten(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	command := "echo first; echo to stderr >&2; while [ ! -e release ]; do sleep 0.01; done; echo second; exit 3"
	h := &heard{}
	done := make(chan Result, 1)
	go func() {
		res, err := d.RunWithOutput(t.Context(), who(tenant, session), &tool.BashArgs{Command: command}, h.output)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	deadline := time.Now().Add(20 * time.Second)
	for h.String() != "first\nto stderr\n" {
		if time.Now().After(deadline) {
			t.Fatalf("heard %q while the call runs, want %q", h.String(), "first\nto stderr\n")
		}
		select {
		case res := <-done:
			t.Fatalf("the call ended (%+v) before its first lines were heard", res)
		case <-time.After(5 * time.Millisecond):
		}
	}
	// The call goes on only once its first lines were heard.
	if err := os.WriteFile(filepath.Join(d.Workspace(tenant, session), "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var live Result
	select {
	case live = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not end")
	}
	if got, want := h.String(), "first\nto stderr\nsecond\n"; got != want {
		t.Errorf("heard %q, want %q", got, want)
	}
	if h.cuts != 0 {
		t.Errorf("heard %d cuts, want none", h.cuts)
	}
	unheard := bash(t, d, session, "echo first; echo to stderr >&2; echo second; exit 3")
	live.Duration, unheard.Duration = 0, 0
	if !reflect.DeepEqual(live, unheard) {
		t.Errorf("result heard %+v, unheard %+v: want the same", live, unheard)
	}
}

// Output past the live limit is not heard: the last piece says so, once,
// and the result is the same as unheard, its own output limit applied.
func TestOutputHeardUpToItsLimit(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{LiveLimit: 100_000, OutputLimit: 50_000})
	session := uuid.New()
	// 300,000 bytes in lines of 100, written a line at a time.
	command := `for i in $(seq 3000); do printf '%099d\n' $i; done`
	h := &heard{}
	res, err := d.RunWithOutput(t.Context(), who(tenant, session), &tool.BashArgs{Command: command}, h.output)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for i := 1; i <= 3000; i++ {
		fmt.Fprintf(&want, "%099d\n", i)
	}
	if got := h.String(); got != want.String()[:100_000] {
		t.Errorf("heard %d bytes (%q…), want the first 100000 written", len(got), got[:min(len(got), 200)])
	}
	if h.cuts != 1 {
		t.Errorf("heard %d cuts, want 1", h.cuts)
	}
	// Coalesced: far fewer pieces than lines.
	if h.pieces > 500 {
		t.Errorf("heard %d pieces for 1000 lines", h.pieces)
	}
	unheard := bash(t, d, session, command)
	res.Duration, unheard.Duration = 0, 0
	if !reflect.DeepEqual(res, unheard) {
		t.Errorf("result heard %+v, unheard %+v: want the same", res, unheard)
	}
	if !res.Truncated || !strings.HasPrefix(res.Output, want.String()[:50_000]) {
		t.Errorf("result %.100q… (truncated %v), want the first 50000 bytes written", res.Output, res.Truncated)
	}
}
