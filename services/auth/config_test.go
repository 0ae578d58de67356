package auth

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"corral.dev/pkg/credential"
)

func TestLoadConfig(t *testing.T) {
	seed, pub, err := credential.NewIssuer()
	if err != nil {
		t.Fatal(err)
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	userSeed, err := user.Seed()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		env     map[string]string
		ttl     time.Duration
		account string
		err     string // a part of the error; empty: none
	}{
		{"defaults", map[string]string{"CORRAL_AUTH_ISSUER_SEED": seed}, DefaultTTL, "CLIENTS", ""},
		{"set", map[string]string{"CORRAL_AUTH_ISSUER_SEED": seed, "CORRAL_AUTH_TTL": "90s", "CORRAL_AUTH_ACCOUNT": "CLIENTS"}, 90 * time.Second, "CLIENTS", ""},
		{"no seed", map[string]string{}, 0, "", "CORRAL_AUTH_ISSUER_SEED is not set"},
		{"not a seed", map[string]string{"CORRAL_AUTH_ISSUER_SEED": "SAnotaseed"}, 0, "", "CORRAL_AUTH_ISSUER_SEED: not an nkeys seed"},
		{"public key", map[string]string{"CORRAL_AUTH_ISSUER_SEED": pub}, 0, "", "CORRAL_AUTH_ISSUER_SEED: not an nkeys seed"},
		{"user seed", map[string]string{"CORRAL_AUTH_ISSUER_SEED": string(userSeed)}, 0, "", "CORRAL_AUTH_ISSUER_SEED: not an account seed"},
		{"bad TTL", map[string]string{"CORRAL_AUTH_ISSUER_SEED": seed, "CORRAL_AUTH_TTL": "10"}, 0, "", "CORRAL_AUTH_TTL"},
		{"TTL too short", map[string]string{"CORRAL_AUTH_ISSUER_SEED": seed, "CORRAL_AUTH_TTL": "500ms"}, 0, "", "CORRAL_AUTH_TTL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := LoadConfig(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				if s := tc.env["CORRAL_AUTH_ISSUER_SEED"]; s != "" && strings.Contains(err.Error(), s) {
					t.Errorf("the error holds the seed: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.TTL != tc.ttl || cfg.Account != tc.account || cfg.Issuer.Public() != pub {
				t.Errorf("ttl, account, issuer = %s, %s, %s; want %s, %s, %s", cfg.TTL, cfg.Account, cfg.Issuer.Public(), tc.ttl, tc.account, pub)
			}
			for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg)} {
				if strings.Contains(s, seed) {
					t.Errorf("the configuration prints its seed: %s", s)
				}
			}
		})
	}
}

// TestParseNewIssuer checks that the service takes the issuer corral
// makes for it.
func TestParseNewIssuer(t *testing.T) {
	seed, pub, err := credential.NewIssuer()
	if err != nil {
		t.Fatal(err)
	}
	iss, err := ParseIssuer(seed)
	if err != nil {
		t.Fatal(err)
	}
	if iss.Public() != pub {
		t.Errorf("public key of the seed = %s, want %s", iss.Public(), pub)
	}
}
