package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dataLockFile is the file in corral dev's data directory that the
// running corral dev holds locked, with its pid in it.
const dataLockFile = "corral.lock"

// lockData locks the data directory for this process, so that two corral
// dev never run over one store. The lock is an flock on dataLockFile,
// released when the returned file is closed or the process ends, however
// it ends; a lock file left behind by a process that died locks nothing.
// A directory another process holds is refused with its pid.
func lockData(data string) (*os.File, error) {
	path := filepath.Join(data, dataLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", data, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = fmt.Sprintf("another corral dev (pid %d)", pid)
			}
		}
		return nil, fmt.Errorf(`%s is already running over %s (it holds %s).
Stop it first, or give this one its own state with --data DIR`, holder, data, path)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
