package patches

import (
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/patches/source"
)

// identity is a file's identity (package fileid), the key of the record
// and the probe cache.
type identity = fileid.Identity

// Caps on the files infera-exec reads here: an engine source file, a
// dist-info METADATA, the probe cache and the patch record. Anything
// larger is not what it claims to be.
const (
	maxSourceBytes   = source.MaxBytes
	maxMetadataBytes = 4 << 20
	maxStateBytes    = 4 << 20
)
