// Package closest finds the known name an operator probably meant: the
// one suggestion behind every "did you mean ...?".
package closest

import "strings"

// Name is the candidate nearest to s by edit distance, case-insensitive,
// when it is near enough to be a typo of it (at most a third of s's
// length, and at most 4 edits); "" otherwise. Ties go to the earlier
// candidate.
func Name(s string, candidates []string) string {
	best, bestD := "", -1
	limit := min(4, max(1, len(s)/3))
	for _, c := range candidates {
		d := Distance(strings.ToLower(s), strings.ToLower(c))
		if d <= limit && (bestD < 0 || d < bestD) {
			best, bestD = c, d
		}
	}
	return best
}

// Distance is the Damerau-Levenshtein distance (with adjacent
// transpositions, the commonest typo) between a and b, by bytes.
func Distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// Variable is the variable name s probably stands for: a typo of a
// candidate (Name), else a candidate cut short at a word ("_") boundary
// (INFERA_ENGINE_READY for INFERA_ENGINE_READY_TIMEOUT: the shortest such
// candidate), else a candidate with words added (INFERA_EXEC_LOG_FORMAT
// for INFERA_EXEC_LOG: the longest). A truncation keeps at least two
// words, so a bare prefix such as INFERA is nobody's; "" when none fits.
// typos and words are the candidates of each rule: every name somebody
// reads may be misspelt, and only those of the caller's own are worth a
// truncation or an extension.
func Variable(s string, typos, words []string) string {
	if c := Name(s, typos); c != "" {
		return c
	}
	u := strings.ToUpper(s)
	short, long := "", ""
	for _, c := range words {
		cu := strings.ToUpper(c)
		switch {
		case strings.Count(u, "_") >= 1 && strings.HasPrefix(cu, u+"_"):
			if short == "" || len(c) < len(short) {
				short = c
			}
		case strings.HasPrefix(u, cu+"_"):
			if len(c) > len(long) {
				long = c
			}
		}
	}
	if short != "" {
		return short
	}
	return long
}
