package tool

import (
	"fmt"
	"strings"
)

// ApplyEdit applies an Edit to content, the file named name, as every
// service that runs Edits does: old_string must occur in it once, or any
// number of times with replace_all, and the file it makes may hold at most
// limit bytes. It returns the new content and how many occurrences it
// replaced, or an *[EditError] saying why the Edit does not apply; the new
// content is not built past limit.
func ApplyEdit(name, content string, a *EditArgs, limit int) (string, int, error) {
	n := strings.Count(content, a.OldString)
	switch {
	case a.OldString == "" || n == 0:
		return "", 0, &EditError{Kind: EditNotFound, Name: name}
	case n > 1 && !a.ReplaceAll:
		return "", 0, &EditError{Kind: EditNotUnique, Name: name, Occurrences: n}
	}
	k := 1
	if a.ReplaceAll {
		k = n
	}
	if size := len(content) + k*(len(a.NewString)-len(a.OldString)); size > limit {
		return "", 0, &EditError{Kind: EditTooLarge, Name: name, Occurrences: k, Size: size}
	}
	return strings.Replace(content, a.OldString, a.NewString, k), k, nil
}

// EditErrorKind says why an Edit does not apply.
type EditErrorKind int

const (
	// EditNotFound: old_string is not in the file.
	EditNotFound EditErrorKind = iota + 1
	// EditNotUnique: old_string occurs more than once, and replace_all
	// is not set.
	EditNotUnique
	// EditTooLarge: the file the Edit makes would be larger than the
	// limit.
	EditTooLarge
)

// EditError says why an Edit does not apply to a file. Its message is
// the model's: what went wrong and what to do about it; a caller adds
// what the limit of an [EditTooLarge] is.
type EditError struct {
	Kind EditErrorKind
	// Name is the file's, as the model named it.
	Name string
	// Occurrences of old_string in the file (EditNotUnique), or that the
	// Edit replaces (EditTooLarge).
	Occurrences int
	// Size the file would have (EditTooLarge).
	Size int
}

func (e *EditError) Error() string {
	switch e.Kind {
	case EditNotFound:
		return fmt.Sprintf("old_string not found in %s: read the file again and copy the text exactly, including whitespace and indentation", e.Name)
	case EditNotUnique:
		return fmt.Sprintf("old_string occurs %d times in %s: add surrounding lines to make it unique, or set replace_all to replace every occurrence", e.Occurrences, e.Name)
	default:
		return fmt.Sprintf("the edit would make %s %d bytes", e.Name, e.Size)
	}
}
