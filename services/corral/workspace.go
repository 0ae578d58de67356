package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"text/tabwriter"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"corral.dev/pkg/event"
	"corral.dev/pkg/workspaceapi"
)

// wsOpts are the workspace command's flags.
type wsOpts struct {
	memOpts
	out       string
	all       bool
	recursive bool
	stat      bool
}

func (e *env) workspaceCmd() *cobra.Command {
	var o wsOpts
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "workspace SESSION ls [PATH] | cat PATH | get PATH|--all -o FILE | diff [--stat]",
		Short: "List, print and download the files of a session's workspace",
		Long: `Workspace reads the files of a session's last workspace snapshot (taken after
every call that may change files): while the session runs, after it ended,
and after the node that ran it died, without starting a sandbox. PATH is in
/workspace, as /workspace/src/main.go or src/main.go.

  corral workspace SESSION ls [-R] [PATH]        mode, size and path of each entry
  corral workspace SESSION cat PATH              a file's bytes, to standard output
  corral workspace SESSION get PATH -o FILE      a file (a directory: a .tar.gz of it)
  corral workspace SESSION get --all -o out.tar.gz
                                                 the whole workspace, a gzipped tar
                                                 with modes and symlinks
  corral workspace SESSION diff [--stat]         for a session started from a repository
                                                 (or uploaded files): what changed since,
                                                 as a patch git apply takes (.git left
                                                 out); --stat: files and lines only

SESSION is its ID or the first 4 or more of its hex digits. -o - writes to
standard output. Exit status: 0 done, 1 failed (no such session, file or
snapshot), 2 usage.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return &exitError{2, fmt.Errorf("usage: corral %s", cmd.Use)}
			}
			if _, err := parseIDPrefix("session", args[0]); err != nil {
				return err
			}
			// Named by neither, the tenant is the session's.
			chosen := ""
			if cmd.Flags().Changed("tenant") || e.getenv("CORRAL_TENANT") != "" {
				chosen = o.tenant
			}
			op, rest := args[1], args[2:]
			p := "."
			switch {
			case op == "ls" && len(rest) <= 1, op == "cat" && len(rest) == 1, op == "get" && len(rest) == 1 && !o.all:
				if len(rest) == 1 {
					p = rest[0]
				}
			case op == "get" && len(rest) == 0 && o.all, op == "diff" && len(rest) == 0:
			default:
				return &exitError{2, fmt.Errorf("usage: corral %s", cmd.Use)}
			}
			if asJSON && op != "ls" {
				return usageError(fmt.Errorf("--json goes with ls (usage: corral %s)", cmd.Use))
			}
			rel, err := workspaceapi.Clean(p)
			if err != nil {
				return &exitError{2, err}
			}
			if op == "get" && o.out == "" {
				return &exitError{2, errNoOutput}
			}
			nc, js, err := e.connect(o.nats)
			if err != nil {
				return err
			}
			defer nc.Close()
			var session uuid.UUID
			if o.tenant, session, err = findSession(cmd.Context(), js, args[0], chosen); err != nil {
				return err
			}
			ws := &wsClient{nc: nc, o: &o, session: session}
			switch op {
			case "ls":
				if asJSON {
					return ws.lsJSON(cmd.Context(), e.stdout, rel)
				}
				return ws.ls(cmd.Context(), e.stdout, rel)
			case "cat":
				_, err := ws.cat(cmd.Context(), e.stdout, rel, 0)
				return err
			case "diff":
				return ws.diff(cmd.Context(), e.stdout, e.stderr)
			}
			return ws.get(cmd.Context(), e.stdout, rel)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.nats, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	f.StringVar(&o.tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "tenant of the session (CORRAL_TENANT)")
	f.StringVar(&o.user, "user", cmp.Or(e.getenv("CORRAL_USER"), e.getenv("USER"), "anonymous"), "user to ask as (CORRAL_USER)")
	f.StringVarP(&o.out, "output", "o", "", "get: the file to write (- for standard output)")
	f.BoolVar(&o.all, "all", false, "get: the whole workspace, as a .tar.gz")
	f.BoolVarP(&o.recursive, "recursive", "R", false, "ls: every entry below PATH, not only its own")
	f.BoolVar(&o.stat, "stat", false, "diff: the files changed and their lines inserted and deleted, not the patch")
	f.BoolVar(&asJSON, "json", false, "ls: one JSON object a line (JSON Lines; the README lists the fields)")
	return cmd
}

// wsClient asks the workspace API about one session.
type wsClient struct {
	nc      *nats.Conn
	o       *wsOpts
	session uuid.UUID
}

func (c *wsClient) call(ctx context.Context, op string, req, resp any) error {
	return ask(ctx, c.nc, "sandbox-manager", workspaceapi.Subject(c.o.tenant, c.o.user, op), req, resp)
}

func (c *wsClient) list(ctx context.Context, rel string, recursive bool) (*workspaceapi.ListReply, error) {
	var r workspaceapi.ListReply
	err := c.call(ctx, workspaceapi.OpList, workspaceapi.ListRequest{Session: c.session, Path: rel, Recursive: recursive}, &r)
	return &r, err
}

// diff writes what the session's workspace changed since it started, as
// a patch, or with --stat as counts; a patch cut at the API's limit says
// so on errw.
func (c *wsClient) diff(ctx context.Context, w, errw io.Writer) error {
	var r workspaceapi.DiffReply
	if err := c.call(ctx, workspaceapi.OpDiff, workspaceapi.DiffRequest{Session: c.session, Stat: c.o.stat}, &r); err != nil {
		return err
	}
	if c.o.stat {
		writeChanges(w, r.Changes)
		return nil
	}
	if _, err := io.WriteString(w, r.Patch); err != nil {
		return err
	}
	if r.Truncated {
		fmt.Fprintf(errw, "corral: the patch was cut at %d bytes; corral workspace %s get --all -o out.tar.gz has every file\n", len(r.Patch), c.session)
	}
	return nil
}

// writeChanges writes what a workspace changed: each file with its lines
// inserted and deleted, then the totals, as git diff --stat does.
func writeChanges(w io.Writer, ch *event.Changes) {
	if ch == nil || len(ch.Files) == 0 {
		fmt.Fprintln(w, "no changes")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	for _, f := range ch.Files {
		lines := fmt.Sprintf("+%d -%d", f.Insertions, f.Deletions)
		if f.Binary {
			lines = "binary"
		}
		fmt.Fprintf(tw, " %s\t%s\t%s\n", f.Path, f.Status, lines)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, " %d files changed, %d insertions(+), %d deletions(-)\n", len(ch.Files), ch.Insertions, ch.Deletions)
}

// ls prints the entries under rel: mode, size and path, and a symlink's
// target.
func (c *wsClient) ls(ctx context.Context, w io.Writer, rel string) error {
	r, err := c.list(ctx, rel, c.o.recursive)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, e := range r.Entries {
		size, name := "-", e.Path
		if e.Mode.IsRegular() {
			size = fmt.Sprint(e.Size)
		}
		if e.Link != "" {
			name += " -> " + e.Link
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Mode, size, name)
	}
	return tw.Flush()
}

// wsEntryJSON is an entry as workspace SESSION ls --json prints it.
type wsEntryJSON struct {
	Path string `json:"path"`
	// Type is file, dir or symlink.
	Type string `json:"type"`
	// Mode is the permission bits, in octal as chmod takes them.
	Mode   string `json:"mode"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	Link   string `json:"link,omitempty"`
}

