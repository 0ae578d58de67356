package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A batch job's "dir" is relative to the batch file's directory; an
// absolute one is kept.
func TestBatchDirIsTheFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "jobs.jsonl")
	lines := `{"id": "a", "prompt": "p", "dir": "project"}` + "\n" +
		`{"id": "b", "prompt": "p", "dir": "/srv/code.tar.gz"}` + "\n" +
		`{"id": "c", "prompt": "p"}` + "\n"
	if err := os.WriteFile(file, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	jobs, err := readJobsFile(file, jobDefaults{tenant: "acme", user: "ada"})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{filepath.Join(dir, "project"), "/srv/code.tar.gz", ""} {
		if jobs[i].dir != want {
			t.Errorf("job %s: dir %q, want %q", jobs[i].id, jobs[i].dir, want)
		}
	}
}

func TestUploadNumbers(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 2345: "2,345", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 1000: "1.0 kB", 12_345_678: "12.3 MB", 999_999: "1.0 MB", 1_100_000: "1.1 MB", 5 << 40: "5.5 TB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
