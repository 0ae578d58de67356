package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

var (
	// ErrNoBwrap is returned by [New] when the bwrap binary cannot be found or run.
	ErrNoBwrap = errors.New("bwrap not found: install bubblewrap (apt-get install bubblewrap, dnf install bubblewrap, apk add bubblewrap, pacman -S bubblewrap)")
	// ErrSandboxUnavailable is returned by [New] when bwrap runs but cannot
	// create a sandbox, usually because unprivileged user namespaces are
	// disabled (sysctl kernel.unprivileged_userns_clone=0 or
	// user.max_user_namespaces=0, or a container runtime's seccomp profile).
	ErrSandboxUnavailable = errors.New("bwrap cannot create a sandbox: user namespaces are unavailable")
)

// libDirs are the top-level directories that hold programs and libraries.
// On merged-/usr systems they are symlinks into /usr and are recreated as such.
var libDirs = []string{"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"}

// secrets are paths under /etc that the sandbox must not read even though
// /etc is visible: when the manager runs as host root, the sandbox's root
// is host root to the kernel and passes the files' permission checks. Files
// are hidden behind /dev/null, directories behind an empty read-only tmpfs.
var secrets = []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssh/ssh_host_*_key", "/etc/ssl/private"}

// cpuGrace is how many CPU seconds a process gets after SIGXCPU before SIGKILL.
const cpuGrace = 5

// sandboxEnv is the whole environment of a sandboxed command.
var sandboxEnv = [][2]string{
	{"PATH", "/usr/local/bin:/usr/bin:/bin"},
	{"HOME", "/workspace"},
	{"LANG", "C.UTF-8"},
	{"TERM", "dumb"},
	{"TMPDIR", "/tmp"},
	{"USER", "sandbox"},
}

// findBwrap resolves the bwrap binary and returns its path and version as
// (major, minor). Errors wrap [ErrNoBwrap].
func findBwrap(name string) (string, [2]int, error) {
	if name == "" {
		name = "bwrap"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", [2]int{}, fmt.Errorf("%w (looked for %s: %v)", ErrNoBwrap, name, err)
	}
	cmd := exec.Command(path, "--version")
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		return "", [2]int{}, fmt.Errorf("%w (%s --version: %v)", ErrNoBwrap, path, err)
	}
	// The output is "bubblewrap 0.8.0".
	_, v, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	parts := strings.SplitN(v, ".", 3)
	var ver [2]int
	for i := 0; i < 2 && i < len(parts); i++ {
		ver[i], _ = strconv.Atoi(parts[i])
	}
	return path, ver, nil
}

// systemArgs returns the bwrap arguments that lay out the read-only system
// tree, as found on this host.
func systemArgs() ([]string, error) {
	args := []string{"--ro-bind", "/usr", "/usr"}
	for _, dir := range libDirs {
		fi, err := os.Lstat(dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return nil, fmt.Errorf("inspect %s: %w", dir, err)
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(dir)
			if err != nil {
				return nil, fmt.Errorf("read link %s: %w", dir, err)
			}
			args = append(args, "--symlink", target, dir)
		default:
			args = append(args, "--ro-bind-try", dir, dir)
		}
	}
	args = append(args, "--ro-bind", "/etc", "/etc")
	for _, pattern := range secrets {
		paths, _ := filepath.Glob(pattern) // the patterns are valid
		for _, p := range paths {
			fi, err := os.Lstat(p)
			switch {
			case err != nil:
			case fi.Mode().IsRegular():
				args = append(args, "--ro-bind", "/dev/null", p)
			case fi.IsDir():
				args = append(args, "--tmpfs", p, "--remount-ro", p)
			}
		}
	}
	return args, nil
}

// sandboxArgs returns the bwrap options that build a session's sandbox around
// the host directory workspace; the caller appends any further options, "--"
// and the command. Keeping every option here lets one-shot calls and a
// long-lived executor share the same sandbox.
func (d *Driver) sandboxArgs(workspace string) []string {
	args := []string{
		// --unshare-all only tries a user namespace; demand one.
		"--unshare-all", "--unshare-user",
		"--die-with-parent", "--new-session",
		"--cap-drop", "ALL",
		"--hostname", "sandbox",
	}
	if d.disableUserns {
		args = append(args, "--disable-userns")
	}
	args = append(args, "--clearenv")
	for _, kv := range sandboxEnv {
		args = append(args, "--setenv", kv[0], kv[1])
	}
	args = append(args, d.system...)
	args = append(args,
		"--proc", "/proc",
		"--dev", "/dev",
		"--perms", "01777", "--size", strconv.FormatInt(d.cfg.TmpSize, 10), "--tmpfs", "/tmp",
		"--dir", "/run",
		"--bind", workspace, "/workspace",
		"--chdir", "/workspace",
		// The root is a tmpfs made by bwrap; without this, / would be writable.
		"--remount-ro", "/",
	)
	return args
}

// shellArgs returns the command line, run inside the sandbox, that applies
// the resource limits and then runs command with bash (or sh if the sandbox
// has no bash).
//
// The limits are set by /bin/sh, which is dash on Debian and bash in POSIX
// mode elsewhere. Both take -v in KiB and -f in 512-byte blocks (bash
// outside POSIX mode would use 1024-byte blocks for -f). The process limit is
// -u in bash but -p in dash, where -u is an error; in bash -p is the read-only
// pipe size, so try one then the other. Failing to set the other limits fails
// the call rather than running unconfined.
//
// ulimit sets soft and hard limits alike, and at the hard CPU limit the
// kernel sends SIGKILL. The hard CPU limit is therefore a little above the
// soft one, so a runaway command first gets SIGXCPU (exit code 152), which
// says what happened.
func (d *Driver) shellArgs(command string) []string {
	c := d.cfg
	script := fmt.Sprintf(`ulimit -S -t %d && ulimit -H -t %d && ulimit -v %d && ulimit -f %d && ulimit -n %d || exit 126
{ ulimit -u %d || ulimit -p %d; } 2>/dev/null
if [ -x /bin/bash ]; then exec /bin/bash -c "$1"; fi
exec /bin/sh -c "$1"`,
		c.CPUSeconds, c.CPUSeconds+cpuGrace, c.MemoryBytes/1024, c.FileSizeBytes/512, c.OpenFiles, c.Processes, c.Processes)
	return []string{"/bin/sh", "-c", script, "sh", command}
}
