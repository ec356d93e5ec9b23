package patches_test

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/patches"
	"github.com/infera/infera-exec/patches/patchdef"
)

// The coverage tables of docs/patches.md ("Coverage on upstream
// releases") are generated: each block between
//
//	<!-- coverage:begin NAME -->  and  <!-- coverage:end NAME -->
//
// is the states --check gives every built-in of one package on one set
// of revisions of a mirror (coverageSets), each revision's tree laid
// down from git with the files the package's built-ins edit or guard.
//
//	INFERA_SGLANG_GIT=DIR INFERA_VLLM_GIT=DIR go test -run TestCoverageTables ./patches/ -update-coverage
//
// writes them; without -update-coverage the same run fails where the
// document differs from what the mirrors give. TestCoverageTableShape,
// which needs no mirror, holds the blocks in the document to the
// built-ins.
var updateCoverage = flag.Bool("update-coverage", false, "rewrite the coverage tables of docs/patches.md from the mirrors (INFERA_SGLANG_GIT, INFERA_VLLM_GIT)")

const coverageDoc = "../docs/patches.md"

// coverageSet is one generated table: which revisions of which mirror,
// in what order, and how they are grouped.
type coverageSet struct {
	name    string // the block's NAME
	pkg     string // the package whose built-ins it lists
	env     string // names the mirror's git directory
	src     string // the package directory in the mirror's tree
	what    string // the sentence above the table, after "States on"
	byState bool   // group every revision with the same states (branch tips), not runs of consecutive ones
	list    func(g *gitDir) ([]revision, error)
}

// revision is one tree to check: a commit and how the table names it.
type revision struct {
	commit string
	label  string // a tag or branch name; "" for a commit on a line of history
	date   string // commit date, YYYY-MM-DD
	unix   int64
}

// name is how a row of the table names the revision.
func (r revision) name() string {
	short := "`" + r.commit[:10] + "`"
	if r.label != "" {
		return "`" + r.label + "`"
	}
	return short + " " + r.date
}

const (
	sglangMainSince = "2025-04-10"
	vllmMainSince   = "2025-05-01"
	branchesSince   = "2026-06-01"
	// vllmEvery: of the vLLM main commits that change only the
	// scheduler, the runners or the worker (hundreds), every this many.
	vllmEvery = 8
)

// vllmConnectorPaths are the vLLM files whose every change is checked;
// the other files the vLLM built-ins name change too often for that.
var vllmConnectorPaths = []string{
	"vllm/distributed/kv_transfer/kv_connector/v1/mooncake/mooncake_connector.py",
	"vllm/distributed/kv_transfer/kv_connector/v1/moriio/",
	"vllm/v1/worker/gpu/kv_connector.py",
}

var coverageSets = []coverageSet{
	{name: "sglang-tags", pkg: "sglang", env: "INFERA_SGLANG_GIT", src: "python/sglang",
		what: "every tag `v*` of the SGLang mirror, by commit date",
		list: func(g *gitDir) ([]revision, error) { return g.tags("v*") }},
	{name: "sglang-main", pkg: "sglang", env: "INFERA_SGLANG_GIT", src: "python/sglang",
		what: "every commit of SGLang main from " + sglangMainSince + " that changed a file the SGLang built-ins edit",
		list: func(g *gitDir) ([]revision, error) {
			return g.mainCommits(sglangMainSince, "python/sglang", editFiles("sglang"), nil)
		}},
	{name: "sglang-branches", pkg: "sglang", env: "INFERA_SGLANG_GIT", src: "python/sglang", byState: true,
		what: "the tip of every other branch of the SGLang mirror committed from " + branchesSince,
		list: func(g *gitDir) ([]revision, error) { return g.branches(branchesSince) }},
	{name: "vllm-tags", pkg: "vllm", env: "INFERA_VLLM_GIT", src: "vllm",
		what: "every tag of the vLLM mirror, by commit date",
		list: func(g *gitDir) ([]revision, error) { return g.tags("*") }},
	{name: "vllm-main", pkg: "vllm", env: "INFERA_VLLM_GIT", src: "vllm",
		what: fmt.Sprintf("vLLM main from %s: every commit that changed the Mooncake or MoRIIO connector or Model Runner V2's `kv_connector.py`, every %dth other commit that changed a file the vLLM built-ins edit, and the newest", vllmMainSince, vllmEvery),
		list: func(g *gitDir) ([]revision, error) {
			return g.mainCommits(vllmMainSince, "vllm", editFiles("vllm"), vllmConnectorPaths)
		}},
	{name: "vllm-branches", pkg: "vllm", env: "INFERA_VLLM_GIT", src: "vllm", byState: true,
		what: "the tip of every other branch of the vLLM mirror committed from " + branchesSince,
		list: func(g *gitDir) ([]revision, error) { return g.branches(branchesSince) }},
}

