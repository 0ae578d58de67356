//go:build !race

package main

// raceDetector is set when the tests run with the race detector (see
// race_on_test.go).
const raceDetector = false
