package credential

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// generatedMark ends the hand-written head of deploy/nats.conf; what
// follows it is NATSConfig's.
const generatedMark = "# writes it again.\n"

// TestDeployedNATSConfig checks that deploy/nats.conf holds what
// NATSConfig renders with the deployment's variables: the users,
// permissions, accounts and imports corral dev and the tests run with.
// CORRAL_UPDATE_DEPLOY=1 writes it.
func TestDeployedNATSConfig(t *testing.T) {
	file := filepath.Join("..", "..", "deploy", "nats.conf")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	head, got, ok := strings.Cut(string(b), generatedMark)
	if !ok {
		t.Fatalf("%s: no line %q", file, generatedMark)
	}
	var want bytes.Buffer
	want.WriteString("\n")
	if err := NATSConfig(&want, ConfigVariable, "$CORRAL_AUTH_ISSUER"); err != nil {
		t.Fatal(err)
	}
	if got == want.String() {
		return
	}
	if os.Getenv("CORRAL_UPDATE_DEPLOY") != "" {
		if err := os.WriteFile(file, []byte(head+generatedMark+want.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is not what pkg/credential says (CORRAL_UPDATE_DEPLOY=1 writes it):\n%s", file, want.String())
}