// TestCoverageTables regenerates the coverage tables from the mirrors
// (see updateCoverage) and, without -update-coverage, fails where
// docs/patches.md differs from them.
func TestCoverageTables(t *testing.T) {
	dirs := map[string]string{}
	for _, s := range coverageSets {
		dirs[s.env] = os.Getenv(s.env)
	}
	_, gerr := exec.LookPath("git")
	if dirs["INFERA_SGLANG_GIT"] == "" || dirs["INFERA_VLLM_GIT"] == "" || gerr != nil {
		t.Skip("coverage tables: needs INFERA_SGLANG_GIT and INFERA_VLLM_GIT (git directories of SGLang and vLLM; the bytedance-iaas/sglang and neuralmagic/vllm mirrors) and git: " +
			"INFERA_SGLANG_GIT=DIR INFERA_VLLM_GIT=DIR go test -run TestCoverageTables ./patches/ [-update-coverage]")
	}
	doc, err := os.ReadFile(coverageDoc)
	require.NoError(t, err)
	out := string(doc)
	for _, s := range coverageSets {
		g, err := openGit(dirs[s.env])
		require.NoError(t, err)
		block, err := generateCoverage(t, g, s)
		g.close()
		require.NoError(t, err, s.name)
		if !*updateCoverage {
			was, _ := findBlock(out, s.name)
			assert.Equal(t, was, block, "docs/patches.md's block %s is not what the mirrors give: run with -update-coverage", s.name)
		}
		out, err = replaceBlock(out, s.name, block)
		require.NoError(t, err)
	}
	if *updateCoverage {
		require.NoError(t, os.WriteFile(coverageDoc, []byte(out), 0o644))
	}
}

// TestCoverageTableShape holds the generated blocks of docs/patches.md to
// the built-ins, without the mirrors: every set has its block; in it,
// every built-in of the set's package has rows and no row names another
// id; every id's rows count the same revisions; each state is a state,
// and each variant one of the definition's.
func TestCoverageTableShape(t *testing.T) {
	defs, err := patchdef.Builtin()
	require.NoError(t, err)
	doc, err := os.ReadFile(coverageDoc)
	require.NoError(t, err)
	for _, s := range coverageSets {
		t.Run(s.name, func(t *testing.T) {
			block, ok := findBlock(string(doc), s.name)
			require.True(t, ok, "docs/patches.md has no block %s", s.name)
			rows := parseCoverageRows(t, block)
			require.NotEmpty(t, rows)
			want := map[string]*patchdef.Definition{}
			for _, d := range defs {
				if d.Package == s.pkg {
					want[d.ID] = d
				}
			}
			counts := map[string]int{}
			for _, r := range rows {
				d, ok := want[r.id]
				if !assert.True(t, ok, "a row of %s names %s, which is no built-in of %s", s.name, r.id, s.pkg) {
					continue
				}
				counts[r.id] += r.n
				assert.True(t, slices.Contains(coverageStates, r.state), "%s: %s: state %q", s.name, r.id, r.state)
				if r.variant != "" {
					assert.True(t, slices.ContainsFunc(d.Variants, func(v patchdef.Variant) bool { return v.Name == r.variant }),
						"%s: %s has no variant %s", s.name, r.id, r.variant)
				}
			}
			for id := range want {
				assert.Contains(t, counts, id, "%s has no row for %s", s.name, id)
			}
			total := -1
			for id, n := range counts {
				if total < 0 {
					total = n
				}
				assert.Equal(t, total, n, "%s: the rows of %s count %d revisions, another id's %d", s.name, id, n, total)
			}
		})
	}
}

// The shape check fails on a block that names an id no built-in has or
// leaves one out.
func TestCoverageTableShapeCanFail(t *testing.T) {
	block := "| patch | revisions | n | state |\n|---|---|---|---|\n" +
		"| `sglang-no-such-patch` | `v0.1` | 1 | pending |\n"
	rows := parseCoverageRows(t, block)
	require.Len(t, rows, 1)
	defs, err := patchdef.Builtin()
	require.NoError(t, err)
	assert.False(t, slices.ContainsFunc(defs, func(d *patchdef.Definition) bool { return d.ID == rows[0].id }))
	_, err = replaceBlock("no markers here", "sglang-tags", "x")
	assert.Error(t, err)
}

