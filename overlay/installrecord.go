package overlay

import (
	"encoding/json"
	"time"

	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/fileid"
)

// The install record is what makes a re-install cheap: right after an
// install has checked every file it leaves in DEST (copied and read
// back, or found identical by reading it), it keeps, in DEST, the
// identity of each (fileid.Identity: device, inode, size, mode,
// modification and change times to the nanosecond) and its owner, with
// the SHA-256 it was checked against. A later install whose payload
// lists a file with that SHA-256, where DEST holds a file of that
// identity and owner, has the bytes that were checked: every write moves
// the change time, which user space cannot set, and a chown or chmod
// moves it too. Anything else (no record, one that is not the
// installer's alone, another digest, a changed identity) reads the file
// again in full, as the patch record falls back to the full check.
//
// The record is trusted only as far as DEST is: DEST is the installer's
// and not writable by group or others (an install refuses a DEST it
// cannot make so), below directories only root or the installer can
// change, and the record itself must be a regular file of the
// installer's, with one link, that group and others cannot write. Whoever
// can write it as root could rewrite the installed files as well.
const recordName = ".infera-install-record.json"

// installRecordVersion changes with the record's format or meaning.
const installRecordVersion = 1

type installRecord struct {
	Version int                     `json:"version"`
	Files   map[string]recordedFile `json:"files"` // by entry path
}

type recordedFile struct {
	SHA256 string          `json:"sha256"`
	ID     fileid.Identity `json:"id"`
	UID    uint32          `json:"uid"`
}

// loadRecord reads DEST's record, or nil when there is none that can be
// believed.
func (in *installer) loadRecord() *installRecord {
	fd, err := unix.Openat(in.fd, recordName, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || !isRegMode(st.Mode) || st.Uid != in.euid || st.Nlink != 1 || st.Mode&0o022 != 0 || st.Size > boundedread.Index {
		return nil
	}
	data := make([]byte, st.Size)
	if n, err := unix.Pread(fd, data, 0); err != nil || int64(n) != st.Size {
		return nil
	}
	var rec installRecord
	if json.Unmarshal(data, &rec) != nil || rec.Version != installRecordVersion {
		return nil
	}
	return &rec
}

// holds reports whether the file of entry e, whose lstat is st, is the
// one the record vouches for: the same content digest, identity and
// owner (the installer).
func (r *installRecord) holds(e Entry, st *unix.Stat_t, euid uint32) bool {
	if r == nil {
		return false
	}
	f, ok := r.Files[e.Path]
	return ok && f.SHA256 == e.SHA256 && f.UID == euid && st.Uid == euid && f.ID == fileid.Of(st)
}

// settleWait bounds how long an install waits, before recording, for the
// file clock to pass the change times of the files it just placed.
const settleWait = 100 * time.Millisecond

// writeRecord keeps the identities of the files of this install, checked
// by it (ids[i] for entry i; zero: not checked, not kept). An identity
// taken before the file clock passed its change time could be kept by a
// second write in the same tick (fileid.SettledAt), so the record waits
// for the clock (one tick, a few milliseconds) and leaves out what is
// still unsettled then. Best effort: without a record the next install
// reads every file.
func (in *installer) writeRecord(ids []fileid.Identity) {
	deadline := time.Now().Add(settleWait)
	for {
		now := fileid.Now()
		settled := true
		for _, id := range ids {
			if id != (fileid.Identity{}) && !id.SettledAt(now) {
				settled = false
				break
			}
		}
		if settled || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	now := fileid.Now()
	rec := installRecord{Version: installRecordVersion, Files: map[string]recordedFile{}}
	for i, id := range ids {
		if id == (fileid.Identity{}) || !id.SettledAt(now) {
			continue
		}
		e := in.ix.Entries[i]
		rec.Files[e.Path] = recordedFile{SHA256: e.SHA256, ID: id, UID: in.euid}
	}
	data, err := json.Marshal(&rec)
	if err != nil {
		return
	}
	writeAtomicAt(in.fd, recordName, data)
}
