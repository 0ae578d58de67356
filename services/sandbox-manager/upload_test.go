package sandboxmanager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/upload"
)

// The files a user uploaded are laid out in a workspace; what is the
// upload's own fault (another user's upload, a content that does not
// match its hash, files over the workspace's quota, named by its
// setting) fails the session, saying why; what is the node's does not.
func TestLayoutFiles(t *testing.T) {
	_, _, js := natstest.Run(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := t.TempDir()
	for name, body := range map[string]string{"main.go": "package main\n", "cmd/run.sh": "#!/bin/sh\n", "README": "read me\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ref, _, err := upload.Upload(ctx, js, "acme", "ada", src)
	if err != nil {
		t.Fatal(err)
	}
	svc := newNode(t, js, nil)
	t.Cleanup(svc.driver.Close)

	dir := filepath.Join(t.TempDir(), "acme", "session")
	files, bytes, err := svc.layoutFiles(ctx, "acme", "ada", ref, dir)
	if err != nil || files != 3 || bytes != int64(len("package main\n#!/bin/sh\nread me\n")) {
		t.Fatalf("layout: %d files, %d bytes, %v; want 3 files", files, bytes, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cmd", "run.sh")); err != nil || string(b) != "#!/bin/sh\n" {
		t.Errorf("cmd/run.sh: %q, %v", b, err)
	}

	// carol's upload, whose main.go she then replaced, as a client could.
	carolRef, _, err := upload.Upload(ctx, js, "acme", "carol", src)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("package main\n"))
	if _, err := js.Publish(ctx, bus.UploadSubject("acme", bus.UserToken("carol"), hex.EncodeToString(sum[:]), 0), []byte("package evil\n")); err != nil {
		t.Fatal(err)
	}

	refused := []struct {
		name, user, ref string
		env             map[string]string
		want            string
	}{
		{"another user's", "bob", ref, nil, "the file list " + ref + " is not uploaded (uploads are kept 7 days, for the user who uploaded them alone); run the command again"},
		{"changed", "carol", carolRef, nil, "upload of main.go is incomplete or does not match its hash; run the command again"},
		{"too many files", "ada", ref, map[string]string{"CORRAL_SANDBOX_WORKSPACE_FILES": "3"},
			"the uploaded files are over the workspace quota: 4 files, directories and symlinks, more than CORRAL_SANDBOX_WORKSPACE_FILES (3)"},
		{"too many bytes", "ada", ref, map[string]string{"CORRAL_SANDBOX_WORKSPACE_BYTES": "20"},
			"the uploaded files are over the workspace quota: 31 bytes, more than CORRAL_SANDBOX_WORKSPACE_BYTES (20)"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			node := svc
			if tc.env != nil {
				node = newNode(t, js, tc.env)
				t.Cleanup(node.driver.Close)
			}
			_, _, err := node.layoutFiles(ctx, "acme", tc.user, tc.ref, filepath.Join(t.TempDir(), "w"))
			if !isPrepareError(err) || err.Error() != tc.want {
				t.Errorf("layout: %v (the session's: %v), want the session's: %s", err, isPrepareError(err), tc.want)
			}
		})
	}

	// A workspace that cannot be made is the node's trouble, not the
	// upload's.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = svc.layoutFiles(ctx, "acme", "ada", ref, filepath.Join(file, "w"))
	if err == nil || isPrepareError(err) || !strings.Contains(err.Error(), "lay out the uploaded files") {
		t.Errorf("layout under a file: %v, want the node's error", err)
	}
}
