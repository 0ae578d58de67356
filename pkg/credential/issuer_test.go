package credential

import (
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

func TestNewIssuer(t *testing.T) {
	seed, pub, err := NewIssuer()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(seed, "SA") || !nkeys.IsValidPublicAccountKey(pub) {
		t.Fatalf("seed %.2s..., public key %s: want an account's", seed, pub)
	}
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := kp.PublicKey(); got != pub {
		t.Errorf("public key of the seed = %s, want %s", got, pub)
	}
	if _, other, _ := NewIssuer(); other == pub {
		t.Error("two issuers with one key")
	}
}
