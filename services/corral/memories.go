package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/memoryapi"
	"corral.dev/pkg/tool"
)

// memOpts are the flags every memories and skills command takes.
type memOpts struct {
	nats, tenant, user string
}

func (e *env) memFlags(cmd *cobra.Command, o *memOpts) {
	f := cmd.PersistentFlags()
	f.StringVar(&o.nats, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	f.StringVar(&o.tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "tenant (CORRAL_TENANT)")
	f.StringVar(&o.user, "user", cmp.Or(e.getenv("CORRAL_USER"), e.getenv("USER"), "anonymous"), "user, whose /memories/private this is (CORRAL_USER)")
}

// memCall sends one request to the memory service's API.
func (e *env) memCall(ctx context.Context, o *memOpts, op string, req memoryapi.APIRequest) (*memoryapi.APIResponse, error) {
	if err := event.CheckTenant(o.tenant); err != nil {
		return nil, &exitError{2, err}
	}
	var resp memoryapi.APIResponse
	if err := e.request(ctx, o.nats, "memory service", memoryapi.Subject(o.tenant, o.user, op), &req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// request sends one request to a service's API at subject and decodes its
// answer into resp. An error the service answers with is the command's.
func (e *env) request(ctx context.Context, url, service, subject string, req, resp any) error {
	nc, _, err := e.connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	return ask(ctx, nc, service, subject, req, resp)
}

// serviceError is the error a service's API answered with: its code
// (Nats-Service-Error-Code) and description.
type serviceError struct {
	code, desc string
}

func (e *serviceError) Error() string { return e.desc }

// ask sends one request on nc to a service's API at subject, within 30
// seconds, and decodes its answer into resp. An error the service answers
// with is an [exitError] of status 1 wrapping a [serviceError].
func ask(ctx context.Context, nc *nats.Conn, service, subject string, req, resp any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ctx, stop := bus.WhilePermitted(ctx, nc, subject)
	defer stop()
	// A service that is starting (or restarting) answers soon.
	msg, err := nc.RequestWithContext(ctx, subject, data)
	for wait := 100 * time.Millisecond; errors.Is(err, nats.ErrNoResponders) && wait < 5*time.Second; wait *= 2 {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		msg, err = nc.RequestWithContext(ctx, subject, data)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("the %s is not running on the server at CORRAL_NATS_URL (start Corral with: corral dev, or set CORRAL_NATS_URL to the server that runs it)", service)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", service, bus.Refusal(ctx, err))
	}
	if desc := msg.Header.Get("Nats-Service-Error"); desc != "" {
		return &exitError{1, &serviceError{msg.Header.Get("Nats-Service-Error-Code"), desc}}
	}
	if err := json.Unmarshal(msg.Data, resp); err != nil {
		return fmt.Errorf("%s: %w", service, err)
	}
	return nil
}

func (e *env) printFiles(files []memoryapi.APIFile) {
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, f := range files {
		// Shown as text alone: the paths and names are others' (a model's,
		// another user's), and a terminal acts on the controls in them.
		fmt.Fprintf(w, "%s\t%d bytes\tv%d\t%s\t%s\n", printable(f.Path), f.Size, f.Version, printable(f.UpdatedBy), f.UpdatedAt.Local().Format(time.DateTime))
	}
	w.Flush()
}

// fileJSON is a file as memories ls --json and skills ls --json print it.
type fileJSON struct {
	Path string `json:"path"`
	// Skill is the skill a file under /skills is of.
	Skill string `json:"skill,omitempty"`
	// Owner is the user whose private memory it is.
	Owner     string    `json:"owner,omitempty"`
	Size      int       `json:"size"`
	Version   int64     `json:"version"`
	UpdatedBy string    `json:"updated_by"`
	UpdatedAt time.Time `json:"updated_at"`
}

func filesJSON(files []memoryapi.APIFile) []fileJSON {
	out := make([]fileJSON, len(files))
	for i, f := range files {
		out[i] = fileJSON{Path: f.Path, Owner: f.Owner, Size: f.Size, Version: f.Version, UpdatedBy: f.UpdatedBy, UpdatedAt: f.UpdatedAt}
		if rest, ok := strings.CutPrefix(f.Path, tool.Skills+"/"); ok {
			out[i].Skill, _, _ = strings.Cut(rest, "/")
		}
	}
	return out
}

func (e *env) memoriesCmd() *cobra.Command {
	var o memOpts
	cmd := &cobra.Command{
		Use:   "memories",
		Short: "List, read, write and remove the files under /memories, and their versions",
		Long: `Memories are files under /memories that every session of a tenant can read and
write with its file tools; /memories/private/... is the --user's own.`,
	}
	e.memFlags(cmd, &o)
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls [PATH]",
		Short: "List the files under PATH (default /memories)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := tool.Memories
			if len(args) == 1 {
				p = args[0]
			}
			resp, err := e.memCall(cmd.Context(), &o, memoryapi.OpList, memoryapi.APIRequest{Path: p})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONLines(e.stdout, filesJSON(resp.Files)...)
			}
			e.printFiles(resp.Files)
			return nil
		},
	}
	jsonFlag(ls, &asJSON)
	cmd.AddCommand(ls, &cobra.Command{
		Use:   "cat PATH",
		Short: "Print a file",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := e.memCall(cmd.Context(), &o, memoryapi.OpGet, memoryapi.APIRequest{Path: args[0]})
			if err != nil {
				return err
			}
			_, err = io.WriteString(e.stdout, resp.Files[0].Content)
			return err
		},
	}, &cobra.Command{
		Use:   "put PATH [FILE]",
		Short: "Write a file from FILE, or from standard input",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var content []byte
			var err error
			if len(args) == 2 {
				content, err = os.ReadFile(args[1])
			} else {
				content, err = io.ReadAll(cmd.InOrStdin())
			}
			if err != nil {
				return err
			}
			resp, err := e.memCall(cmd.Context(), &o, memoryapi.OpPut, memoryapi.APIRequest{Path: args[0], Content: string(content), Op: uuid.Must(uuid.NewV7())})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "wrote %s (version %d)\n", resp.Files[0].Path, resp.Files[0].Version)
			return nil
		},
	}, &cobra.Command{
		Use:   "log PATH",
		Short: "List the kept versions of a file: version, size, who wrote it and when",
		Long: `Log lists the versions kept of a file, oldest first. A file keeps its last
64 versions, and fewer when its tenant nears its bound on stored bytes
(CORRAL_MEMORY_MAX_TENANT_BYTES): the oldest versions go first.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := e.memCall(cmd.Context(), &o, memoryapi.OpLog, memoryapi.APIRequest{Path: args[0]})
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "VERSION\tSIZE\tBY\tAT")
			for _, v := range resp.Versions {
				size := fmt.Sprintf("%d bytes", v.Size)
				if v.Removed {
					size = "removed"
				}
				fmt.Fprintf(w, "v%d\t%s\t%s\t%s\n", v.Version, size, printable(v.ChangedBy), v.ChangedAt.Local().Format(time.DateTime))
			}
			return w.Flush()
		},
	}, &cobra.Command{
		Use:   "restore PATH VERSION",
		Short: "Write version VERSION of a file back as its newest version",
		Long: `Restore writes a version that log lists back as the file's newest version;
the versions in between are kept. A file removed since is created again.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := strconv.ParseInt(strings.TrimPrefix(args[1], "v"), 10, 64)
			if err != nil || v <= 0 {
				return &exitError{2, fmt.Errorf("version %q: want a version number that corral memories log lists, such as 3", args[1])}
			}
			resp, err := e.memCall(cmd.Context(), &o, memoryapi.OpRestore, memoryapi.APIRequest{Path: args[0], Version: v, Op: uuid.Must(uuid.NewV7())})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "restored %s to version %d (now version %d)\n", resp.Files[0].Path, v, resp.Files[0].Version)
			return nil
		},
	}, &cobra.Command{
		Use:   "rm PATH",
		Short: "Remove a file (its history is kept)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := e.memCall(cmd.Context(), &o, memoryapi.OpRemove, memoryapi.APIRequest{Path: args[0], Op: uuid.Must(uuid.NewV7())}); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "removed %s\n", args[0])
			return nil
		},
	})
	return cmd
}

