package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"slices"
	"strings"
	"testing"

	"corral.dev/pkg/event"
)

func TestKeygen(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		pairs [][2]string
	}{
		{[]string{"approvals", "keygen"}, [][2]string{{"CORRAL_APPROVAL_SIGNING_KEY", "CORRAL_APPROVAL_PUBLIC_KEY"}}},
		{[]string{"keygen"}, [][2]string{{"CORRAL_APPROVAL_SIGNING_KEY", "CORRAL_APPROVAL_PUBLIC_KEY"}, {"CORRAL_CALL_SIGNING_KEY", "CORRAL_CALL_PUBLIC_KEY"}}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), tc.args, func(string) string { return "" }, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			vars := map[string]string{}
			var names []string
			for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
				k, v, ok := strings.Cut(line, "=")
				if !ok {
					t.Fatalf("line %q is not NAME=value", line)
				}
				vars[k] = v
				names = append(names, k)
			}
			var want []string
			var keys []ed25519.PrivateKey
			for _, pair := range tc.pairs {
				want = append(want, pair[0], pair[1])
				key, err := event.DecodePrivateKey(vars[pair[0]])
				if err != nil {
					t.Fatal(err)
				}
				pub, err := event.DecodePublicKey(vars[pair[1]])
				if err != nil {
					t.Fatal(err)
				}
				if !pub.Equal(key.Public()) {
					t.Errorf("%s is not %s's public half", pair[1], pair[0])
				}
				if sig := ed25519.Sign(key, []byte("x")); !ed25519.Verify(pub, []byte("x"), sig) {
					t.Error("a signature does not verify")
				}
				keys = append(keys, key)
			}
			if !slices.Equal(names, want) {
				t.Errorf("printed %v, want %v", names, want)
			}
			if len(keys) == 2 && keys[0].Equal(keys[1]) {
				t.Error("the two pairs are the same key")
			}
		})
	}
}
