package bus

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// Setup tries again when the server cannot place a replicated stream for
// a server offline (a cluster forming), and not when it lacks servers.
func TestPeerOffline(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 500, ErrorCode: errNoSuitablePeers, Description: "no suitable peers for placement, peer offline"}, true},
		{&jetstream.APIError{Code: 500, ErrorCode: errNoSuitablePeers, Description: "no suitable peers for placement, insufficient resources"}, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}, false},
		{fmt.Errorf("connection closed"), false},
	}
	for _, tc := range tests {
		err := setupError("kv placements", tc.err)
		if got := peerOffline(err); got != tc.want {
			t.Errorf("peerOffline(%v) = %v, want %v", err, got, tc.want)
		}
	}
}
