// Package weights answers which files hold a model's weights and how
// large they are: the format an engine prefers (safetensors, else .bin,
// then .pt/.pth, then GGUF), in the model directory itself or one level
// down. The preflight's model check and the init's word on a worker the
// OOM killer ended read the same way.
package weights

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/infera/infera-exec/internal/boundedread"
)

// shardGroups are the weight formats in the order an engine prefers them:
// a repository shipping both safetensors and .bin loads only the former.
var shardGroups = [...]struct {
	pattern string
	exts    []string
}{
	{"*.safetensors", []string{".safetensors"}},
	{"*.bin", []string{".bin"}},
	{"*.pt, *.pth", []string{".pt", ".pth"}},
	{"*.gguf", []string{".gguf"}},
}

// Patterns names every weight format, for messages.
const Patterns = "*.safetensors, *.bin, *.pt, *.pth, *.gguf"

func group(name string) int {
	ext := strings.ToLower(filepath.Ext(name))
	for i, g := range shardGroups {
		for _, e := range g.exts {
			if ext == e {
				return i
			}
		}
	}
	return -1
}

const ggufGroup = 3 // index of *.gguf in shardGroups

// IsGGUF: name is a GGUF checkpoint, which may be given as the file
// itself.
func IsGGUF(name string) bool { return group(name) == ggufGroup }

// Scan is the weight files of a model directory, of the format the
// engine loads.
type Scan struct {
	Count     int    `json:"count"`
	Size      uint64 `json:"size"`
	Pattern   string `json:"pattern,omitempty"`
	First     string `json:"first,omitempty"`      // a shard to try opening
	Subdirs   bool   `json:"subdirs,omitempty"`    // found one level down, not in the directory itself
	BadShard  string `json:"bad_shard,omitempty"`  // a shard that cannot be stat'ed (dangling link)
	BadReason string `json:"bad_reason,omitempty"` // why, without the path
}

// ScanDir collects the weight files of dir: those in dir itself, else
// those one level down, of the format the engine prefers.
func ScanDir(dir string, entries []os.DirEntry) Scan {
	files, bad, why := shardFiles(dir, entries)
	if scan := pick(files, bad, why); scan.Count > 0 || scan.BadShard != "" {
		return scan
	}
	var all [len(shardGroups)][]shardFile
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") { // .cache/huggingface, .git
			continue
		}
		p := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			continue
		}
		sub, err := os.ReadDir(p)
		if err != nil {
			continue
		}
		files, b, w := shardFiles(p, sub)
		if bad == "" {
			bad, why = b, w
		}
		for g := range files {
			all[g] = append(all[g], files[g]...)
		}
	}
	scan := pick(all, bad, why)
	scan.Subdirs = true
	return scan
}

type shardFile struct {
	path string
	size int64
}

// shardFiles sorts the weight files among entries by format. Links are
// followed (a Hugging Face cache snapshot links every file to a blob).
func shardFiles(dir string, entries []os.DirEntry) (files [len(shardGroups)][]shardFile, bad string, why error) {
	for _, e := range entries {
		g := group(e.Name())
		if g < 0 || e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := os.Stat(p)
		if err != nil {
			if bad == "" {
				bad, why = p, err
			}
			continue
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		files[g] = append(files[g], shardFile{p, fi.Size()})
	}
	return files, bad, why
}

// pick counts the files of the preferred format present.
func pick(files [len(shardGroups)][]shardFile, bad string, why error) Scan {
	scan := Scan{BadShard: bad}
	if why != nil {
		scan.BadReason = boundedread.BareErr(why).Error()
	}
	for g, fs := range files {
		if len(fs) == 0 {
			continue
		}
		scan.Pattern = shardGroups[g].pattern
		scan.Count = len(fs)
		scan.First = fs[0].path
		for _, f := range fs {
			scan.Size += uint64(f.size)
		}
		return scan
	}
	return scan
}

// Read lists dir and scans it.
func Read(dir string) (Scan, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Scan{}, err
	}
	return ScanDir(dir, entries), nil
}
