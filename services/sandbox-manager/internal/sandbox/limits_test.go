package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"corral.dev/pkg/tool"
	"github.com/google/uuid"
)

func TestResourceLimits(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{
		CPUSeconds:    1,
		MemoryBytes:   512 << 20,
		FileSizeBytes: 1 << 20,
		OpenFiles:     256,
		TmpSize:       4 << 20,
	})

	t.Run("ulimit", func(t *testing.T) {
		t.Parallel()
		// bash (not in POSIX mode) reports -f in 1024-byte blocks, -v in KiB.
		res := bash(t, d, uuid.New(), "ulimit -St; ulimit -Ht; ulimit -v; ulimit -f; ulimit -n")
		if want := "1\n6\n524288\n1024\n256\n"; res.Output != want {
			t.Errorf("limits = %q, want %q", res.Output, want)
		}
	})

	t.Run("file size", func(t *testing.T) {
		t.Parallel()
		session := uuid.New()
		tests := []struct {
			name  string
			bytes string
			ok    bool
		}{
			{"below the limit", "900K", true},
			{"above the limit", "1536K", false},
		}
		for _, tc := range tests {
			res := bash(t, d, session, "head -c "+tc.bytes+" /dev/zero > f")
			if res.IsError == tc.ok {
				t.Errorf("%s: writing %s: %+v, want ok=%v", tc.name, tc.bytes, res, tc.ok)
			}
		}
		fi, err := os.Stat(filepath.Join(d.Workspace(tenant, session), "f"))
		if err != nil || fi.Size() > 1<<20 {
			t.Errorf("f on the host: %v, %v; want at most 1 MiB", fi, err)
		}
	})

	t.Run("cpu time", func(t *testing.T) {
		t.Parallel()
		res := run(t, d, uuid.New(), &tool.BashArgs{Command: "while :; do :; done", Timeout: 20_000})
		// SIGXCPU is signal 24.
		if res.TimedOut || res.ExitCode == nil || *res.ExitCode != 128+24 || res.Output != "Exit code 152 (CPU time limit exceeded)" {
			t.Errorf("busy loop: %+v, want killed by SIGXCPU (exit code 152)", res)
		}
	})

	t.Run("tmp size", func(t *testing.T) {
		t.Parallel()
		res := bash(t, d, uuid.New(), "head -c 900K /dev/zero > /tmp/a; head -c 900K /dev/zero > /tmp/b; head -c 900K /dev/zero > /tmp/c; head -c 900K /dev/zero > /tmp/d; head -c 900K /dev/zero > /tmp/e")
		if !res.IsError || !strings.Contains(res.Output, "No space left on device") {
			t.Errorf("filling /tmp: %+v, want No space left on device", res)
		}
	})

	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		// Reading 600 MiB into one bash variable needs more than 512 MiB.
		res := bash(t, d, uuid.New(), "x=$(head -c 600M /dev/zero | tr '\\0' a); echo ${#x}")
		if !res.IsError {
			t.Errorf("allocating 600 MiB: %+v, want a failure", res)
		}
	})
}
