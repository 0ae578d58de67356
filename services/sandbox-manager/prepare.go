package sandboxmanager

import (
	"errors"
	"fmt"
)

// prepareError is a failure of a workspace's preparation that is the
// session's, not the node's: an unknown ref, a forge refusing the
// credentials, files over the workspace's quota, an upload that does not
// match its hash, an environment whose setup failed. The session fails
// with its message; trying again would fail again.
type prepareError struct{ msg string }

func (e *prepareError) Error() string { return e.msg }

// failPrepare returns a [prepareError].
func failPrepare(format string, args ...any) error {
	return &prepareError{msg: fmt.Sprintf(format, args...)}
}

// isPrepareError reports whether err is the session's (see [prepareError]).
func isPrepareError(err error) bool {
	var pe *prepareError
	return errors.As(err, &pe)
}
