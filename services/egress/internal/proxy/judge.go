package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"corral.dev/pkg/egressapi"
)

// Decisions a [Verdict] may carry. Anything else is taken as [Deny].
const (
	Allow   = "allow"
	Deny    = "deny"
	Approve = "approve"
)

// Target is what a request asks to reach, as the [Judge] sees it.
type Target struct {
	// Scheme is "http" for plain HTTP and "https" for a CONNECT and the
	// requests read inside one.
	Scheme string
	// Host is lowercase, without the port or a trailing dot; an IPv6
	// address has no brackets.
	Host string
	Port int
	// Method and Path (decoded, without the query) are "" when not
	// visible: for a CONNECT, judged before its content is read. In an
	// [Entry] for a tunnel or a refused CONNECT, Method is "CONNECT".
	Method, Path string
}

// Verdict is a [Judge]'s decision on a [Target].
type Verdict struct {
	// Decision is [Allow], [Deny] or [Approve].
	Decision string
	// Rule names the rule that decided, "" when none did (a denial by
	// default).
	Rule   string
	Reason string
	// Known is false when the decision depends on the method or path and
	// the target did not show them: the proxy then reads the requests and
	// asks again for each.
	Known bool
}

// Judge decides where a sandbox may go. It must be safe for concurrent
// use and fast: it is asked once per CONNECT and once per request read.
type Judge interface {
	Judge(id egressapi.Identity, t Target) Verdict
}

// hostPort returns t's address to dial ("host:port").
func (t Target) hostPort() string {
	return net.JoinHostPort(t.Host, strconv.Itoa(t.Port))
}

// authority returns t's host as a URL names it: without the port when it
// is the scheme's default.
func (t Target) authority() string {
	if t.Port == defaultPort(t.Scheme) {
		if strings.Contains(t.Host, ":") {
			return "[" + t.Host + "]"
		}
		return t.Host
	}
	return t.hostPort()
}

func defaultPort(scheme string) int {
	if scheme == "http" {
		return 80
	}
	return 443
}

// parseTarget makes the target of scheme from an authority ("host" or
// "host:port"), as a CONNECT or an absolute URL names it.
func parseTarget(scheme, authority string) (Target, error) {
	host, port := authority, defaultPort(scheme)
	if h, p, err := net.SplitHostPort(authority); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Target{}, fmt.Errorf("bad port in %q", authority)
		}
		host, port = h, n
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if !validHost(host) {
		return Target{}, fmt.Errorf("bad host in %q", authority)
	}
	return Target{Scheme: scheme, Host: host, Port: port}, nil
}

// validHost reports whether host is an IP address or a DNS name of
// letters, digits, hyphens and underscores.
func validHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return !strings.Contains(host, "%") // no IPv6 zones
	}
	if host == "" || len(host) > 253 {
		return false
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// errPath is why a path is refused before it is judged.
var errPath = errors.New(`path has dot segments, backslashes, ";" or a "%" left after decoding, which servers may read differently from the policy`)

// checkPath refuses a decoded path that a server could resolve to
// another than the one judged: one with "." or ".." segments, or
// backslashes, which some servers take for slashes.
func checkPath(p string) error {
	// A backslash, a "%" left after decoding (encoded twice) or a ";"
	// (path parameters, as in "..;") are forms some servers normalise
	// into another path than the one judged.
	if strings.ContainsAny(p, `\%;`) {
		return errPath
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "." || seg == ".." {
			return errPath
		}
	}
	return nil
}
