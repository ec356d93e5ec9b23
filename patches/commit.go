package patches

import (
	"errors"
	"path/filepath"
	"slices"

	"github.com/infera/infera-exec/patches/commit"
	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/infera/infera-exec/patches/plan"
)

// group is one transaction of a run: patches tied by the files they
// change, or read as an earlier patch of the run planned them (see
// plan.Patch.Links). Its files are all written or, after a failure, all restored.
type group struct {
	pats  []int            // its patches, indexes into the run's definitions, in order
	files []*plan.DiskFile // the files they change, in order of first change

	err, restoreErr error
	twice           bool // another writer got in the way of both attempts
}

// groupsOf forms the groups of a run that writes: the connected components
// of the patches over the files that link them, in order of their first
// patch. Patches linked to no file need no commit.
func groupsOf(plans []*plan.Patch, v *plan.View, set *patchdef.Set) []*group {
	parent := make([]int, len(plans))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		if parent[i] != i {
			parent[i] = find(parent[i])
		}
		return parent[i]
	}
	owner := map[*plan.DiskFile]int{} // the first patch linked to the file
	for i, p := range plans {
		if p == nil {
			continue
		}
		for _, d := range p.Links() {
			o, ok := owner[d]
			if !ok {
				owner[d] = i
				continue
			}
			a, b := find(o), find(i)
			parent[max(a, b)] = min(a, b)
		}
	}
	// A patch commits with the patches it requires: it is never written
	// while one of them fails.
	for i, p := range plans {
		if p == nil || len(p.Links()) == 0 {
			continue
		}
		for j, q := range plans {
			if q != nil && len(q.Links()) > 0 && slices.Contains(set.Defs[i].Requires, set.Defs[j].ID) {
				a, b := find(i), find(j)
				parent[max(a, b)] = min(a, b)
			}
		}
	}
	byRoot := map[int]*group{}
	var out []*group
	for i, p := range plans {
		if p == nil || len(p.Links()) == 0 {
			continue
		}
		g := byRoot[find(i)]
		if g == nil {
			g = &group{}
			byRoot[find(i)] = g
			out = append(out, g)
		}
		g.pats = append(g.pats, i)
	}
	for _, d := range v.Changed() {
		g := byRoot[find(owner[d])]
		g.files = append(g.files, d)
	}
	return out
}

// commitGroups writes every group of a run, as Apply describes, and
// settles the groups that failed: a group another writer got in the way
// of is planned and committed afresh once; the patches of a group that
// still failed that wrote nothing themselves are decided again against
// the files as they are now on disk.
func commitGroups(groups []*group, set *patchdef.Set, plans []*plan.Patch, results []Result, buf []byte) {
	commitFiles(groups, plans, buf)
	for _, g := range groups {
		if errors.Is(g.err, commit.ErrChanged) {
			g = replan(g, set, plans, results, buf)
		}
		if g.err != nil {
			redecide(g, set, plans, results)
		}
	}
}

// replan reads the group's files afresh and plans and commits its patches
// again, as one group.
func replan(g *group, set *patchdef.Set, plans []*plan.Patch, results []Result, buf []byte) *group {
	v := plans[g.pats[0]].View().Fresh(true)
	for _, i := range g.pats {
		r := &results[i]
		r.DecideAgain()
		unmet := plan.UnmetRequirement(set, set.Defs[i], results[:i])
		plans[i] = plan.Decide(set.Defs[i], plans[i].Package(), v, unmet != "", r)
		plans[i].Unmet = unmet
	}
	again := &group{pats: g.pats, files: v.Changed()}
	commitFiles([]*group{again}, plans, buf)
	if errors.Is(again.err, commit.ErrChanged) {
		again.twice = true
		for _, i := range again.pats {
			plans[i].Twice = true
		}
	}
	return again
}

// redecide: the patches of a failed group that wrote nothing were decided
// on content that is not on disk; they are decided again on what is. One
// that now needs writing shares the group's failure.
func redecide(g *group, set *patchdef.Set, plans []*plan.Patch, results []Result) {
	v := plans[g.pats[0]].View().Fresh(false)
	for _, i := range g.pats {
		if plans[i].Writes() {
			continue
		}
		r := &results[i]
		r.DecideAgain()
		plans[i] = plan.Decide(set.Defs[i], plans[i].Package(), v, false, r)
		plans[i].Err, plans[i].Twice = g.err, g.twice
	}
}

// lastEditors is, for each file some definition may edit (any variant's
// edits, joined to its package's directory), the last definition that
// may: once that one is planned, the file's content is final.
func lastEditors(set *patchdef.Set, pkgs []Package) map[string]int {
	last := map[string]int{}
	for i, d := range set.Defs {
		if !pkgs[i].Found {
			continue
		}
		for _, v := range d.EditSets() {
			for _, e := range v.Edits {
				last[filepath.Join(pkgs[i].Dir, e.File)] = i
			}
		}
	}
	return last
}

// commitFiles writes the groups' files (package commit): each group's
// files are written together or not at all. The files a writing patch
// read are cleaned of a killed start's leftovers first. Each group's
// outcome goes to its writers' plans.
func commitFiles(groups []*group, plans []*plan.Patch, buf []byte) {
	cgs := make([]*commit.Group, len(groups))
	for k, g := range groups {
		cg := &commit.Group{}
		for _, i := range g.pats {
			if p := plans[i]; p.Writes() {
				cg.Clean = append(cg.Clean, p.Files().Order()...)
			}
		}
		for _, d := range g.files {
			cg.Files = append(cg.Files, d.CommitFile())
		}
		cgs[k] = cg
	}
	commit.Run(cgs, buf)
	for k, g := range groups {
		g.err, g.restoreErr = cgs[k].Err, cgs[k].RestoreErr
		for _, i := range g.pats {
			if p := plans[i]; p.Writes() {
				p.Err, p.RestoreErr = g.err, g.restoreErr
			}
		}
	}
}

// stageFinal starts staging, beside the planning of the patches after
// patch i, each file the run changes whose content no later patch may
// change (commit.File.StageEarly): the commit then finds them staged, or
// still being fsynced. A file whose path lastEditors does not know (the
// package reached through a link) waits for the commit.
func stageFinal(v *plan.View, last map[string]int, i int) {
	for _, d := range v.Changed() {
		if j, ok := last[d.Path()]; d.Planned() == d.Read() || !ok || j > i || d.Staged() != nil && d.Staged().Staging() {
			continue
		}
		d.CommitFile().StageEarly()
	}
}
