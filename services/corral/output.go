package main

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/spf13/cobra"
)

// jsonFlag adds the --json flag that every command listing or showing
// something takes, with the same words everywhere.
func jsonFlag(cmd *cobra.Command, asJSON *bool) {
	cmd.Flags().BoolVar(asJSON, "json", false, "print one JSON object a line (JSON Lines; the README lists the fields)")
}

// writeJSONLines writes each of items to w as one JSON object on a line of
// its own (JSON Lines), and nothing for none: a script reads a line at a
// time, and an empty list is an empty output. Nothing is escaped for HTML
// (&, < and > stay as written): the output goes to programs and
// terminals, not into a web page, and a script comparing a title or a
// command with what it wrote finds it as written.
//
// Each command prints a small struct of its own, with snake_case field
// names that stay: the README's "Scripting with --json" lists them.
func writeJSONLines[T any](w io.Writer, items ...T) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			return err
		}
	}
	return nil
}

// plainJSON is raw, a JSON value stored by a writer that escaped it for
// HTML (Go's json.Marshal writes < as \u003c), encoded again without: the
// same value, its objects' keys in sorted order. A value that does not
// decode is returned as it is.
func plainJSON(raw json.RawMessage) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // numbers as written, not rounded through float64
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	var b bytes.Buffer
	if err := writeJSONLines(&b, v); err != nil {
		return raw
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
