package testsupport

import "testing"

// Rounds is how many rounds a loop test runs: long ones in make test-long
// (go test), short ones in make test (go test -short), where each round
// still checks every property and only the sample is smaller.
func Rounds(long, short int) int {
	if testing.Short() {
		return short
	}
	return long
}
