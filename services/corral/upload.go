package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/upload"
)

// uploadDir uploads the folder or archive dir for a new session of user
// of tenant, says on stderr what it found and sent, and returns the ref
// the session's request names it by.
func (e *env) uploadDir(ctx context.Context, js jetstream.JetStream, tenant, user, dir string) (string, error) {
	ref, st, err := upload.Upload(ctx, js, tenant, user, dir)
	if err != nil {
		return "", fmt.Errorf("upload %s: %w", dir, err)
	}
	fmt.Fprintf(e.stderr, "uploaded %s: %s files, %s (%s files, %s sent)\n",
		dir, thousands(int64(st.Files)), humanBytes(st.Bytes), thousands(int64(st.Blobs)), humanBytes(st.Sent))
	return ref, nil
}

// thousands writes n with a comma between each group of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	sign := ""
	if n < 0 {
		sign, s = "-", s[1:]
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return sign + s
}

// humanBytes writes n bytes in decimal units, to a tenth: 12.3 MB.
func humanBytes(n int64) string {
	if n < 1000 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, unit := range []string{"kB", "MB", "GB", "TB"} {
		v /= 1000
		if v < 999.95 || unit == "TB" {
			return fmt.Sprintf("%.1f %s", v, unit)
		}
	}
	return ""
}
