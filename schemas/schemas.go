// Package schemas embeds the JSON Schema of every message that crosses
// Corral's bus — the contract for anyone who publishes to Corral from their
// own code — and validates messages against them.
//
// A schema lives at <domain>/v1/<name>.json and its title is the message's
// type name, corral.<domain>.v1.<name>.
package schemas

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

//go:embed */v1/*.json
var files embed.FS

// ErrUnknownType is returned for a type name with no schema.
var ErrUnknownType = errors.New("no schema for type")

// Path returns the file of a type's schema: corral.tool.v1.call →
// tool/v1/call.json.
func Path(typ string) string {
	return strings.Join(strings.Split(strings.TrimPrefix(typ, "corral."), "."), "/") + ".json"
}

// Types returns every type name that has a schema, sorted.
func Types() []string {
	var out []string
	_ = fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, "corral."+strings.ReplaceAll(strings.TrimSuffix(p, ".json"), "/", "."))
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// Schema returns a type's schema document.
func Schema(typ string) ([]byte, error) {
	b, err := files.ReadFile(Path(typ))
	if err != nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, typ)
	}
	return b, nil
}

// Examples returns the example messages a type's schema carries.
func Examples(typ string) ([]json.RawMessage, error) {
	b, err := Schema(typ)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Examples []json.RawMessage `json:"examples"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("schema %s: %w", typ, err)
	}
	return doc.Examples, nil
}

var compiled = sync.OnceValues(func() (map[string]*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	out := make(map[string]*jsonschema.Schema)
	for _, typ := range Types() {
		b, _ := files.ReadFile(Path(typ))
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", typ, err)
		}
		if err := c.AddResource(Path(typ), doc); err != nil {
			return nil, fmt.Errorf("schema %s: %w", typ, err)
		}
		s, err := c.Compile(Path(typ))
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", typ, err)
		}
		out[typ] = s
	}
	return out, nil
})

// Validate checks data against the schema of type typ. The error names
// each offending field by its JSON pointer.
func Validate(typ string, data []byte) error {
	all, err := compiled()
	if err != nil {
		return err
	}
	s, ok := all[typ]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownType, typ)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := s.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return fmt.Errorf("%s", describe(ve))
		}
		return err
	}
	return nil
}

// printer is made on first use: building it at init costs every program
// that links this package, including each sandbox start.
var printer = sync.OnceValue(func() *message.Printer { return message.NewPrinter(language.English) })

// describe flattens a validation error to "field: problem" clauses, each
// field a JSON pointer. A missing or unknown property is named itself
// ("/prompt: missing"), not by the object that holds it.
func describe(ve *jsonschema.ValidationError) string {
	var parts []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, name := range k.Missing {
				parts = append(parts, pointer(append(slices.Clip(e.InstanceLocation), name))+": missing")
			}
		case *kind.AdditionalProperties:
			for _, name := range k.Properties {
				parts = append(parts, pointer(append(slices.Clip(e.InstanceLocation), name))+": unknown field")
			}
		default:
			parts = append(parts, fmt.Sprintf("%s: %s", pointer(e.InstanceLocation), e.ErrorKind.LocalizedString(printer())))
		}
	}
	walk(ve)
	return strings.Join(parts, "; ")
}

// pointer is the JSON pointer (RFC 6901) of a location in a document.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}
