package tool_test

import (
	"errors"
	"testing"

	"corral.dev/pkg/tool"
)

func TestApplyEdit(t *testing.T) {
	tests := []struct {
		name    string
		content string
		edit    tool.EditArgs
		limit   int
		want    string
		n       int
		kind    tool.EditErrorKind
	}{
		{"once", "a b c", tool.EditArgs{OldString: "b", NewString: "B"}, 100, "a B c", 1, 0},
		{"all", "b b b", tool.EditArgs{OldString: "b", NewString: "x", ReplaceAll: true}, 100, "x x x", 3, 0},
		{"all of one", "a b", tool.EditArgs{OldString: "b", NewString: "x", ReplaceAll: true}, 100, "a x", 1, 0},
		{"missing", "a b c", tool.EditArgs{OldString: "z", NewString: "x"}, 100, "", 0, tool.EditNotFound},
		{"empty old_string", "a b c", tool.EditArgs{OldString: "", NewString: "x"}, 100, "", 0, tool.EditNotFound},
		{"ambiguous", "b b", tool.EditArgs{OldString: "b", NewString: "x"}, 100, "", 0, tool.EditNotUnique},
		{"up to the limit", "ab", tool.EditArgs{OldString: "b", NewString: "bcd"}, 4, "abcd", 1, 0},
		{"past the limit", "ab", tool.EditArgs{OldString: "b", NewString: "bcde"}, 4, "", 0, tool.EditTooLarge},
		{"all past the limit", "b b", tool.EditArgs{OldString: "b", NewString: "bb", ReplaceAll: true}, 4, "", 0, tool.EditTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, n, err := tool.ApplyEdit("/workspace/f", tc.content, &tc.edit, tc.limit)
			var e *tool.EditError
			switch {
			case tc.kind == 0 && (err != nil || got != tc.want || n != tc.n):
				t.Errorf("= %q, %d, %v; want %q, %d", got, n, err, tc.want, tc.n)
			case tc.kind != 0 && (!errors.As(err, &e) || e.Kind != tc.kind || e.Name != "/workspace/f"):
				t.Errorf("= %q, %d, %v; want an EditError of kind %d", got, n, err, tc.kind)
			}
		})
	}
}
