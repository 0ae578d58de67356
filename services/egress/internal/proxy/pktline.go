package proxy

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// maxPktLine is the longest pkt-line git sends, its 4-byte length included.
const maxPktLine = 65520

// readPush reads the ref updates a git push's request body starts with
// (gzipped when the request says so), reading at most limit bytes of
// body. It returns them with what it read of the body, which the rest of
// the body follows.
func readPush(body io.Reader, gzipped bool, limit int64) (refs []RefUpdate, caps string, prefix []byte, err error) {
	var raw bytes.Buffer
	var r io.Reader = io.TeeReader(io.LimitReader(body, limit), &raw)
	if gzipped {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, "", raw.Bytes(), fmt.Errorf("gzip: %w", err)
		}
		// What it inflates to is bounded too.
		r = io.LimitReader(zr, limit)
	}
	refs, caps, err = readCommands(r)
	if errors.Is(err, io.ErrUnexpectedEOF) && int64(raw.Len()) == limit {
		err = fmt.Errorf("they do not end within %d bytes", limit)
	}
	return refs, caps, raw.Bytes(), err
}

// readCommands reads the update requests of git's receive-pack protocol
// up to their flush-pkt: optional "shallow <oid>" lines, then commands
// "<old-oid> <new-oid> <ref>", the first followed by NUL and the
// capabilities. A signed push (push-cert) is not understood.
func readCommands(r io.Reader) (refs []RefUpdate, caps string, err error) {
	buf := make([]byte, maxPktLine)
	for {
		if _, err := io.ReadFull(r, buf[:4]); err != nil {
			return nil, "", noEOF(err)
		}
		n, err := strconv.ParseUint(string(buf[:4]), 16, 16)
		if err != nil {
			return nil, "", fmt.Errorf("bad pkt-line length %q", buf[:4])
		}
		if n == 0 {
			return refs, caps, nil
		}
		if n <= 4 || n > maxPktLine {
			return nil, "", fmt.Errorf("bad pkt-line length %d", n)
		}
		line := buf[4:n]
		if _, err := io.ReadFull(r, line); err != nil {
			return nil, "", noEOF(err)
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		if len(refs) == 0 {
			if bytes.HasPrefix(line, []byte("shallow ")) {
				continue
			}
			var c []byte
			line, c, _ = bytes.Cut(line, []byte{0})
			caps = string(c)
		}
		u, ok := parseCommand(string(line))
		if !ok {
			return nil, "", fmt.Errorf("not a ref update: %.80q", line)
		}
		refs = append(refs, u)
	}
}

// parseCommand parses "<old-oid> <new-oid> <ref>".
func parseCommand(line string) (RefUpdate, bool) {
	var u RefUpdate
	var ok1, ok2 bool
	u.Old, line, ok1 = strings.Cut(line, " ")
	u.New, u.Ref, ok2 = strings.Cut(line, " ")
	if !ok1 || !ok2 || !objectID(u.Old) || !objectID(u.New) || len(u.Old) != len(u.New) || u.Ref == "" {
		return RefUpdate{}, false
	}
	return u, true
}

// objectID reports whether s is a hex SHA-1 or SHA-256 object ID.
func objectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// noEOF reports a body ending among the ref updates as unexpected.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
