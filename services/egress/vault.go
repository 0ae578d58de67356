package egress

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/seal"
	"corral.dev/services/egress/internal/proxy"
)

// sealed is a vault as kept in the vaults bucket: its bindings in the
// clear, its secret sealed with the service's key ([seal.Sealer]), with
// the key it is kept under as additional data, so that a sealed secret
// copied under another tenant's key does not open.
type sealed struct {
	Vault  egressapi.Vault `json:"vault"`
	Sealed []byte          `json:"sealed"`
}

// vaults keeps every tenant's vaults as the bucket has them, watched, and
// opens their secrets when a request needs one.
type vaults struct {
	kv  jetstream.KeyValue
	box *seal.Sealer
	log *slog.Logger

	mu     sync.Mutex
	items  map[string]*sealed // by key
	synced chan struct{}      // closed once the bucket's values are in
}

func newVaults(kv jetstream.KeyValue, key []byte, log *slog.Logger) (*vaults, error) {
	box, err := seal.New(key)
	if err != nil {
		return nil, err
	}
	return &vaults{kv: kv, box: box, log: log, items: make(map[string]*sealed), synced: make(chan struct{})}, nil
}

// vaultKey is where a vault is kept: <tenant>.t.<name> for the tenant's
// own, <tenant>.u.<user, base64url>.<name> for a user's.
func vaultKey(tenant, user, name string) string {
	if user == "" {
		return tenant + ".t." + name
	}
	return tenant + ".u." + base64.RawURLEncoding.EncodeToString([]byte(user)) + "." + name
}

func (v *vaults) open(key string, s *sealed) (string, error) {
	secret, err := v.box.Open(s.Sealed, key)
	if err != nil {
		return "", fmt.Errorf("vault %s: %w", key, err)
	}
	return secret, nil
}

