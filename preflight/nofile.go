package preflight

import (
	"fmt"
)

// rlimInfinity is RLIM_INFINITY as getrlimit(2) returns it in a uint64.
const rlimInfinity = ^uint64(0)

func checkNofile(in *Facts) Result {
	min, note := in.NofileMin, ""
	switch hard := in.NofileHard; {
	case hard == 0:
		return skipped("the open-file hard limit is unknown" + note)
	case hard == rlimInfinity:
		return pass("open-file hard limit unlimited" + note)
	case hard < min:
		return fail(Warn, fmt.Sprintf("open-file hard limit %d, below the %d minimum%s", hard, min, note),
			"A router or API server holds a socket per in-flight request "+
				"besides the engine's own files; at the limit accept() fails "+
				"and clients hang until their own timeout.",
			"Raise the container runtime's nofile limit: LimitNOFILE=1048576 "+
				"in the containerd or docker systemd unit, or docker run "+
				"--ulimit nofile=1048576:1048576. infera-exec raises the soft "+
				"limit to the hard one but cannot raise the hard one.")
	default:
		return pass(fmt.Sprintf("open-file hard limit %d (minimum %d)%s", hard, min, note))
	}
}
