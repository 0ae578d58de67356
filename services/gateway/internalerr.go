package gateway

import (
	"net/http"

	"corral.dev/services/gateway/internal/wire"
)

// internal logs err, a failure of the gateway or of what it asked (a
// subject, a stream, a server's words), under the request's ID rid, and
// returns what the client is told of it: that ID, and nothing of err,
// which may name what no client should see (another service's subjects,
// the server's addresses).
func (s *Service) internal(r *http.Request, rid string, err error) *apiError {
	s.log.WarnContext(r.Context(), "api request failed", "method", r.Method, "path", r.URL.Path, "request_id", rid, "err", err)
	return &apiError{http.StatusInternalServerError, wire.APIError, internalMessage(rid)}
}

// internalMessage is what a client is told of a failure logged under rid.
func internalMessage(rid string) string {
	return "the gateway failed to answer; its operators can find why in its log under request ID " + rid
}
