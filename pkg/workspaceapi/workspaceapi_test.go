package workspaceapi

import (
	"encoding/json"
	"errors"
	"io/fs"
	"testing"

	"github.com/google/uuid"
)

// TestWire pins the JSON the CLI and the sandbox-manager exchange: clients
// of another version read and write the same names.
func TestWire(t *testing.T) {
	s := uuid.MustParse("01890a5d-ac96-774b-bcce-b302099a8057")
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"list", ListRequest{Tenant: "acme", Session: s, Path: "src", Recursive: true},
			`{"tenant":"acme","session":"01890a5d-ac96-774b-bcce-b302099a8057","path":"src","recursive":true}`},
		{"list reply", ListReply{Seq: 3, Entries: []Entry{{Path: "src", Mode: fs.ModeDir | 0o755}, {Path: "a", Mode: 0o644, Size: 2, SHA256: "ab"}, {Path: "l", Mode: fs.ModeSymlink | 0o777, Link: "a"}}},
			`{"seq":3,"entries":[{"path":"src","mode":2147484141},{"path":"a","mode":420,"size":2,"sha256":"ab"},{"path":"l","mode":134218239,"link":"a"}]}`},
		{"read", ReadRequest{Session: s, Path: "a", Offset: 4, Length: 8, Seq: 3, Cursor: &Cursor{Object: "N", Seq: 9, At: 0}},
			`{"session":"01890a5d-ac96-774b-bcce-b302099a8057","path":"a","offset":4,"length":8,"seq":3,"cursor":{"object":"N","seq":9,"at":0}}`},
		{"read reply", ReadReply{Seq: 3, Entry: Entry{Path: "a", Mode: 0o644, Size: 2}, Data: []byte("hi")},
			`{"seq":3,"entry":{"path":"a","mode":420,"size":2},"data":"aGk="}`},
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
	if got, want := Subject("acme", "ada", OpRead), "corral.workspace.acme.u-YWRh.cat"; got != want {
		t.Errorf("Subject = %s, want %s", got, want)
	}
}

func TestClean(t *testing.T) {
	tests := []struct {
		in, want string
		bad      bool
	}{
		{in: "", want: "."},
		{in: ".", want: "."},
		{in: "/workspace", want: "."},
		{in: "/workspace/", want: "."},
		{in: "/workspace/src/a.go", want: "src/a.go"},
		{in: "src/a.go", want: "src/a.go"},
		{in: "./src//a.go/", want: "src/a.go"},
		{in: "../etc/passwd", bad: true},
		{in: "src/../../x", bad: true},
		{in: "/workspace/../etc", bad: true},
		{in: "/etc/passwd", bad: true},
		{in: "/workspaces/x", bad: true},
		{in: "/", bad: true},
	}
	for _, tc := range tests {
		got, err := Clean(tc.in)
		if tc.bad {
			if !errors.Is(err, ErrBadPath) {
				t.Errorf("Clean(%q) = %q, %v; want ErrBadPath", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Clean(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestReadLength(t *testing.T) {
	if got := ReadLength(8 << 20); got != MaxRead {
		t.Errorf("ReadLength(8 MiB) = %d, want %d", got, MaxRead)
	}
	if got := ReadLength(1 << 20); got <= 0 || got*4/3+4096 > 1<<20 {
		t.Errorf("ReadLength(1 MiB) = %d: its reply would not fit", got)
	}
}