// lsJSON prints the entries under rel as JSON lines.
func (c *wsClient) lsJSON(ctx context.Context, w io.Writer, rel string) error {
	r, err := c.list(ctx, rel, c.o.recursive)
	if err != nil {
		return err
	}
	out := make([]wsEntryJSON, len(r.Entries))
	for i, e := range r.Entries {
		typ := "file"
		switch {
		case e.Mode.IsDir():
			typ = "dir"
		case e.Mode&fs.ModeSymlink != 0 || e.Link != "":
			typ = "symlink"
		}
		out[i] = wsEntryJSON{Path: e.Path, Type: typ, Mode: fmt.Sprintf("%04o", e.Mode.Perm()), Size: e.Size, SHA256: e.SHA256, Link: e.Link}
	}
	return writeJSONLines(w, out...)
}

// cat writes the file at rel of snapshot seq (0: the last one) to w, read
// in pieces, and checks it against its hash. It returns the file's entry.
func (c *wsClient) cat(ctx context.Context, w io.Writer, rel string, seq uint64) (workspaceapi.Entry, error) {
	length := workspaceapi.ReadLength(c.nc.MaxPayload())
	h := sha256.New()
	req := workspaceapi.ReadRequest{Session: c.session, Path: rel, Length: length, Seq: seq}
	for {
		var r workspaceapi.ReadReply
		if err := c.call(ctx, workspaceapi.OpRead, req, &r); err != nil {
			return workspaceapi.Entry{}, err
		}
		if _, err := w.Write(r.Data); err != nil {
			return r.Entry, err
		}
		h.Write(r.Data)
		req.Offset += int64(len(r.Data))
		req.Seq, req.Cursor = r.Seq, r.Next
		switch {
		case req.Offset < r.Entry.Size && len(r.Data) > 0:
			continue
		case req.Offset != r.Entry.Size:
			return r.Entry, fmt.Errorf("%s: read %d bytes of %d", path.Join(workspaceapi.Root, r.Entry.Path), req.Offset, r.Entry.Size)
		case r.Entry.SHA256 != "" && hex.EncodeToString(h.Sum(nil)) != r.Entry.SHA256:
			return r.Entry, fmt.Errorf("%s: what was read is not what was stored (its SHA-256 differs)", path.Join(workspaceapi.Root, r.Entry.Path))
		}
		return r.Entry, nil
	}
}

// changed reports whether err is the API's answer that the snapshot
// changed while it was read.
func changed(err error) bool {
	var se *serviceError
	return errors.As(err, &se) && se.code == workspaceapi.CodeChanged
}
