package closest

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A variable name is flagged for a typo, for words cut off and for words
// added; a name that is none of these is somebody else's.
func TestVariable(t *testing.T) {
	ours := []string{"INFERA_ENGINE_READY_TIMEOUT", "INFERA_EXEC_LOG", "INFERA_EXEC_LOG_LEVEL", "INFERA_PREFLIGHT", "INFERA_PREFLIGHT_SKIP", "PAYLOAD_ROOT"}
	all := append([]string{"INFERA_KVD_AIS"}, ours...)
	for _, c := range []struct{ name, want string }{
		{"INFERA_ENGINE_READY", "INFERA_ENGINE_READY_TIMEOUT"},        // cut short
		{"INFERA_ENGINE", "INFERA_ENGINE_READY_TIMEOUT"},              // by two words
		{"infera_engine_ready", "INFERA_ENGINE_READY_TIMEOUT"},        // case does not matter
		{"INFERA_ENGINE_READY_TIMOUT", "INFERA_ENGINE_READY_TIMEOUT"}, // a typo
		{"INFERA_EXEC_LOG_FORMAT", "INFERA_EXEC_LOG"},                 // a word added
		{"INFERA_EXEC_LOG_LEVEL_NAME", "INFERA_EXEC_LOG_LEVEL"},       // the longest that fits
		{"INFERA_PREFLIGHT_SKIP_LIST", "INFERA_PREFLIGHT_SKIP"},
		{"PAYLOAD_ROOT_DIR", "PAYLOAD_ROOT"},
		{"INFERA_KVD_AIZ", "INFERA_KVD_AIS"}, // typos of everyone's names
		{"INFERA_KVD_AIS_DEVICES", ""},       // words added only to ours
		{"INFERA", ""},                       // a bare prefix is nobody's
		{"INFERA_SOMETHING_ELSE", ""},
	} {
		assert.Equal(t, c.want, Variable(c.name, all, ours), c.name)
	}
}
