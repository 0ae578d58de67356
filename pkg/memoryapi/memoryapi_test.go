package memoryapi

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestWire pins the JSON the CLI and the memory service exchange: clients
// of another version read and write the same names.
func TestWire(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	op := uuid.MustParse("01890a5d-ac96-774b-bcce-b302099a8057")
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"request", APIRequest{Tenant: "acme", User: "ada", Path: "/memories/a.md", Content: "hi", Op: op, Recursive: true, Version: 3},
			`{"tenant":"acme","user":"ada","path":"/memories/a.md","content":"hi","op":"01890a5d-ac96-774b-bcce-b302099a8057","recursive":true,"version":3}`},
		{"empty request", APIRequest{Path: "/memories"},
			`{"path":"/memories","op":"00000000-0000-0000-0000-000000000000"}`},
		{"files", APIResponse{Files: []APIFile{{Path: "/memories/a.md", Owner: "ada", Size: 2, Version: 3, UpdatedBy: "ada", UpdatedAt: at, Content: "hi"}}},
			`{"files":[{"path":"/memories/a.md","owner":"ada","size":2,"version":3,"updated_by":"ada","updated_at":"2026-01-02T03:04:05Z","content":"hi"}]}`},
		{"removed", APIResponse{Removed: 2}, `{"removed":2}`},
		{"versions", APIResponse{Versions: []APIVersion{{Version: 1, Removed: true, Size: 0, ChangedBy: "ada", ChangedAt: at}}},
			`{"versions":[{"version":1,"removed":true,"size":0,"changed_by":"ada","changed_at":"2026-01-02T03:04:05Z"}]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestSubject(t *testing.T) {
	if got, want := Subject("acme", "ada", OpRestore), "corral.memory.acme.u-YWRh.restore"; got != want {
		t.Errorf("Subject = %s, want %s", got, want)
	}
}
