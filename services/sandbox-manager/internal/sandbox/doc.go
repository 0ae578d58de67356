// Package sandbox runs the model's tool calls for a session: Bash in a
// bubblewrap sandbox, and Read, Write, Edit, Glob and Grep on the session's
// workspace directory from the manager's side.
//
// Each session has a workspace, a host directory Dir/<tenant>/<session> that
// the sandbox sees as /workspace, its only writable tree apart from a
// private /tmp, /dev/shm and home directory, /home/sandbox. The sandbox has
// new user, PID, mount, IPC, UTS and network namespaces (its own loopback
// and nothing else: no route to the host or beyond; see below for its one
// way out), a read-only view of /usr, /etc and the library directories, a
// private /proc and a read-only /dev, no capabilities, a seccomp filter
// (see seccomp.go), and an empty environment apart from a few fixed
// variables (see env.go). Where the manager may make cgroups, each sandbox
// has pids, memory and cpu cgroups of its own (see cgroup.go). Nothing else
// of the host is visible: not /root, /home, /var, the data directory or
// other sessions' workspaces.
//
// Commands run in /workspace with HOME at /home/sandbox, so that what tools
// keep in HOME (git's config, pip's --user installs, npm's cache, Go's
// GOPATH and build cache) stays out of the workspace, its snapshots and its
// forks. PATH holds, in this order, the toolchain directories that the
// host's /usr has, of those env.go lists (/usr/local/go/bin,
// /usr/local/cargo/bin, /usr/local/node/bin), then /usr/local/bin, /usr/bin
// and /bin, then ~/.local/bin and ~/go/bin.
//
// A session of an environment ([Config.Layer]) has the environment's
// layer, a host directory built once per version of the environment,
// bound read-only at /opt/env, its directories first on PATH (/opt/env/bin,
// pip's and npm's) and PYTHONPATH and NODE_PATH set to what pip and npm
// installed there (see package environment). Its sandbox never comes from
// the pool. [Driver.Setup] builds a layer: it runs the environment's setup
// once, in a sandbox made like a session's but with a fresh layer bound
// writable and a scratch /workspace of its own.
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
// process. /tmp, /dev/shm and HOME live as long as the sandbox, each a
// tmpfs of [Config.TmpSize] bytes; only /workspace persists beyond it.
//
// A sandbox's only way out is the node's egress service ([Config.Egress];
// without it no sandbox has network). Before a session's sandbox starts,
// the Driver opens the service for the session's identity (tenant, user,
// session and environment, as [Driver.Run] is given them). Where the
// service's policy may let the sandbox reach some host, it answers with a
// host directory holding a Unix socket that speaks for this sandbox alone
// and a CA bundle; the Driver binds it read-only at /run/corral/egress and
// adds the proxy's and the CA bundle's variables to the environment
// (HTTP_PROXY, SSL_CERT_FILE and the like: [egressapi.SandboxEnv]). The
// executor then listens on the sandbox's own 127.0.0.1:3128 before any
// command runs, and relays each connection to that socket (see relay.go);
// the service applies the policy and may inject credentials the sandbox
// never sees. A sandbox without network has none of this: no directory,
// no variables, nothing on port 3128. A sandbox with network never comes
// from the pool (see pool.go), whose sandboxes are made before anyone
// knows whose they will be. After each Bash call of a sandbox with
// network, the Driver drains what the call sent out into the call's
// [Result].Egress, and ends its output with a note on what was refused;
// [Driver.Destroy] closes the session's socket. A service that cannot be
// opened fails the call before anything runs ([ErrNotRun]); one that
// cannot be drained or closed is logged and the call goes on.
//
// The file tools never enter the sandbox: they open the workspace with
// [os.Root], which refuses any path or symlink that leads outside it.
//
// Calls of one session run one at a time; calls of different sessions run
// concurrently.
package sandbox