var coverageStates = []string{
	string(patchdef.Pending), string(patchdef.Applied), string(patchdef.Upstream), string(patchdef.NotApplicable),
	string(patchdef.Drift), string(patchdef.Partial), string(patchdef.Shadowed),
}

type coverageRow struct {
	id, state, variant string
	n                  int
}

var coverageRowRE = regexp.MustCompile("^\\| `([a-z0-9._-]+)` \\| (.*) \\| ([0-9]+) \\| ([a-z-]+)(?: \\((?:closest )?([a-z0-9._-]+)\\))? \\|$")

func parseCoverageRows(t *testing.T, block string) []coverageRow {
	t.Helper()
	var rows []coverageRow
	for _, l := range strings.Split(block, "\n") {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		m := coverageRowRE.FindStringSubmatch(l)
		require.NotNil(t, m, "a row not of the generated form: %q", l)
		n, _ := strconv.Atoi(m[3])
		rows = append(rows, coverageRow{id: m[1], n: n, state: m[4], variant: m[5]})
	}
	return rows
}

func markers(name string) (begin, end string) {
	return "<!-- coverage:begin " + name + " -->\n", "<!-- coverage:end " + name + " -->"
}

func findBlock(doc, name string) (string, bool) {
	begin, end := markers(name)
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", false
	}
	return doc[i+len(begin) : j], true
}

// replaceBlock puts block between name's markers in doc.
func replaceBlock(doc, name, block string) (string, error) {
	begin, end := markers(name)
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i || strings.Count(doc, begin) != 1 {
		return "", fmt.Errorf("%s: want one %q and after it %q", coverageDoc, strings.TrimSpace(begin), end)
	}
	return doc[:i+len(begin)] + block + doc[j:], nil
}

