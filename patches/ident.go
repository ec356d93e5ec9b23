package patches

import "github.com/infera/infera-exec/internal/fileid"

// identity is a file's identity (package fileid), the key of the record
// and the probe cache.
type identity = fileid.Identity

// Caps on the files infera-exec reads here: a dist-info METADATA, the
// probe cache and the patch record (an engine source file's is
// source.MaxBytes). Anything larger is not what it claims to be.
const (
	maxMetadataBytes = 4 << 20
	maxStateBytes    = 4 << 20
)
