// Package sandbox runs the model's tool calls for a session: Bash in a
// bubblewrap sandbox, and Read, Write, Edit, Glob and Grep on the session's
// workspace directory from the manager's side.
//
// Each session has a workspace, a host directory Dir/<tenant>/<session> that
// the sandbox sees as /workspace, its only writable tree apart from a
// private /tmp and /dev/shm. The sandbox has new user, PID, mount, IPC, UTS
// and network namespaces (no network at all), a read-only view of /usr,
// /etc and the library directories, a private /proc and a read-only /dev,
// no capabilities, a seccomp filter (see seccomp.go), and an empty
// environment apart from a few fixed variables. Where the manager may make
// cgroups, each sandbox has pids, memory and cpu cgroups of its own (see
// cgroup.go). Nothing else of the host is visible: not /root, /home, /var,
// the data directory or other sessions' workspaces.
//
// A session's first Bash call starts its sandbox, which then stays up: its
// first process, PID 1, is an executor, which is this very binary (bound
// read-only at /run/corral/executor and started with [ExecutorArg]; see
// [RunExecutorIfRequested]). The Driver sends it calls over a pipe, and it
// runs each with bash in a process group of its own, with the call's
// rlimits, timeout and output cap, then kills whatever the call left
// running and reports the exit status. A warm call thus costs about a
// fork-exec of bash rather than a sandbox start. The sandbox is stopped
// when the session has been idle for [Config.IdleTimeout], by
// [Driver.Destroy] and by [Driver.Close], and it dies with the manager
// process. /tmp and /dev/shm live as long as the sandbox; only /workspace
// persists beyond it.
//
// The file tools never enter the sandbox: they open the workspace with
// [os.Root], which refuses any path or symlink that leads outside it.
//
// Calls of one session run one at a time; calls of different sessions run
// concurrently.
package sandbox
