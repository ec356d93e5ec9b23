package fileid

import "testing"

// Every field of an identity reaches its key: a change to any one of
// them is a different key.
func TestAppendKeyCoversEveryField(t *testing.T) {
	base := Identity{Dev: 1, Ino: 2, Size: 3, Mode: 4, Mtime: 5, Ctime: 6}
	key := string(base.AppendKey(nil))
	for name, id := range map[string]Identity{
		"dev":    {Dev: 9, Ino: 2, Size: 3, Mode: 4, Mtime: 5, Ctime: 6},
		"ino":    {Dev: 1, Ino: 9, Size: 3, Mode: 4, Mtime: 5, Ctime: 6},
		"size":   {Dev: 1, Ino: 2, Size: 9, Mode: 4, Mtime: 5, Ctime: 6},
		"mode":   {Dev: 1, Ino: 2, Size: 3, Mode: 9, Mtime: 5, Ctime: 6},
		"mtime":  {Dev: 1, Ino: 2, Size: 3, Mode: 4, Mtime: 9, Ctime: 6},
		"ctime":  {Dev: 1, Ino: 2, Size: 3, Mode: 4, Mtime: 5, Ctime: 9},
		"absent": {Dev: 1, Ino: 2, Size: 3, Mode: 4, Mtime: 5, Ctime: 6, Absent: true},
		// Fields run together would make these two one key.
		"boundary": {Dev: 12, Ino: 0, Size: 3, Mode: 4, Mtime: 5, Ctime: 6},
	} {
		if string(id.AppendKey(nil)) == key {
			t.Errorf("%s: key unchanged: %q", name, key)
		}
	}
	if a, b := (Identity{Dev: 1, Ino: 23}).AppendKey(nil), (Identity{Dev: 12, Ino: 3}).AppendKey(nil); string(a) == string(b) {
		t.Errorf("fields run together: %q", a)
	}
}
