package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
)

// Names of the tools the model sees.
const (
	Bash  = "Bash"
	Read  = "Read"
	Write = "Write"
	Edit  = "Edit"
	Glob  = "Glob"
	Grep  = "Grep"
)

// Names returns the names of the tools the model sees.
func Names() []string { return []string{Bash, Read, Write, Edit, Glob, Grep} }

// Workspace is the directory, as the model sees it, that a session's sandbox
// works in. Relative paths in tool arguments are taken relative to it.
const Workspace = "/workspace"

// Limits on arguments, enforced by [Parse].
const (
	// MaxTimeoutMillis is the longest timeout a Bash call may ask for.
	MaxTimeoutMillis = 600_000
	// MaxContentBytes is the largest content a Write or Edit may carry.
	MaxContentBytes = 512 << 10
	// MaxPathBytes is the longest path a call may name.
	MaxPathBytes = 4096
)

var (
	// ErrUnknownTool is returned by [Parse] for a tool name that is not one of ours.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrInvalidArgs is returned by [Parse] for arguments that do not fit the
	// tool: malformed JSON, unknown or missing fields, values out of range.
	ErrInvalidArgs = errors.New("invalid arguments")
	// ErrPathOutside is returned for a path that resolves outside the workspace.
	ErrPathOutside = errors.New("path is outside /workspace")
)

// BashArgs are the arguments of a Bash call.
type BashArgs struct {
	Command string `json:"command"`
	// Timeout is in milliseconds; zero means the sandbox's default.
	Timeout int `json:"timeout,omitempty"`
	// Description is the model's own note of what the command does; it is
	// shown to people, never run.
	Description string `json:"description,omitempty"`
}

// ReadArgs are the arguments of a Read call.
type ReadArgs struct {
	FilePath string `json:"file_path"`
	// Offset is the 1-based line to start at; zero means the first line.
	Offset int `json:"offset,omitempty"`
	// Limit is the number of lines to return; zero means the default.
	Limit int `json:"limit,omitempty"`
}

// WriteArgs are the arguments of a Write call.
type WriteArgs struct {
	FilePath string `json:"file_path"`
	Content  string `json:"content"`
}

// EditArgs are the arguments of an Edit call.
type EditArgs struct {
	FilePath   string `json:"file_path"`
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all,omitempty"`
}

// GlobArgs are the arguments of a Glob call.
type GlobArgs struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path,omitempty"`
}

// GrepArgs are the arguments of a Grep call.
type GrepArgs struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path,omitempty"`
	Glob    string `json:"glob,omitempty"`
}

// Parse decodes and validates the arguments of a call to the tool name. It
// returns a pointer to one of the *Args types. Errors wrap [ErrUnknownTool] or
// [ErrInvalidArgs] and say what is wrong in words the model can act on.
func Parse(name string, input json.RawMessage) (any, error) {
	var args interface{ validate() error }
	switch name {
	case Bash:
		args = &BashArgs{}
	case Read:
		args = &ReadArgs{}
	case Write:
		args = &WriteArgs{}
	case Edit:
		args = &EditArgs{}
	case Glob:
		args = &GlobArgs{}
	case Grep:
		args = &GrepArgs{}
	default:
		return nil, fmt.Errorf("%w %q: the tools are Bash, Read, Write, Edit, Glob and Grep", ErrUnknownTool, name)
	}
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage("{}")
	}
	// encoding/json matches keys to fields ignoring case, takes the last of
	// keys given twice and reads one value of several: the policy and the
	// reviewers, reading the same input as a plain object, would see other
	// arguments than the call runs with. So the input must be one object
	// whose keys are the fields' exact names, each once.
	if err := checkKeys(input, args); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", name, ErrInvalidArgs, err)
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.DisallowUnknownFields()
	if err := dec.Decode(args); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", name, ErrInvalidArgs, err)
	}
	if err := args.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", name, ErrInvalidArgs, err)
	}
	return args, nil
}

func (a *BashArgs) validate() error {
	if strings.TrimSpace(a.Command) == "" {
		return errors.New("command is required")
	}
	if a.Timeout < 0 || a.Timeout > MaxTimeoutMillis {
		return fmt.Errorf("timeout must be between 0 and %d milliseconds", MaxTimeoutMillis)
	}
	return nil
}

func (a *ReadArgs) validate() error {
	if a.Offset < 0 || a.Limit < 0 {
		return errors.New("offset and limit must not be negative")
	}
	return checkPath("file_path", a.FilePath, true)
}

func (a *WriteArgs) validate() error {
	if len(a.Content) > MaxContentBytes {
		return fmt.Errorf("content is %d bytes; the limit is %d", len(a.Content), MaxContentBytes)
	}
	return checkPath("file_path", a.FilePath, true)
}

func (a *EditArgs) validate() error {
	if a.OldString == "" {
		return errors.New("old_string is required")
	}
	if a.OldString == a.NewString {
		return errors.New("old_string and new_string are the same")
	}
	if len(a.NewString) > MaxContentBytes {
		return fmt.Errorf("new_string is %d bytes; the limit is %d", len(a.NewString), MaxContentBytes)
	}
	return checkPath("file_path", a.FilePath, true)
}

func (a *GlobArgs) validate() error {
	if err := checkPattern("pattern", a.Pattern, true); err != nil {
		return err
	}
	return checkPath("path", a.Path, false)
}

func (a *GrepArgs) validate() error {
	if err := checkPattern("pattern", a.Pattern, true); err != nil {
		return err
	}
	if err := checkPattern("glob", a.Glob, false); err != nil {
		return err
	}
	return checkPath("path", a.Path, false)
}

// checkPattern refuses a pattern with a NUL byte: no file name holds one,
// and the memory store, whose text cannot, would fail on it as on a fault
// of its own. A pattern matches a NUL in a file's content written as \x00.
func checkPattern(field, p string, required bool) error {
	switch {
	case p == "" && required:
		return fmt.Errorf("%s is required", field)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf(`%s contains a NUL byte: write it as \x00`, field)
	}
	return nil
}

func checkPath(field, p string, required bool) error {
	if p == "" {
		if required {
			return fmt.Errorf("%s is required", field)
		}
		return nil
	}
	if len(p) > MaxPathBytes {
		return fmt.Errorf("%s is longer than %d bytes", field, MaxPathBytes)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s contains a control character", field)
		}
	}
	return nil
}

// WorkspacePath maps a path as the model wrote it — absolute under
// /workspace, or relative to it — to a slash-separated path relative to the
// workspace root ("." for the root itself). It is a lexical check only:
// whoever opens the file must still refuse symlinks that lead outside.
// A path that leaves the workspace returns an error wrapping [ErrPathOutside].
func WorkspacePath(p string) (string, error) {
	if p == "" {
		return ".", nil
	}
	abs := p
	if !path.IsAbs(abs) {
		abs = path.Join(Workspace, abs)
	}
	abs = path.Clean(abs)
	if abs == Workspace {
		return ".", nil
	}
	rel, ok := strings.CutPrefix(abs, Workspace+"/")
	if !ok {
		return "", fmt.Errorf("%w: %s", ErrPathOutside, p)
	}
	return rel, nil
}
