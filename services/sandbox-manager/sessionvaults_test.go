package sandboxmanager

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

// The vaults a session's first request restricts it to, as the harness
// recorded them, go to egress with every call's sandbox: a session that
// names none goes without.
func TestCallCarriesTheSessionsVaultsToEgress(t *testing.T) {
	_, _, js := natstest.Run(t)
	n := newEgressNode(t)
	startNode(t, js, map[string]string{"CORRAL_EGRESS_SOCKET": n.control})
	restricted, free := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	req := event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", restricted), Request: uuid.Must(uuid.NewV7()),
		User: "ada", Model: "openai:gpt-test", Prompt: "fetch", Vaults: []string{"vlt_a"}}
	if err := sessionlog.New(js, sessionlog.Options{As: sessionlog.Harness, Reader: "test"}).Record(context.Background(), &req, "request"); err != nil {
		t.Fatal(err)
	}
	for _, session := range []uuid.UUID{restricted, free} {
		call := uuid.Must(uuid.NewV7())
		dispatch(t, js, session, call, "Bash", `{"command":"curl -sS http://example.test/x"}`, call.String())
		if r := resultsOf(t, js, session, 1)[0]; r.IsError {
			t.Fatalf("the call of %s: %+v", session, r)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var got []string
	for _, id := range n.opened {
		switch id.Session {
		case restricted:
			if !slices.Equal(id.Vaults, []string{"vlt_a"}) {
				t.Errorf("the restricted session's sandbox opened with vaults %v, want [vlt_a]", id.Vaults)
			}
			got = append(got, "restricted")
		case free:
			if id.Vaults != nil {
				t.Errorf("a session naming no vault opened with vaults %v", id.Vaults)
			}
			got = append(got, "free")
		}
	}
	if !slices.Contains(got, "restricted") || !slices.Contains(got, "free") {
		t.Errorf("opened %v, want both sessions' sandboxes", got)
	}
}
