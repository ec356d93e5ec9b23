package preflight

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/config"
)

func TestNofile(t *testing.T) {
	r := checkNofile(&Facts{NofileHard: 1048576, NofileMin: config.DefaultNofileMin})
	assert.Equal(t, Pass, r.Status)
	assert.Equal(t, "open-file hard limit 1048576 (minimum 65536)", r.Seen)

	r = checkNofile(&Facts{NofileHard: 65536, NofileMin: config.DefaultNofileMin}) // exactly the minimum
	assert.Equal(t, Pass, r.Status)

	r = checkNofile(&Facts{NofileHard: ^uint64(0), NofileMin: config.DefaultNofileMin})
	assert.Equal(t, Pass, r.Status)
	assert.Equal(t, "open-file hard limit unlimited", r.Seen)

	r = checkNofile(&Facts{NofileHard: 1024, NofileMin: config.DefaultNofileMin})
	require.Equal(t, Fail, r.Status)
	assert.Equal(t, Warn, r.Severity)
	assert.Equal(t, "open-file hard limit 1024, below the 65536 minimum", r.Seen)
	assert.Equal(t, "A router or API server holds a socket per in-flight request besides the engine's own files; at the limit accept() fails and clients hang until their own timeout.", r.Why)
	assert.Equal(t, "Raise the container runtime's nofile limit: LimitNOFILE=1048576 in the containerd or docker systemd unit, or docker run --ulimit nofile=1048576:1048576. infera-exec raises the soft limit to the hard one but cannot raise the hard one.", r.Do)
}

func TestNofileMinimum(t *testing.T) {
	r := checkNofile(&Facts{NofileHard: 65536, NofileMin: 1048576})
	require.Equal(t, Fail, r.Status)
	assert.Equal(t, "open-file hard limit 65536, below the 1048576 minimum", r.Seen)

	r = checkNofile(&Facts{NofileHard: 1024, NofileMin: 1024})
	assert.Equal(t, Pass, r.Status)
	assert.Equal(t, "open-file hard limit 1024 (minimum 1024)", r.Seen)
}

func TestNofileSkipped(t *testing.T) {
	r := checkNofile(&Facts{})
	assert.Equal(t, Skipped, r.Status)
	assert.Equal(t, "the open-file hard limit is unknown", r.Seen)
}
