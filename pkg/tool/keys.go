package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// checkKeys checks that input is a single JSON object whose keys are each
// the exact JSON name of one of args' fields (args points to a struct),
// given once. Values are left to the decoder.
func checkKeys(input []byte, args any) error {
	fields := jsonNames(reflect.TypeOf(args).Elem())
	dec := json.NewDecoder(bytes.NewReader(input))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return errors.New("the arguments must be a JSON object")
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		switch {
		case !fields[key]:
			return fmt.Errorf("unknown field %q (the fields are %s)", key, strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
		case seen[key]:
			return fmt.Errorf("field %q is given twice", key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("the arguments must be one JSON object, with nothing after it")
	}
	return nil
}

// jsonNames returns the JSON names of struct type t's fields.
func jsonNames(t reflect.Type) map[string]bool {
	out := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out[name] = true
	}
	return out
}
