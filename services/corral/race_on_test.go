//go:build race

package main

// raceDetector is set when the tests run with the race detector, which
// makes Go code many times slower: timings are logged then, not held to
// their targets.
const raceDetector = true
