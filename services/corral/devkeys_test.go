package main

import (
	"os"
	"path/filepath"
	"testing"

	"corral.dev/pkg/seal"
)

// TestDevKeysSealingKeys has corral dev make the keys that seal secrets
// at rest, egress's and the gateway's: each its own, kept in the data
// directory for the next start, and not made when the environment gives
// it.
func TestDevKeysSealingKeys(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	none := func(string) string { return "" }
	first, err := devKeys(data, none)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"CORRAL_EGRESS_VAULT_KEY": "egress-vault.key", "CORRAL_GATEWAY_WEBHOOK_KEY": "gateway-webhook.key"}
	for name, file := range files {
		if k, err := seal.Load(func(string) string { return first[name] }, name); err != nil || k == nil {
			t.Errorf("%s=%q: %v", name, first[name], err)
		}
		fi, err := os.Stat(filepath.Join(data, file))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s kept in %s: %v %v, want a file of mode 0600", name, file, fi, err)
		}
	}
	if first["CORRAL_EGRESS_VAULT_KEY"] == first["CORRAL_GATEWAY_WEBHOOK_KEY"] {
		t.Errorf("egress and the gateway got the same key")
	}
	again, err := devKeys(data, none)
	if err != nil {
		t.Fatal(err)
	}
	for name := range files {
		if again[name] != first[name] {
			t.Errorf("%s changed across starts", name)
		}
	}
	given, err := devKeys(t.TempDir(), func(k string) string {
		if k == "CORRAL_GATEWAY_WEBHOOK_KEY_FILE" {
			return "/run/secrets/webhook.key"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := given["CORRAL_GATEWAY_WEBHOOK_KEY"]; ok {
		t.Errorf("with CORRAL_GATEWAY_WEBHOOK_KEY_FILE given, corral dev made one: %q", k)
	}
}
