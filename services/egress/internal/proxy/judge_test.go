package proxy

import "testing"

func TestParseTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		scheme, authority string
		want              Target
		ok                bool
	}{
		{"https", "git.example.test:443", Target{Scheme: "https", Host: "git.example.test", Port: 443}, true},
		{"https", "PyPI.org.:8443", Target{Scheme: "https", Host: "pypi.org", Port: 8443}, true},
		{"http", "example.test", Target{Scheme: "http", Host: "example.test", Port: 80}, true},
		{"https", "[2001:db8::1]:443", Target{Scheme: "https", Host: "2001:db8::1", Port: 443}, true},
		{"http", "[2001:db8::1]", Target{Scheme: "http", Host: "2001:db8::1", Port: 80}, true},
		{"https", "10.0.0.1:22", Target{Scheme: "https", Host: "10.0.0.1", Port: 22}, true},
		{"https", "host:0", Target{}, false},
		{"https", "host:99999", Target{}, false},
		{"https", "host:x", Target{}, false},
		{"https", ":443", Target{}, false},
		{"https", "a b:443", Target{}, false},
		{"https", "a..b:443", Target{}, false},
		{"https", "[fe80::1%eth0]:443", Target{}, false},
		{"https", "user@host:443", Target{}, false},
	} {
		got, err := parseTarget(tc.scheme, tc.authority)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseTarget(%q, %q) = %+v, %v; want %+v, ok %v", tc.scheme, tc.authority, got, err, tc.want, tc.ok)
		}
	}
}

func TestTargetAuthority(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		t    Target
		want string
	}{
		{Target{Scheme: "https", Host: "a.test", Port: 443}, "a.test"},
		{Target{Scheme: "https", Host: "a.test", Port: 80}, "a.test:80"},
		{Target{Scheme: "http", Host: "a.test", Port: 80}, "a.test"},
		{Target{Scheme: "https", Host: "2001:db8::1", Port: 443}, "[2001:db8::1]"},
		{Target{Scheme: "https", Host: "2001:db8::1", Port: 8443}, "[2001:db8::1]:8443"},
	} {
		if got := tc.t.authority(); got != tc.want {
			t.Errorf("%+v: authority %q, want %q", tc.t, got, tc.want)
		}
	}
}

func TestCheckPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/", true},
		{"/org/repo.git/info/refs", true},
		{"/@types/node", true},
		{"/a//b", true},
		{"/a/.hidden/..x", true},
		{"/a/../b", false},
		{"/a/./b", false},
		{"/a/..", false},
		{"/a/.", false},
		{`/a\..\b`, false},
	} {
		if err := checkPath(tc.path); (err == nil) != tc.ok {
			t.Errorf("checkPath(%q) = %v, want ok %v", tc.path, err, tc.ok)
		}
	}
}

func TestCheckServerName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, host string
		ok         bool
	}{
		{"git.example.test", "git.example.test", true},
		{"Git.Example.Test.", "git.example.test", true},
		{"other.test", "git.example.test", false},
		{"", "git.example.test", false},
		{"", "192.0.2.1", true},
		{"", "2001:db8::1", true},
		{"other.test", "192.0.2.1", false},
	} {
		if err := checkServerName(tc.name, tc.host); (err == nil) != tc.ok {
			t.Errorf("checkServerName(%q, %q) = %v, want ok %v", tc.name, tc.host, err, tc.ok)
		}
	}
}