func (e *env) skillsCmd() *cobra.Command {
	var o memOpts
	cmd := &cobra.Command{
		Use:   "skills",
		Short: "List, push and remove the tenant's skills under /skills",
		Long: `A skill is a folder /skills/<name>/ with a SKILL.md whose YAML front matter
gives its name and description. Every session of the tenant sees the list in
its system prompt, reads the files with its file tools, and finds them
read-only at /skills in its sandbox.`,
	}
	e.memFlags(cmd, &o)
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the skills and their files",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := e.memCall(cmd.Context(), &o, memoryapi.OpList, memoryapi.APIRequest{Path: tool.Skills})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONLines(e.stdout, filesJSON(resp.Files)...)
			}
			e.printFiles(resp.Files)
			return nil
		},
	}
	jsonFlag(ls, &asJSON)
	cmd.AddCommand(ls, &cobra.Command{
		Use:   "push DIR",
		Short: "Upload the skill in DIR (its SKILL.md names it), replacing what was there",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.pushSkill(cmd.Context(), &o, args[0])
		},
	}, &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a skill and its files (their history is kept)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := e.memCall(cmd.Context(), &o, memoryapi.OpRemove, memoryapi.APIRequest{Path: tool.Skills + "/" + args[0], Recursive: true, Op: uuid.Must(uuid.NewV7())})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "removed skill %s (%d files)\n", args[0], resp.Removed)
			return nil
		},
	})
	return cmd
}

