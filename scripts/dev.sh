#!/usr/bin/env bash
# Installs the corral command where the shell finds it, then starts the whole
# platform on embedded defaults: corral dev, with the flags given.
#
#   scripts/dev.sh                          # corral dev
#   scripts/dev.sh --listen 127.0.0.1:4223  # any of corral dev's flags
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bwrap >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
fi

# -buildvcs: a workspace's build records its commit only when asked, and
# corral --version shows it.
go install -buildvcs=true ./services/corral
bin=$(go env GOBIN)
bin=${bin:-$(go env GOPATH)/bin}

# go install's directory is often not on PATH: link corral into one that is.
if [ "$(command -v corral || true)" != "$bin/corral" ]; then
	found=$(command -v corral || true)
	if [ -n "$found" ] && [ "$(readlink -f "$found")" = "$bin/corral" ]; then
		: # a link made before
	elif [ -n "$found" ]; then
		echo "note: the shell finds another corral first, $found; this one is $bin/corral" >&2
	else
		linked=
		for d in /usr/local/bin "$HOME/.local/bin"; do
			case ":$PATH:" in *":$d:"*) ;; *) continue ;; esac
			if [ -w "$d" ] && ln -sf "$bin/corral" "$d/corral"; then
				echo "corral is installed as $d/corral (linked to $bin/corral)" >&2
				linked=1
				break
			fi
		done
		if [ -z "$linked" ]; then
			echo "corral is installed in $bin, which is not on your PATH; add it: export PATH=\"$bin:\$PATH\"" >&2
		fi
	fi
fi
exec "$bin/corral" dev "$@"
