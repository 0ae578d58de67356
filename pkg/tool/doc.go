// Package tool defines the tools the model sees — Bash, Read, Write, Edit, Glob
// and Grep, with the names and argument fields models are trained on — and
// parses and validates the arguments of a call.
//
// The harness hands [Specs] to the model and checks every call with [Parse]
// before it is dispatched; the sandbox-manager parses the same arguments again
// before it runs them, so neither trusts the other's input.
package tool
