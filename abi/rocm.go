// Package abi decides the container's ABI family: the ROCm major its HIP
// runtime was built as, and the CPython minor of its interpreter. Native
// payload trees are built per family (e.g. rocm7-py312).
package abi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/infera/infera-exec/internal/elfload"
	"github.com/infera/infera-exec/internal/linkchain"
	"github.com/infera/infera-exec/internal/logging"
	"golang.org/x/sys/unix"
)

const hipLib = "libamdhip64.so"

// ROCm is what was found of the container's HIP runtime.
type ROCm struct {
	Found     bool     `json:"found"`
	Major     int      `json:"major,omitempty"`
	Searched  []string `json:"searched"`             // library directories looked in
	Library   string   `json:"library,omitempty"`    // the name the search started from
	Chain     []string `json:"chain,omitempty"`      // symlink hops, Library first
	Soname    string   `json:"soname,omitempty"`     // DT_SONAME of the final file
	DecidedBy string   `json:"decided_by,omitempty"` // how Major was decided
	Notes     []string `json:"notes,omitempty"`
}

// DetectROCm looks for libamdhip64 in <root>/lib for each root in turn
// (ROCM_PATH first when set, then /opt/rocm) and takes the major version
// from the SONAME of the file the symlink chain ends at. A broken chain is
// an error: an image whose HIP runtime dangles cannot run a GPU worker, and
// guessing a family from it would pick the wrong native tree.
func DetectROCm(roots []string) (ROCm, error) {
	var r ROCm
	seen := map[string]bool{}
	for _, root := range roots {
		if root == "" || seen[root] {
			continue
		}
		seen[root] = true
		dir := filepath.Join(root, "lib")
		r.Searched = append(r.Searched, dir)
		cands, err := candidates(dir)
		if err != nil {
			return r, err
		}
		if len(cands) == 0 {
			continue
		}
		return r, r.decide(cands)
	}
	return r, nil
}

// candidates lists libamdhip64.so (the link the toolchain uses) and then the
// versioned names, newest first.
func candidates(dir string) ([]string, error) {
	// Names alone, unsorted: a ROCm lib directory holds hundreds of
	// entries, and only libamdhip64's matter (sorted below).
	names, err := readNames(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read ROCm library directory %s: %w", dir, err)
	}
	var plain bool
	var versioned []string
	for _, name := range names {
		switch {
		case name == hipLib:
			plain = true
		case isVersionedHip(name):
			versioned = append(versioned, name)
		}
	}
	// Newest version first; equal versions in name order.
	slices.SortFunc(versioned, func(a, b string) int {
		switch {
		case versionLess(b, a):
			return -1
		case versionLess(a, b):
			return 1
		}
		return strings.Compare(a, b)
	})
	var out []string
	if plain {
		out = append(out, filepath.Join(dir, hipLib))
	}
	for _, v := range versioned {
		out = append(out, filepath.Join(dir, v))
	}
	return out, nil
}

// readNames opens dir as a directory only, without blocking: a FIFO
// planted at <rocm>/lib would otherwise hold every start in open(2).
func readNames(dir string) ([]string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	return f.Readdirnames(-1)
}

func (r *ROCm) decide(cands []string) error {
	r.Library = cands[0]
	chain, err := linkchain.Follow(r.Library)
	r.Chain = chain
	if err != nil {
		full := fmt.Errorf("ROCm HIP runtime %s: %w; fix the image, point ROCM_PATH at a working ROCm, or set INFERA_ABI_FAMILY", r.Library, err)
		reason := err.Error()
		var le *linkchain.Error
		if errors.As(err, &le) {
			reason = le.Reason() // the library is named once
		}
		return logging.WithBrief(full, fmt.Sprintf("ROCm HIP runtime %s: %s; fix the image, ROCM_PATH or INFERA_ABI_FAMILY", r.Library, reason))
	}
	final := chain[len(chain)-1]
	if fi, err := os.Stat(final); err != nil {
		return fmt.Errorf("ROCm HIP runtime %s: %w", final, err)
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("ROCm HIP runtime %s is not a regular file (%s)", final, fi.Mode().Type())
	}

	majors := map[int]bool{}
	for _, c := range cands {
		if m, ok := hipSonameMajor(filepath.Base(c)); ok {
			n, _ := strconv.Atoi(m)
			majors[n] = true
		}
	}
	if len(majors) > 1 {
		r.Notes = append(r.Notes, fmt.Sprintf("several libamdhip64 majors in %s; the one %s leads to decides", filepath.Dir(r.Library), filepath.Base(r.Library)))
	}

	soname, err := readSoname(final)
	if err == nil {
		m, ok := hipSonameMajor(soname)
		if !ok {
			return fmt.Errorf("ROCm HIP runtime %s: SONAME %q is not libamdhip64.so.N", final, soname)
		}
		r.Soname = soname
		r.Major, _ = strconv.Atoi(m)
		r.Found = true
		r.DecidedBy = fmt.Sprintf("SONAME %s of %s", soname, final)
		return nil
	}
	// No usable SONAME (not ELF, or stripped of its dynamic section): the
	// versioned file names of the chain still say which major it is.
	r.Notes = append(r.Notes, fmt.Sprintf("%s: %v; using the file names of the symlink chain", final, err))
	for _, p := range chain {
		if m, ok := hipSonameMajor(filepath.Base(p)); ok {
			r.Major, _ = strconv.Atoi(m)
			r.Found = true
			r.DecidedBy = "file name " + p
			return nil
		}
	}
	return fmt.Errorf("ROCm HIP runtime %s: no SONAME (%v) and no versioned name in its symlink chain %v", final, err, chain)
}

// readSoname is the SONAME of the shared object at path. Its errors leave
// the path to the caller, which names the file.
func readSoname(path string) (string, error) {
	soname, err := elfload.Soname(path)
	if err != nil {
		reason := elfload.Reason(err)
		if errors.Is(err, elfload.ErrNotSharedObject) {
			return "", errors.New(reason)
		}
		return "", fmt.Errorf("not a readable ELF file: %s", reason)
	}
	if soname == "" {
		return "", errors.New("no DT_SONAME")
	}
	return soname, nil
}

func isVersionedHip(name string) bool {
	_, ok := hipSonameMajor(name)
	return ok
}

// versionLess orders libamdhip64.so.7 < libamdhip64.so.7.1.70100 <
// libamdhip64.so.10 by comparing the numeric parts.
func versionLess(a, b string) bool {
	na, nb := numbers(a), numbers(b)
	for i := 0; i < len(na) && i < len(nb); i++ {
		if na[i] != nb[i] {
			return na[i] < nb[i]
		}
	}
	return len(na) < len(nb)
}

func numbers(s string) []int {
	var out []int
	for _, d := range digitRuns(s[len(hipLib):]) {
		n, _ := strconv.Atoi(d)
		out = append(out, n)
	}
	return out
}