// editFiles are the files (relative to the package directory) that the
// built-ins of pkg edit.
func editFiles(pkg string) []string {
	defs, _ := patchdef.Builtin()
	var out []string
	for _, d := range defs {
		if d.Package != pkg {
			continue
		}
		for _, v := range d.EditSets() {
			for _, e := range v.Edits {
				if !slices.Contains(out, e.File) {
					out = append(out, e.File)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// treeFiles are the files the built-ins of pkg edit or guard on.
func treeFiles(pkg string) []string {
	out := editFiles(pkg)
	defs, _ := patchdef.Builtin()
	for _, d := range defs {
		if d.Package != pkg {
			continue
		}
		guards := slices.Clone(d.Guards)
		for _, v := range d.Variants {
			guards = append(guards, v.Guards...)
		}
		for _, g := range guards {
			if !slices.Contains(out, g.File) {
				out = append(out, g.File)
			}
		}
	}
	sort.Strings(out)
	return out
}

// checked is what --check said of one revision.
type checked struct {
	rev   revision
	cells map[string]string // id: state, with its variant
	exit  int
}

// generateCoverage checks every revision of s and renders its block.
func generateCoverage(t *testing.T, g *gitDir, s coverageSet) (string, error) {
	revs, err := s.list(g)
	if err != nil {
		return "", err
	}
	if len(revs) == 0 {
		return "", fmt.Errorf("%s: no revisions in %s", s.name, g.dir)
	}
	files := treeFiles(s.pkg)
	noPayload := filepath.Join(t.TempDir(), "no-payload")
	var results []checked
	for _, r := range revs {
		c, err := checkRevision(t, g, s, r, files, noPayload)
		if err != nil {
			return "", err
		}
		results = append(results, c)
	}
	return renderCoverage(s, results), nil
}

// checkRevision lays r's files down as a site directory and asks
// patches.CheckAnswering, what --check asks.
func checkRevision(t *testing.T, g *gitDir, s coverageSet, r revision, files []string, noPayload string) (checked, error) {
	site := filepath.Join(t.TempDir(), "site-packages")
	pkgDir := filepath.Join(site, s.pkg)
	dirs := map[string]bool{"": true}
	for _, f := range files {
		data, ok, err := g.blob(r.commit + ":" + s.src + "/" + f)
		if err != nil {
			return checked{}, err
		}
		if !ok {
			continue
		}
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
		p := filepath.Join(pkgDir, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return checked{}, err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return checked{}, err
		}
	}
	for d := range dirs {
		p := filepath.Join(pkgDir, filepath.FromSlash(d), "__init__.py")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return checked{}, err
		}
		if _, err := os.Stat(p); os.IsNotExist(err) {
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				return checked{}, err
			}
		}
	}
	rep, err := patches.CheckAnswering(site, noPayload, func(...string) error { return nil })
	if err != nil {
		return checked{}, fmt.Errorf("%s at %s: %w", s.name, r.commit, err)
	}
	c := checked{rev: r, cells: map[string]string{}}
	if rep.Drift || rep.Shadowed {
		c.exit = 65
	}
	for _, res := range rep.Results {
		cell := string(res.State)
		if res.Variant != "" {
			cell += " (" + res.Variant + ")"
		}
		c.cells[res.ID] = cell
	}
	if err := os.RemoveAll(site); err != nil {
		return checked{}, err
	}
	return c, nil
}

// renderCoverage is the block: a sentence, the table (per built-in of
// the package, its revisions grouped by state) and the exit codes.
func renderCoverage(s coverageSet, results []checked) string {
	defs, _ := patchdef.Builtin()
	var ids []string
	for _, d := range defs {
		if d.Package == s.pkg {
			ids = append(ids, d.ID)
		}
	}
	sort.Strings(ids)
	var b strings.Builder
	fmt.Fprintf(&b, "States on %s (%d revisions), from `--check` on each tree.\n\n", s.what, len(results))
	b.WriteString("| patch | revisions | n | state |\n|---|---|---|---|\n")
	for _, id := range ids {
		for _, grp := range groups(results, s.byState, func(c checked) string { return c.cells[id] }) {
			fmt.Fprintf(&b, "| `%s` | %s | %d | %s |\n", id, span(grp, s.byState), len(grp), grp[0].cells[id])
		}
	}
	b.WriteString("\n`--check` exits")
	for i, grp := range groups(results, s.byState, func(c checked) string { return strconv.Itoa(c.exit) }) {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %d on %s (%d)", grp[0].exit, span(grp, s.byState), len(grp))
	}
	b.WriteString(".\n")
	return b.String()
}

// groups splits results by key: runs of consecutive equal keys, or with
// byState every result of a key together (in the order keys first occur).
func groups(results []checked, byState bool, key func(checked) string) [][]checked {
	var out [][]checked
	at := map[string]int{}
	for i, c := range results {
		k := key(c)
		if byState {
			if j, ok := at[k]; ok {
				out[j] = append(out[j], c)
				continue
			}
			at[k] = len(out)
		} else if i > 0 && key(results[i-1]) == k {
			out[len(out)-1] = append(out[len(out)-1], c)
			continue
		}
		out = append(out, []checked{c})
	}
	return out
}

// span names a group's revisions: first .. last, or with byState up to
// three of them and how many more.
func span(grp []checked, byState bool) string {
	if !byState {
		if len(grp) == 1 {
			return grp[0].rev.name()
		}
		return grp[0].rev.name() + " .. " + grp[len(grp)-1].rev.name()
	}
	var names []string
	for i, c := range grp {
		if i == 3 {
			names = append(names, fmt.Sprintf("and %d more", len(grp)-3))
			break
		}
		names = append(names, c.rev.name())
	}
	return strings.Join(names, ", ")
}

// gitDir reads a git directory: listings through git, blobs through one
// git cat-file --batch.
type gitDir struct {
	dir string
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func openGit(dir string) (*gitDir, error) {
	g := &gitDir{dir: dir, cmd: exec.Command("git", "--git-dir", dir, "cat-file", "--batch")}
	var err error
	if g.in, err = g.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	g.out = bufio.NewReaderSize(stdout, 1<<20)
	if err := g.cmd.Start(); err != nil {
		return nil, fmt.Errorf("git cat-file in %s: %w", dir, err)
	}
	return g, nil
}

func (g *gitDir) close() {
	g.in.Close()
	g.cmd.Wait()
}

func (g *gitDir) git(args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"--git-dir", g.dir}, args...)...).Output()
	if err != nil {
		return "", fmt.Errorf("git %s in %s: %w", strings.Join(args, " "), g.dir, err)
	}
	return string(out), nil
}

// blob is the content of object spec ("REV:PATH"); false when there is
// none (or it is not a file).
func (g *gitDir) blob(spec string) ([]byte, bool, error) {
	if _, err := fmt.Fprintln(g.in, spec); err != nil {
		return nil, false, err
	}
	head, err := g.out.ReadString('\n')
	if err != nil {
		return nil, false, err
	}
	f := strings.Fields(head)
	if len(f) == 2 && f[1] == "missing" {
		return nil, false, nil
	}
	if len(f) != 3 {
		return nil, false, fmt.Errorf("git cat-file: %q for %s", head, spec)
	}
	n, err := strconv.Atoi(f[2])
	if err != nil {
		return nil, false, err
	}
	data := make([]byte, n+1) // and the newline after it
	if _, err := io.ReadFull(g.out, data); err != nil {
		return nil, false, err
	}
	return data[:n], f[1] == "blob", nil
}

// commits gives each rev (a name or a commit) its commit, date and label,
// in the order given.
func (g *gitDir) commits(revs, labels []string) ([]revision, error) {
	out, err := g.git(append([]string{"rev-parse"}, revs...)...)
	if err != nil {
		return nil, err
	}
	ids := strings.Fields(out)
	if len(ids) != len(revs) {
		return nil, fmt.Errorf("git rev-parse in %s: %d commits for %d revisions", g.dir, len(ids), len(revs))
	}
	out, err = g.git(append([]string{"log", "--no-walk=unsorted", "--format=%H %ct %cs"}, ids...)...)
	if err != nil {
		return nil, err
	}
	dates := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		dates[f[0]] = f[1:]
	}
	var rs []revision
	for i, id := range ids {
		d, ok := dates[id]
		if !ok {
			return nil, fmt.Errorf("git log in %s: no date for %s", g.dir, revs[i])
		}
		u, _ := strconv.ParseInt(d[0], 10, 64)
		rs = append(rs, revision{commit: id, unix: u, date: d[1], label: labels[i]})
	}
	return rs, nil
}

