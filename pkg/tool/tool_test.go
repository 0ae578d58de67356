package tool

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, tool, input string
		want              any
		wantErr           error
		errMentions       string
	}{
		{"bash", Bash, `{"command":"ls","timeout":1000}`, &BashArgs{Command: "ls", Timeout: 1000}, nil, ""},
		{"read", Read, `{"file_path":"/workspace/a","offset":2,"limit":3}`, &ReadArgs{FilePath: "/workspace/a", Offset: 2, Limit: 3}, nil, ""},
		{"edit", Edit, `{"file_path":"a","old_string":"x","new_string":"y","replace_all":true}`, &EditArgs{FilePath: "a", OldString: "x", NewString: "y", ReplaceAll: true}, nil, ""},
		{"glob without path", Glob, `{"pattern":"**/*.go"}`, &GlobArgs{Pattern: "**/*.go"}, nil, ""},
		{"unknown tool", "Delete", `{}`, nil, ErrUnknownTool, "Delete"},
		{"lowercase name", "bash", `{"command":"ls"}`, nil, ErrUnknownTool, "bash"},
		{"unknown field", Bash, `{"cmd":"ls"}`, nil, ErrInvalidArgs, `unknown field "cmd"`},
		{"field in another case", Bash, `{"COMMAND":"rm -rf /"}`, nil, ErrInvalidArgs, `unknown field "COMMAND"`},
		{"field twice", Bash, `{"command":"rm -rf /","command":"ls"}`, nil, ErrInvalidArgs, "twice"},
		{"two objects", Bash, `{"command":"ls"} {"command":"rm -rf /"}`, nil, ErrInvalidArgs, "one JSON object"},
		{"missing command", Bash, `{}`, nil, ErrInvalidArgs, "command is required"},
		{"empty input", Bash, ``, nil, ErrInvalidArgs, "command is required"},
		{"malformed", Bash, `{"command":`, nil, ErrInvalidArgs, ""},
		{"string input", Bash, `"ls"`, nil, ErrInvalidArgs, ""},
		{"timeout too long", Bash, `{"command":"ls","timeout":600001}`, nil, ErrInvalidArgs, "timeout"},
		{"negative offset", Read, `{"file_path":"a","offset":-1}`, nil, ErrInvalidArgs, "negative"},
		{"control character", Read, `{"file_path":"a\u0000b"}`, nil, ErrInvalidArgs, "control character"},
		{"NUL in a pattern", Grep, `{"pattern":"a\u0000","path":"/memories"}`, nil, ErrInvalidArgs, "pattern contains a NUL byte"},
		{"NUL in a grep's glob", Grep, `{"pattern":"a","glob":"*\u0000"}`, nil, ErrInvalidArgs, "glob contains a NUL byte"},
		{"NUL in a glob", Glob, `{"pattern":"\u0000*"}`, nil, ErrInvalidArgs, "pattern contains a NUL byte"},
		{"grep for a NUL, escaped", Grep, `{"pattern":"\\x00"}`, &GrepArgs{Pattern: `\x00`}, nil, ""},
		{"same strings", Edit, `{"file_path":"a","old_string":"x","new_string":"x"}`, nil, ErrInvalidArgs, "the same"},
		{"content too big", Write, `{"file_path":"a","content":"` + strings.Repeat("x", MaxContentBytes+1) + `"}`, nil, ErrInvalidArgs, "limit"},
		{"path too long", Write, `{"file_path":"` + strings.Repeat("a", MaxPathBytes+1) + `","content":""}`, nil, ErrInvalidArgs, "longer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.tool, json.RawMessage(tc.input))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.errMentions) {
					t.Errorf("err = %q, want it to mention %q", err, tc.errMentions)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(tc.want)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("got %s, want %s", gotJSON, wantJSON)
			}
		})
	}
}

func TestWorkspacePath(t *testing.T) {
	tests := []struct {
		in, want string
		outside  bool
	}{
		{"", ".", false},
		{"/workspace", ".", false},
		{"/workspace/", ".", false},
		{"/workspace/a/b.txt", "a/b.txt", false},
		{"a/b.txt", "a/b.txt", false},
		{"./a/../b", "b", false},
		{"/workspace/a/../../workspace/c", "c", false},
		{"/etc/passwd", "", true},
		{"../etc/passwd", "", true},
		{"/workspace/../etc", "", true},
		{"/workspacex/a", "", true},
		{"/", "", true},
	}
	for _, tc := range tests {
		got, err := WorkspacePath(tc.in)
		if tc.outside {
			if !errors.Is(err, ErrPathOutside) {
				t.Errorf("WorkspacePath(%q) = %q, %v; want ErrPathOutside", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("WorkspacePath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// Every spec's schema is valid JSON naming the fields Parse accepts.
func TestSpecs(t *testing.T) {
	names := map[string]bool{}
	for _, s := range Specs() {
		names[s.Name] = true
		var schema struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}
		if err := json.Unmarshal(s.InputSchema, &schema); err != nil {
			t.Fatalf("%s: schema: %v", s.Name, err)
		}
		for _, r := range schema.Required {
			if schema.Properties[r] == nil {
				t.Errorf("%s: required %q is not a property", s.Name, r)
			}
		}
		if _, err := Parse(s.Name, json.RawMessage(`{"unlisted":1}`)); !errors.Is(err, ErrInvalidArgs) {
			t.Errorf("%s accepts unknown fields", s.Name)
		}
	}
	for _, n := range []string{Bash, Read, Write, Edit, Glob, Grep} {
		if !names[n] {
			t.Errorf("no spec for %s", n)
		}
	}
}
