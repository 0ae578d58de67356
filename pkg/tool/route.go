package tool

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Trees that live in the memory service rather than the sandbox.
const (
	// Memories holds what a tenant's agent has learnt, shared by the
	// tenant; Private under it is each user's own.
	Memories = "/memories"
	Private  = "/memories/private"
	// Skills holds the tenant's skills, one folder each with a SKILL.md.
	Skills = "/skills"
)

// ErrBadMemoryPath is returned by [MemoryPath] for a path under /memories
// or /skills that cannot name a file.
var ErrBadMemoryPath = errors.New("invalid memory path")

// MaxMemoryPathBytes is the longest path a memory or skill file may have.
const MaxMemoryPathBytes = 512

// maxSegmentBytes is the longest name a path's part may have, as on disk
// (skills are laid out as files in sandboxes).
const maxSegmentBytes = 255

// ForMemory reports whether a call with the given parsed arguments (from
// [Parse]) goes to the memory service: a file tool whose path is under
// /memories or /skills. Everything else, Bash always, runs in the sandbox.
func ForMemory(args any) bool {
	return IsMemoryPath(pathOf(args))
}

// pathOf returns the path a file tool's parsed arguments name, "" for
// Bash.
func pathOf(args any) string {
	switch a := args.(type) {
	case *ReadArgs:
		return a.FilePath
	case *WriteArgs:
		return a.FilePath
	case *EditArgs:
		return a.FilePath
	case *GlobArgs:
		return a.Path
	case *GrepArgs:
		return a.Path
	}
	return ""
}

// IsMemoryPath reports whether p, as the model wrote it, is in /memories or
// /skills. It does not say p is valid: see [MemoryPath].
func IsMemoryPath(p string) bool {
	for _, root := range []string{Memories, Skills} {
		if p == root || strings.HasPrefix(p, root+"/") {
			return true
		}
	}
	return false
}

// MemoryPath checks a path under /memories or /skills and returns it
// without a trailing slash. Unlike workspace paths, nothing is resolved:
// a path must already be in its one canonical form, so "..", ".", empty
// segments ("//"), control characters, invalid UTF-8 and paths longer than
// [MaxMemoryPathBytes] are refused with an error wrapping
// [ErrBadMemoryPath] that says which.
func MemoryPath(p string) (string, error) {
	if !IsMemoryPath(p) {
		return "", fmt.Errorf("%w: %q is not under %s or %s", ErrBadMemoryPath, p, Memories, Skills)
	}
	if len(p) > MaxMemoryPathBytes {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrBadMemoryPath, MaxMemoryPathBytes)
	}
	if !utf8.ValidString(p) {
		return "", fmt.Errorf("%w: not valid UTF-8", ErrBadMemoryPath)
	}
	// C1 too (U+0080 to U+009F): a path is listed to other users, and a
	// terminal takes U+009B as the start of an escape sequence.
	for _, r := range p {
		if unicode.IsControl(r) {
			return "", fmt.Errorf("%w: %q contains a control character", ErrBadMemoryPath, p)
		}
	}
	p = strings.TrimSuffix(p, "/")
	for _, seg := range strings.Split(p, "/")[1:] {
		if len(seg) > maxSegmentBytes {
			return "", fmt.Errorf("%w: a part of %q is longer than %d bytes", ErrBadMemoryPath, p, maxSegmentBytes)
		}
		switch seg {
		case "":
			return "", fmt.Errorf("%w: %q has an empty segment (//)", ErrBadMemoryPath, p)
		case ".", "..":
			return "", fmt.Errorf("%w: %q has a %q segment; write the path without it", ErrBadMemoryPath, p, seg)
		}
	}
	return p, nil
}

// The services that run tool calls.
const (
	// ServiceSandbox runs calls in the session's sandbox.
	ServiceSandbox = "sandbox"
	// ServiceMemory keeps /memories and /skills.
	ServiceMemory = "memory"
)

// Route checks a call of tool name with input as the model wrote it, and
// returns the service that runs it, with the path of the memory or skill
// file it names, if any. Its error refuses a call that cannot run as
// written, in words the model can act on.
func Route(name string, input json.RawMessage) (service, memPath string, err error) {
	args, err := Parse(name, input)
	if err != nil {
		return "", "", err
	}
	p := pathOf(args)
	if IsMemoryPath(p) {
		p, err := MemoryPath(p)
		return ServiceMemory, p, err
	}
	_, err = WorkspacePath(p)
	return ServiceSandbox, "", err
}
