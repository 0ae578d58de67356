// Package envfile reads and writes an environment's definition
// ([environment.Spec]) as the YAML file `corral environments create`
// takes:
//
//	name: py-tools
//	description: Python with the HTTP libraries
//	egress:
//	  presets: [pypi]
//	  hosts: [files.example.com, "*.example.org"]
//	packages:
//	  pip: [requests==2.32.0]
//	  npm: [left-pad@1.3.0]
//	  go: [golang.org/x/tools/cmd/stringer@v0.30.0]
//	setup: |
//	  echo any shell, run after the packages, with /opt/env writable
//
// It stands apart from package environment so that the sandbox-manager,
// which gets definitions as JSON, links no YAML parser: its binary is the
// executor of every sandbox, whose start pays for every package's init.
package envfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"

	"corral.dev/pkg/environment"
)

// MaxBytes bounds a definition's file.
const MaxBytes = 256 << 10

// Parse reads one definition from data, strictly: a field it does not
// know, a value of the wrong type or a second document is an error that
// names its line. It then validates the definition ([environment.Spec.Validate]),
// whose errors wrap [environment.ErrInvalid].
func Parse(data []byte) (environment.Spec, error) {
	if len(data) > MaxBytes {
		return environment.Spec{}, fmt.Errorf("%d bytes: a definition is at most %d", len(data), MaxBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s environment.Spec
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return environment.Spec{}, errors.New("empty: a definition needs at least a name")
		}
		return environment.Spec{}, fmt.Errorf("yaml: %w", unwrapYAML(err))
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return environment.Spec{}, errors.New("yaml: more than one document: a file defines one environment")
	}
	if err := s.Validate(); err != nil {
		return environment.Spec{}, err
	}
	return s, nil
}

// unwrapYAML drops the "yaml: " yaml.v3 starts its messages with, which
// Parse says once, and says which fields a misspelt one could be.
func unwrapYAML(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	lines := make([]string, len(te.Errors))
	for i, l := range te.Errors {
		lines[i] = l
		m := unknownField.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		lines[i] = fmt.Sprintf("%s: unknown field %q", m[1], m[2])
		if known := fields[m[3]]; known != "" {
			lines[i] += " (want " + known + ")"
		}
	}
	return errors.New(strings.Join(lines, "; "))
}

// unknownField is how yaml.v3 says a field is unknown.
var unknownField = regexp.MustCompile(`^(line \d+): field (\S+) not found in type environment\.(\w+)$`)

// fields are the fields of each type of a definition, for the error on
// one that is unknown.
var fields = map[string]string{
	"Spec":     "name, description, egress, packages or setup",
	"Egress":   "presets or hosts",
	"Packages": "pip, npm, go or apt",
}

// Format writes s as Parse reads it, fields in the order of the example
// above, the setup as a literal block.
func Format(s environment.Spec) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&s); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
