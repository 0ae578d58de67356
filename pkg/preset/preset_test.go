package preset_test

import (
	"testing"

	"corral.dev/pkg/preset"
)

func TestHosts(t *testing.T) {
	t.Parallel()
	hs, unknown := preset.Of([]string{"pypi", "github"})
	if unknown != "" {
		t.Fatalf("unknown %q", unknown)
	}
	hs.Add("files.example.com")
	hs.Add("*.example.org")
	tests := []struct {
		host string
		port int
		want bool
	}{
		{"pypi.org", 443, true},
		{"files.pythonhosted.org", 80, true},
		{"pypi.org", 22, false},
		{"raw.githubusercontent.com", 443, true},
		{"githubusercontent.com", 443, false},
		{"files.example.com", 443, true},
		{"a.b.example.org", 443, true},
		{"example.org", 443, false},
		{"registry.npmjs.org", 443, false},
		{"evilpypi.org", 443, false},
	}
	for _, tc := range tests {
		if got := hs.Match(tc.host, tc.port); got != tc.want {
			t.Errorf("Match(%s, %d) = %v, want %v", tc.host, tc.port, got, tc.want)
		}
	}
	if _, unknown := preset.Of([]string{"npm", "cpan"}); unknown != "cpan" {
		t.Errorf("Of with cpan: unknown %q", unknown)
	}
	var none preset.Hosts
	if !none.Empty() || none.Match("pypi.org", 443) || hs.Empty() {
		t.Error("the empty set is not empty, or matches")
	}
	if !preset.Known("go") || preset.Known("cpan") {
		t.Error("Known")
	}
}
