package seal

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sealer(t *testing.T, key []byte) *Sealer {
	t.Helper()
	s, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOpensWhatEgressSealed opens a secret as the egress service sealed
// its vaults' before this package: the format kept at rest is the same.
func TestOpensWhatEgressSealed(t *testing.T) {
	t.Parallel()
	sealed, _ := base64.StdEncoding.DecodeString("AQEBAQEBAQEBAQEBEYn56OOMj3y0oMO0Rgtbos4NQn282tEidp8=")
	got, err := sealer(t, bytes.Repeat([]byte{7}, 32)).Open(sealed, "acme.t.git")
	if err != nil || got != "ghp_s3cret" {
		t.Errorf("open: %q %v, want ghp_s3cret", got, err)
	}
}

// TestSealOpensOnlyWhereKept seals a secret: it opens where it was sealed
// to be kept, with the key, and nowhere else, with no other key, and not
// once altered.
func TestSealOpensOnlyWhereKept(t *testing.T) {
	t.Parallel()
	s := sealer(t, bytes.Repeat([]byte{1}, 32))
	sealed := s.Seal("whsec_abc", "acme.wh_1")
	if bytes.Contains(sealed, []byte("whsec_abc")) {
		t.Fatalf("sealed %q holds the secret", sealed)
	}
	if again := s.Seal("whsec_abc", "acme.wh_1"); bytes.Equal(again, sealed) {
		t.Errorf("two seals of one secret are the same: the nonce is not fresh")
	}
	if got, err := s.Open(sealed, "acme.wh_1"); err != nil || got != "whsec_abc" {
		t.Errorf("open: %q %v", got, err)
	}
	altered := bytes.Clone(sealed)
	altered[len(altered)-1] ^= 1
	for name, open := range map[string]func() (string, error){
		"elsewhere": func() (string, error) { return s.Open(sealed, "acme.wh_2") },
		"other key": func() (string, error) { return sealer(t, bytes.Repeat([]byte{2}, 32)).Open(sealed, "acme.wh_1") },
		"altered":   func() (string, error) { return s.Open(altered, "acme.wh_1") },
	} {
		if got, err := open(); !errors.Is(err, ErrNotOpen) {
			t.Errorf("%s: %q %v, want ErrNotOpen", name, got, err)
		}
	}
	if _, err := s.Open(sealed[:5], "acme.wh_1"); err == nil {
		t.Errorf("a sealed secret cut short opens")
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	key := NewKey()
	file := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(file, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    string // the key in base64; "" for none
		wantErr string
	}{
		{name: "unset"},
		{name: "value", env: map[string]string{"K": key}, want: key},
		{name: "file", env: map[string]string{"K_FILE": file}, want: key},
		{name: "short", env: map[string]string{"K": base64.StdEncoding.EncodeToString(make([]byte, 16))}, wantErr: "K: want 32 bytes"},
		{name: "not base64", env: map[string]string{"K": "not a key"}, wantErr: "K: want 32 bytes"},
		{name: "missing file", env: map[string]string{"K_FILE": file + ".none"}, wantErr: "K_FILE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Load(env(tc.env), "K")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || base64.StdEncoding.EncodeToString(got) != tc.want && (got != nil || tc.want != "") {
				t.Errorf("got %x %v, want %s", got, err, tc.want)
			}
		})
	}
	if _, err := New(make([]byte, 16)); err == nil {
		t.Errorf("a 16-byte key is taken")
	}
}
