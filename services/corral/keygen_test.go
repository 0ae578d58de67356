package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"strings"
	"testing"

	"corral.dev/pkg/event"
)

func TestApprovalsKeygen(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"approvals", "keygen"}, func(string) string { return "" }, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("line %q is not NAME=value", line)
		}
		vars[k] = v
	}
	key, err := event.DecodePrivateKey(vars["CORRAL_APPROVAL_SIGNING_KEY"])
	if err != nil {
		t.Fatal(err)
	}
	pub, err := event.DecodePublicKey(vars["CORRAL_APPROVAL_PUBLIC_KEY"])
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(key.Public()) {
		t.Error("the public key is not the signing key's")
	}
	if sig := ed25519.Sign(key, []byte("x")); !ed25519.Verify(pub, []byte("x"), sig) {
		t.Error("a signature does not verify")
	}
}
