// Package envconf reads the values of a service's environment variables,
// one function for each kind of value. Each returns the default when the
// variable is unset or empty, and an error that names the variable, its
// value and what it wants when the value is not one of its kind:
// a service's LoadConfig returns that error as it is.
package envconf

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultNATSURL is the NATS server a service connects to when
// CORRAL_NATS_URL is unset: the local one, as corral dev runs it.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// NATSURL returns CORRAL_NATS_URL, or [DefaultNATSURL].
func NATSURL(getenv func(string) string) string {
	return cmp.Or(getenv("CORRAL_NATS_URL"), DefaultNATSURL)
}

// Int returns the positive whole number the variable name holds, or def.
func Int(getenv func(string) string, name string, def int) (int, error) {
	return parse(getenv, name, def, strconv.Atoi, func(n int) bool { return n > 0 }, "a positive whole number")
}

// Count returns the whole number, 0 or more, the variable name holds, or
// def: for a count where 0 means none.
func Count(getenv func(string) string, name string, def int) (int, error) {
	return parse(getenv, name, def, strconv.Atoi, func(n int) bool { return n >= 0 }, "a whole number, 0 for none")
}

// Bytes returns the positive number of bytes the variable name holds, or
// def.
func Bytes(getenv func(string) string, name string, def int64) (int64, error) {
	return parse(getenv, name, def, func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) },
		func(n int64) bool { return n > 0 }, "a positive number of bytes")
}

// Duration returns the positive Go duration (such as 10s) the variable
// name holds, or def.
func Duration(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	return parse(getenv, name, def, time.ParseDuration, func(d time.Duration) bool { return d > 0 },
		"a positive duration such as "+example(def))
}

// DurationAtLeast returns the Go duration of at least least the variable
// name holds, or def. A least of 0 allows 0.
func DurationAtLeast(getenv func(string) string, name string, def, least time.Duration) (time.Duration, error) {
	want := fmt.Sprintf("a duration of at least %s, such as %s", least, example(def))
	if least == 0 {
		want = "a duration such as " + example(def)
	}
	return parse(getenv, name, def, time.ParseDuration, func(d time.Duration) bool { return d >= least }, want)
}

// parse returns the value the variable name holds, read by read and
// accepted by ok, or def; want says what it wants, in the error.
func parse[T any](getenv func(string) string, name string, def T, read func(string) (T, error), ok func(T) bool, want string) (T, error) {
	s := getenv(name)
	if s == "" {
		return def, nil
	}
	v, err := read(s)
	if err != nil || !ok(v) {
		var zero T
		return zero, fmt.Errorf("%s=%q: want %s", name, s, want)
	}
	return v, nil
}

// Switch returns whether the variable name, on or off, is on, or def.
func Switch(getenv func(string) string, name string, def bool) (bool, error) {
	switch s := getenv(name); s {
	case "":
		return def, nil
	case "on":
		return true, nil
	case "off":
		return false, nil
	default:
		return false, fmt.Errorf("%s=%q: want on or off", name, s)
	}
}

// OneOf returns the value of the variable name, which must be one of
// choices, or def.
func OneOf(getenv func(string) string, name, def string, choices ...string) (string, error) {
	s := getenv(name)
	if s == "" {
		return def, nil
	}
	if slices.Contains(choices, s) {
		return s, nil
	}
	return "", fmt.Errorf("%s=%q: want one of %s", name, s, strings.Join(choices, ", "))
}

// example writes d as a person would set it: 2m rather than 2m0s, and 1m
// when d is 0 (no default).
func example(d time.Duration) string {
	if d <= 0 {
		return "1m"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Secret returns the value of the environment variable name, or else the
// contents of the file that name_FILE names (for secrets mounted as
// files), without surrounding space; "" when neither is set.
func Secret(getenv func(string) string, name string) (string, error) {
	s := getenv(name)
	if f := getenv(name + "_FILE"); f != "" && s == "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("%s_FILE: %w", name, err)
		}
		s = string(b)
	}
	return strings.TrimSpace(s), nil
}
