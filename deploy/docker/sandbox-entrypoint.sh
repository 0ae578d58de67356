#!/bin/sh
# Entry point of the sandbox image. When the container's cgroup v2 file
# system is writable (a privileged container: deploy/compose.cgroups.yml),
# every process of the container moves into a leaf cgroup first, because
# cgroup v2 lets a cgroup hand its controllers to child cgroups only while
# no process lives in it; the sandbox-manager can then give each sandbox a
# pids cgroup of its own. Otherwise it starts without them, and says so.
set -eu
cg=/sys/fs/cgroup
if [ -f "$cg/cgroup.controllers" ] && [ -w "$cg/cgroup.subtree_control" ]; then
	mkdir -p "$cg/init"
	while read -r pid; do
		# A process that has exited meanwhile cannot be moved.
		echo "$pid" >"$cg/init/cgroup.procs" 2>/dev/null || true
	done <"$cg/cgroup.procs"
fi
exec "$@"
