package sandboxmanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/upload"
)

// layoutFiles lays out in dir, a session's workspace, the files user of
// tenant uploaded (corral run --dir) under ref, "sha256:<hex>" of their
// list, and returns how many regular files it wrote and their bytes. Each
// file is read from the user's uploads and checked against its hash; no
// other user's upload is found, nor any tenant's snapshot. dir is made anew, as a restored snapshot's is, so that the
// sandbox user is handed the whole of it when its sandbox starts.
//
// An upload that is missing, incomplete, does not match its hash, names a
// path it may not, or is over the workspace quota (WorkspaceFiles,
// WorkspaceBytes) fails the session ([failPrepare]), saying why; any other
// error is the node's, and is worth trying again.
func (s *Service) layoutFiles(ctx context.Context, tenant, user, ref, dir string) (files int, bytes int64, err error) {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	chunks, err := s.js.Stream(rctx, bus.StreamUploads)
	if err != nil {
		return 0, 0, fmt.Errorf("open stream %s: %w", bus.StreamUploads, err)
	}
	b := upload.Bounds{Entries: s.cfg.WorkspaceFiles, Bytes: s.cfg.WorkspaceBytes}
	err = os.RemoveAll(dir)
	if err == nil {
		// The tenant's directory only lets through, as the driver makes
		// it: the sandboxes' user passes it to reach its workspace.
		err = os.MkdirAll(filepath.Dir(dir), 0o711)
	}
	if err == nil {
		files, bytes, err = upload.Layout(ctx, chunks, tenant, user, ref, dir, b)
	}
	if err != nil {
		// Nothing half laid out stays behind.
		_ = os.RemoveAll(dir)
	}
	var quota *upload.QuotaError
	switch {
	case errors.As(err, &quota) && b.Entries > 0 && quota.Entries > b.Entries:
		return 0, 0, failPrepare("the uploaded files are over the workspace quota: %d files, directories and symlinks, more than CORRAL_SANDBOX_WORKSPACE_FILES (%d)", quota.Entries, b.Entries)
	case errors.As(err, &quota):
		return 0, 0, failPrepare("the uploaded files are over the workspace quota: %d bytes, more than CORRAL_SANDBOX_WORKSPACE_BYTES (%d)", quota.Bytes, b.Bytes)
	case errors.Is(err, upload.ErrRefused):
		return 0, 0, failPrepare("%s", err.Error())
	case err != nil:
		return 0, 0, fmt.Errorf("lay out the uploaded files: %w", err)
	}
	return files, bytes, nil
}
