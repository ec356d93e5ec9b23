package config

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var plainIntRE = regexp.MustCompile(`^[+-]?[0-9]+$`)

func FuzzParseSeconds(f *testing.F) {
	for _, s := range []string{
		"2400", "90.5", "0.2", "90m", "2h", "1h30m", "", "abc", "-5", "0", "NaN", "inf",
		"1e400", "10 minutes", " 30 ", "9223372036", "9223372037", "9223372036.854775807",
		"-9223372036.854775808", "1e-9", "0x1p4", "300ms", "-1h",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseSeconds(s)
		if err != nil {
			if d != 0 {
				t.Fatalf("ParseSeconds(%q) = %v with error %v; want 0 on error", s, d, err)
			}
			return
		}
		trimmed := strings.TrimSpace(s)

		// A plain integer n is n seconds, exactly, and every n that fits
		// a Duration is accepted.
		if plainIntRE.MatchString(trimmed) {
			n, convErr := strconv.ParseInt(trimmed, 10, 64)
			if convErr != nil {
				t.Fatalf("ParseSeconds(%q) = %v, but the integer does not even fit int64", s, d)
			}
			if n > math.MaxInt64/int64(time.Second) || n < math.MinInt64/int64(time.Second) {
				t.Fatalf("ParseSeconds(%q) = %v, but %d seconds do not fit a Duration", s, d, n)
			}
			if want := time.Duration(n) * time.Second; d != want {
				t.Fatalf("ParseSeconds(%q) = %v, want %v", s, d, want)
			}
		}

		// A number of seconds keeps its sign and (within float precision)
		// its value: it never wraps around.
		if fv, ferr := strconv.ParseFloat(trimmed, 64); ferr == nil {
			if fv > 0 && d < 0 || fv < 0 && d > 0 {
				t.Fatalf("ParseSeconds(%q) = %v: sign flipped", s, d)
			}
			want := fv * float64(time.Second)
			if diff := math.Abs(float64(d) - want); diff > 1+math.Abs(want)*1e-12 {
				t.Fatalf("ParseSeconds(%q) = %v (%d ns), want about %g ns", s, d, int64(d), want)
			}
		}
	})
}

func FuzzParseSecondsPlainInteger(f *testing.F) {
	for _, n := range []int64{0, 1, 90, 1800, 2400, 86400, 9223372036, -5, math.MaxInt64 / int64(time.Second)} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		s := strconv.FormatInt(n, 10)
		d, err := ParseSeconds(s)
		fits := n <= math.MaxInt64/int64(time.Second) && n >= math.MinInt64/int64(time.Second)
		if !fits {
			if err == nil {
				t.Fatalf("ParseSeconds(%q) = %v, want an out-of-range error", s, d)
			}
			return
		}
		if err != nil {
			t.Fatalf("ParseSeconds(%q): %v", s, err)
		}
		if want := time.Duration(n) * time.Second; d != want {
			t.Fatalf("ParseSeconds(%q) = %v, want %v", s, d, want)
		}
	})
}