// pushSkill uploads every file of the skill folder dir, SKILL.md last, so
// the skill is listed only once its files are there, then removes files the
// folder no longer has.
func (e *env) pushSkill(ctx context.Context, o *memOpts, dir string) error {
	skill, err := os.ReadFile(filepath.Join(dir, "SKILL.md"))
	if err != nil {
		return &exitError{2, fmt.Errorf("%s is not a skill: %w", dir, err)}
	}
	name := skillName(string(skill))
	if name == "" {
		return &exitError{2, fmt.Errorf("%s/SKILL.md must start with YAML front matter giving name and description", dir)}
	}
	root := tool.Skills + "/" + name
	var files []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != dir {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() && !strings.HasPrefix(d.Name(), ".") {
			rel, _ := filepath.Rel(dir, p)
			if rel != "SKILL.md" {
				files = append(files, rel)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	files = append(files, "SKILL.md")
	pushed := map[string]bool{}
	for _, rel := range files {
		content, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			return err
		}
		p := path.Join(root, filepath.ToSlash(rel))
		if _, err := e.memCall(ctx, o, memoryapi.OpPut, memoryapi.APIRequest{Path: p, Content: string(content), Op: uuid.Must(uuid.NewV7())}); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		pushed[p] = true
	}
	resp, err := e.memCall(ctx, o, memoryapi.OpList, memoryapi.APIRequest{Path: root})
	if err != nil {
		return err
	}
	for _, f := range resp.Files {
		if !pushed[f.Path] {
			if _, err := e.memCall(ctx, o, memoryapi.OpRemove, memoryapi.APIRequest{Path: f.Path, Op: uuid.Must(uuid.NewV7())}); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(e.stdout, "pushed skill %s (%d files) to %s\n", name, len(files), root)
	return nil
}

// skillName returns the name a SKILL.md's front matter gives, or "". The
// memory service checks the whole front matter when SKILL.md is written.
func skillName(content string) string {
	rest, ok := strings.CutPrefix(content, "---\n")
	if !ok {
		return ""
	}
	yml, _, _ := strings.Cut(rest, "\n---")
	for _, line := range strings.Split(yml, "\n") {
		if v, ok := strings.CutPrefix(line, "name:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return ""
}