// watch keeps items in step with the bucket until ctx ends.
func (v *vaults) watch(ctx context.Context) error {
	for ctx.Err() == nil {
		w, err := v.kv.WatchAll(ctx)
		if err != nil {
			v.log.WarnContext(ctx, "watch vaults", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for e := range w.Updates() {
			v.mu.Lock()
			switch {
			case e == nil:
				select {
				case <-v.synced:
				default:
					close(v.synced)
				}
			case e.Operation() == jetstream.KeyValuePut:
				var s sealed
				if err := json.Unmarshal(e.Value(), &s); err == nil {
					v.items[e.Key()] = &s
				}
			default:
				delete(v.items, e.Key())
			}
			v.mu.Unlock()
		}
		_ = w.Stop()
	}
	return nil
}

// match is a vault as matching found it, under its key.
type match struct {
	key string
	*sealed
}

// matching returns the vaults a session of id may send to host and path,
// the user's own first, then the tenant's, each by name: as they were
// when it looked, whatever the watch changes after. A session that names
// groups ([egressapi.Identity].Vaults) gets the tenant's vaults of those
// groups alone; an archived vault has no secret left to send.
func (v *vaults) matching(ctx context.Context, id egressapi.Identity, host, path string, anyPath bool) ([]match, error) {
	select {
	case <-v.synced:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	own, tenant := vaultKey(id.Tenant, id.User, ""), id.Tenant+".t."
	v.mu.Lock()
	defer v.mu.Unlock()
	var mine, theirs []match
	for k, s := range v.items {
		if !hostMatches(s.Vault.Hosts, host) || !anyPath && !pathMatches(s.Vault.Paths, path) || !s.Vault.ArchivedAt.IsZero() {
			continue
		}
		if id.Vaults != nil && (s.Vault.Group == "" || !slices.Contains(id.Vaults, s.Vault.Group)) {
			continue
		}
		switch {
		case id.User != "" && strings.HasPrefix(k, own):
			mine = append(mine, match{k, s})
		case strings.HasPrefix(k, tenant):
			theirs = append(theirs, match{k, s})
		}
	}
	byKey := func(a, b match) int { return strings.Compare(a.key, b.key) }
	slices.SortFunc(mine, byKey)
	slices.SortFunc(theirs, byKey)
	return append(mine, theirs...), nil
}

// Bound reports whether a vault of id may go to host: see [proxy.Credentials].
func (v *vaults) Bound(ctx context.Context, id egressapi.Identity, host string) (bool, error) {
	keys, err := v.matching(ctx, id, host, "", true)
	return len(keys) > 0, err
}

// For returns what to inject into a request of id to host and path: the
// first matching vault's secret, as it says. See [proxy.Credentials].
func (v *vaults) For(ctx context.Context, id egressapi.Identity, host, path string) (proxy.Injection, error) {
	found, err := v.matching(ctx, id, host, path, false)
	if err != nil || len(found) == 0 {
		return proxy.Injection{}, err
	}
	s := found[0].sealed
	secret, err := v.open(found[0].key, s)
	if err != nil {
		return proxy.Injection{}, err
	}
	in := s.Vault.Inject
	if in.BasicUser != "" {
		basic := base64.StdEncoding.EncodeToString([]byte(in.BasicUser + ":" + secret))
		return proxy.Injection{
			Headers: map[string]string{"Authorization": "Basic " + basic},
			Redact:  []string{secret, basic},
		}, nil
	}
	return proxy.Injection{Headers: map[string]string{in.Header: in.Prefix + secret}, Redact: []string{secret}}, nil
}

// hostMatches reports whether host is one of hosts: a name as written, or
// a name under the suffix of a "*.suffix".
func hostMatches(hosts []string, host string) bool {
	for _, h := range hosts {
		if suffix, ok := strings.CutPrefix(h, "*."); ok {
			if strings.HasSuffix(host, "."+suffix) {
				return true
			}
		} else if h == host {
			return true
		}
	}
	return false
}

// pathMatches reports whether path starts with one of prefixes, or there
// are none.
func pathMatches(prefixes []string, path string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

var (
	vaultName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	hostName  = regexp.MustCompile(`^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)
	header    = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
)

// errInvalid is a request the vault API refuses as it is.
var errInvalid = errors.New("invalid")

// check says what is wrong with a vault as a client asks for it.
func check(v egressapi.Vault, secret string, creating bool) error {
	if !vaultName.MatchString(v.Name) {
		return fmt.Errorf("%w: name %q: want 1 to 64 of a-z, 0-9, - and _, starting with a letter or digit", errInvalid, v.Name)
	}
	if err := checkAbout(v); err != nil {
		return err
	}
	if !creating {
		return nil
	}
	if v.Group != "" && !vaultName.MatchString(v.Group) {
		return fmt.Errorf("%w: group %q: want 1 to 64 of a-z, 0-9, - and _, starting with a letter or digit", errInvalid, v.Group)
	}
	if len(v.Hosts) == 0 {
		return fmt.Errorf("%w: vault %s binds no host: give the hosts its secret may be sent to", errInvalid, v.Name)
	}
	for _, h := range v.Hosts {
		if !hostName.MatchString(h) || !strings.Contains(strings.TrimPrefix(h, "*."), ".") {
			return fmt.Errorf("%w: host %q: want a lowercase DNS name such as github.com, or *.example.com", errInvalid, h)
		}
	}
	for _, p := range v.Paths {
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("%w: path %q: want an absolute path prefix such as /org/", errInvalid, p)
		}
	}
	in := v.Inject
	switch {
	case (in.Header == "") == (in.BasicUser == ""):
		return fmt.Errorf("%w: vault %s: inject either a header (--header) or basic authentication (--basic-user), one of the two", errInvalid, v.Name)
	case in.Header != "" && !header.MatchString(in.Header):
		return fmt.Errorf("%w: header %q is not a header name", errInvalid, in.Header)
	case strings.ContainsAny(in.Prefix+in.BasicUser, "\r\n\x00") || in.BasicUser != "" && strings.Contains(in.BasicUser, ":"):
		return fmt.Errorf("%w: vault %s: the prefix and user may hold no line break, and the user no colon", errInvalid, v.Name)
	}
	return checkSecret(secret)
}

// Bounds of what a client says about a vault.
const (
	maxLabel    = 255
	maxMetadata = 16
	maxMetaKey  = 64
	maxMetaVal  = 512
)

// checkAbout says what is wrong with the label and metadata of v.
func checkAbout(v egressapi.Vault) error {
	if len(v.Label) > maxLabel || strings.ContainsAny(v.Label, "\r\n\x00") {
		return fmt.Errorf("%w: label: want at most %d bytes on one line", errInvalid, maxLabel)
	}
	if len(v.Metadata) > maxMetadata {
		return fmt.Errorf("%w: metadata: %d pairs, want at most %d", errInvalid, len(v.Metadata), maxMetadata)
	}
	for k, val := range v.Metadata {
		if k == "" || len(k) > maxMetaKey || len(val) > maxMetaVal {
			return fmt.Errorf("%w: metadata %q: want keys of 1 to %d bytes and values of at most %d", errInvalid, k, maxMetaKey, maxMetaVal)
		}
	}
	return nil
}

func checkSecret(secret string) error {
	if secret == "" || len(secret) > 8<<10 || strings.ContainsAny(secret, "\r\n\x00") {
		return fmt.Errorf("%w: the secret must be 1 to 8192 bytes on one line", errInvalid)
	}
	return nil
}