// tags are the tags matching pattern, by commit date (then name).
func (g *gitDir) tags(pattern string) ([]revision, error) {
	out, err := g.git("tag", "-l", pattern)
	if err != nil {
		return nil, err
	}
	names := strings.Fields(out)
	var revs []string
	for _, n := range names {
		revs = append(revs, n+"^{commit}")
	}
	rs, err := g.commits(revs, names)
	if err != nil {
		return nil, err
	}
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].unix != rs[j].unix {
			return rs[i].unix < rs[j].unix
		}
		return rs[i].label < rs[j].label
	})
	return rs, nil
}

// branches are the tips of the branches other than main committed from
// since, by commit date; a commit that several branches point at is
// checked once, under the first name.
func (g *gitDir) branches(since string) ([]revision, error) {
	out, err := g.git("for-each-ref", "--format=%(refname:short) %(objectname) %(committerdate:unix) %(committerdate:short)", "refs/heads")
	if err != nil {
		return nil, err
	}
	var rs []revision
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 || f[0] == "main" || f[3] < since || seen[f[1]] {
			continue
		}
		seen[f[1]] = true
		u, _ := strconv.ParseInt(f[2], 10, 64)
		rs = append(rs, revision{commit: f[1], label: f[0], date: f[3], unix: u})
	}
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].unix != rs[j].unix {
			return rs[i].unix < rs[j].unix
		}
		return rs[i].label < rs[j].label
	})
	return rs, nil
}

// mainCommits are main's commits from since that changed one of files
// (relative to src), oldest first: with every (paths relative to the
// repository) nil all of them; otherwise those that changed one of every
// and every vllmEvery-th of the rest. The newest main commit is always
// the last.
func (g *gitDir) mainCommits(since, src string, files, every []string) ([]revision, error) {
	args := []string{"log", "main", "--reverse", "--since=" + since, "--format=C %H %ct %cs", "--name-only", "--"}
	for _, f := range files {
		args = append(args, src+"/"+f)
	}
	args = append(args, every...)
	out, err := g.git(args...)
	if err != nil {
		return nil, err
	}
	var rs []revision
	var cur *revision
	keep, rest := false, 0
	flush := func() {
		if cur == nil {
			return
		}
		if every == nil || keep {
			rs = append(rs, *cur)
		} else {
			if rest%vllmEvery == 0 {
				rs = append(rs, *cur)
			}
			rest++
		}
	}
	sc := bufio.NewScanner(bytes.NewReader([]byte(out)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "C ") {
			flush()
			f := strings.Fields(l)
			u, _ := strconv.ParseInt(f[2], 10, 64)
			cur, keep = &revision{commit: f[1], unix: u, date: f[3]}, false
			continue
		}
		for _, p := range every {
			if l == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(l, p)) {
				keep = true
			}
		}
	}
	flush()
	head, err := g.commits([]string{"main"}, []string{""})
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 || rs[len(rs)-1].commit != head[0].commit {
		rs = append(rs, head[0])
	}
	return rs, nil
}
