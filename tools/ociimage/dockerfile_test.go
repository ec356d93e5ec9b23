package ociimage

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Dockerfile.overlay describes the image Build builds. This test fails
// when one of them changes without the other: the final stage must be
// FROM scratch with the payload made in the build stage copied to /, and
// the ENTRYPOINT, CMD, ENV and LABELs must be those of the config Build
// writes; the build stage must build the binary and infera-payload as
// `make build` does and the payload where `make payload` puts it.
func TestDockerfileInStep(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(repo, "Dockerfile.overlay"))
	require.NoError(t, err)
	stages, err := parseDockerfile(string(text))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(stages), 2, "a build stage and the image")

	_, o := buildTo(t, testPayload(t), tempDir(t))
	img, _ := readLayout(t, o.OCI, o.Tag)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	mk := readMakefile(t)

	// The image.
	final := stages[len(stages)-1]
	assert.Equal(t, "scratch", final.from, "the image is FROM scratch")
	counts := map[string]int{}
	for _, in := range final.ins {
		counts[in.cmd]++
		assert.Contains(t, []string{"ARG", "COPY", "ENV", "LABEL", "ENTRYPOINT", "CMD"}, in.cmd,
			"line %d: %s in the final stage has no counterpart in tools/ociimage", in.line, in.cmd)
	}
	for _, c := range []string{"COPY", "ENTRYPOINT", "CMD"} {
		assert.Equal(t, 1, counts[c], "one %s in the final stage", c)
	}

	args := map[string]string{"VERSION": o.Version, "REVISION": o.Revision}
	var env, labels = []string{}, map[string]string{}
	for _, in := range final.ins {
		switch in.cmd {
		case "ENTRYPOINT", "CMD":
			var v []string
			require.NoError(t, json.Unmarshal([]byte(in.args), &v), "line %d: %s must be in JSON (exec) form, as a scratch image has no shell", in.line, in.cmd)
			want := cf.Config.Entrypoint
			if in.cmd == "CMD" {
				want = cf.Config.Cmd
			}
			assert.Equal(t, want, v, "line %d: %s differs from the daemonless build", in.line, in.cmd)
		case "ENV", "LABEL":
			kvs, err := keyValues(in.args, args)
			require.NoError(t, err, "line %d", in.line)
			for _, kv := range kvs {
				if in.cmd == "ENV" {
					env = append(env, kv[0]+"="+kv[1])
				} else {
					labels[kv[0]] = kv[1]
				}
			}
		case "ARG":
			k, v, _ := strings.Cut(in.args, "=")
			if _, set := args[k]; !set {
				args[k] = v
			}
		}
	}
	assert.Equal(t, cf.Config.Env, env, "ENV differs from the daemonless build")
	assert.Equal(t, cf.Config.Labels, labels, "LABELs differ from the daemonless build (VERSION and REVISION as build args)")

	// The files: the payload made in the build stage, copied to the root.
	var copyIn instruction
	for _, in := range final.ins {
		if in.cmd == "COPY" {
			copyIn = in
		}
	}
	words, err := shellWords(copyIn.args)
	require.NoError(t, err)
	require.Len(t, words, 3, "COPY --from=STAGE SRC/ /")
	from, ok := strings.CutPrefix(words[0], "--from=")
	require.True(t, ok, "COPY --from the build stage, got %q", words[0])
	build := stageNamed(stages, from)
	require.NotNil(t, build, "COPY --from=%s: no such stage", from)
	assert.Equal(t, "/", words[2], "the layer is the image's root filesystem")
	assert.True(t, strings.HasSuffix(words[1], "/"), "COPY %s: copy the directory's contents, with a trailing /", words[1])

	tool := mk.vars["PAYLOAD_TOOL"]
	require.NotEmpty(t, tool, "the Makefile names the payload tool (PAYLOAD_TOOL)")
	index := build.run(t, tool+" index")
	require.NotNil(t, index, "the build stage runs %s index", tool)
	out, bin := flagValue(index, "-out"), flagValue(index, "-bin")
	assert.Equal(t, mk.vars["PAYLOAD"], out, "%s index -out: the Makefile's PAYLOAD", tool)
	assert.Equal(t, mk.vars["BIN"], bin, "%s index -bin: the Makefile's BIN", tool)

	// What COPY copies is the layer of `infera-payload image` over that
	// payload, with the Makefile's busybox, unpacked by tar.
	image := build.run(t, tool+" image")
	require.NotNil(t, image, "the build stage runs %s image", tool)
	assert.Equal(t, out, flagValue(image, "-payload"), "%s image -payload: what %s index made", tool, tool)
	assert.Equal(t, mk.vars["BUSYBOX"], flagValue(image, "-busybox"), "%s image -busybox: the Makefile's BUSYBOX", tool)
	assert.Equal(t, mk.vars["BUSYBOX_COPYRIGHT"], flagValue(image, "-busybox-copyright"), "%s image -busybox-copyright: the Makefile's BUSYBOX_COPYRIGHT", tool)
	layer := flagValue(image, "-layer")
	require.NotEmpty(t, layer, "%s image writes -layer", tool)
	root := flagValue(image, "-C")
	assert.Equal(t, layer, flagValue(image, "-xzf"), "the RUN unpacks the layer it wrote: tar -xzf %s -C DIR", layer)
	assert.Equal(t, path.Join(build.workdir, root), path.Clean(words[1]), "COPY copies the unpacked layer (-C %s in %s)", root, build.workdir)
	assert.Contains(t, build.ins[0].args, "busybox-static", "the build stage installs Debian's busybox-static first")
	assert.Equal(t, "/"+binaryPath, cf.Config.Entrypoint[0], "the entrypoint is the payload's binary")

	// The binary and the payload tool: the same commands as `make build`,
	// with the version and commit from the build args.
	recipe := mk.recipe(t, "build", map[string]string{"VERSION": "@VERSION@", "COMMIT": "@REVISION@"})
	for _, pkg := range []string{"./cmd/infera-exec", "./cmd/infera-payload"} {
		var want []string
		for _, line := range recipe {
			if w, err := shellWords(line); err == nil && slices.Contains(w, "build") && slices.Contains(w, pkg) {
				want = w
			}
		}
		require.NotEmpty(t, want, "the Makefile's build target builds %s", pkg)
		run := build.run(t, pkg)
		require.NotNil(t, run, "the build stage builds %s", pkg)
		got, err := shellWords(expand(run.args, map[string]string{"VERSION": "@VERSION@", "REVISION": "@REVISION@"}))
		require.NoError(t, err)
		assert.Equal(t, want, got, "the Dockerfile builds %s differently from `make build`", pkg)
	}

	// The Go toolchain: the one both modules' go.mod ask for.
	for _, mod := range []string{"go.mod", "tools/go.mod"} {
		gomod, err := os.ReadFile(filepath.Join(repo, mod))
		require.NoError(t, err)
		goVer := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
		require.NotNil(t, goVer, mod)
		assert.Equal(t, "golang:"+string(goVer[1]), build.from, "the build stage's Go is %s's", mod)
	}
}

type instruction struct {
	cmd, args string
	line      int
}

type stage struct {
	from, alias, workdir string
	ins                  []instruction
}

// run is the RUN instruction of the stage whose command contains words.
func (s *stage) run(t *testing.T, words string) *instruction {
	for i, in := range s.ins {
		if in.cmd == "RUN" && strings.Contains(" "+in.args+" ", " "+words+" ") {
			return &s.ins[i]
		}
	}
	return nil
}

func stageNamed(stages []stage, name string) *stage {
	for i := range stages {
		if strings.EqualFold(stages[i].alias, name) {
			return &stages[i]
		}
	}
	return nil
}

func flagValue(in *instruction, flag string) string {
	words, _ := shellWords(in.args)
	for i, w := range words {
		if w == flag && i+1 < len(words) {
			return words[i+1]
		}
	}
	return ""
}

// parseDockerfile reads instructions into stages: comments and blank
// lines are dropped, lines ending in a backslash continue on the next.
func parseDockerfile(text string) ([]stage, error) {
	var stages []stage
	var cur strings.Builder
	start := 0
	flush := func() error {
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		if s == "" {
			return nil
		}
		word, rest, _ := strings.Cut(s, " ")
		in := instruction{cmd: strings.ToUpper(word), args: strings.TrimSpace(rest), line: start}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			st := stage{from: f[0], workdir: "/"}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.alias = f[2]
			}
			stages = append(stages, st)
			return nil
		}
		if len(stages) == 0 {
			if in.cmd == "ARG" {
				return nil
			}
			return fmt.Errorf("line %d: %s before FROM", start, in.cmd)
		}
		st := &stages[len(stages)-1]
		if in.cmd == "WORKDIR" {
			st.workdir = path.Join(st.workdir, in.args)
		}
		st.ins = append(st.ins, in)
		return nil
	}
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if body, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		if err := flush(); err != nil {
			return nil, err
		}
	}
	return stages, flush()
}

var varRef = regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`)

// expand replaces ${NAME} and $NAME with vars; unknown names stay.
func expand(s string, vars map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		n := strings.Trim(m, "${}")
		if v, ok := vars[n]; ok {
			return v
		}
		return m
	})
}

// keyValues reads KEY=VALUE words (ENV, LABEL), quotes removed, with the
// build args expanded.
func keyValues(s string, vars map[string]string) ([][2]string, error) {
	words, err := shellWords(expand(s, vars))
	if err != nil {
		return nil, err
	}
	var kvs [][2]string
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want KEY=VALUE", w)
		}
		kvs = append(kvs, [2]string{k, v})
	}
	return kvs, nil
}

// shellWords splits s as a POSIX shell would split words, with single
// and double quotes and backslashes, without expansions.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				}
				w.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated \" in %q", s)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

func TestShellWords(t *testing.T) {
	for in, want := range map[string][]string{
		`a b  c`:                       {"a", "b", "c"},
		`-ldflags '-s -w' -o x`:        {"-ldflags", "-s -w", "-o", "x"},
		`k="a b" l=c\ d`:               {"k=a b", "l=c d"},
		`"x \"y\" \z"`:                 {`x "y" \z`},
		`org.x="infera-exec overlay" `: {"org.x=infera-exec overlay"},
		``:                             nil,
	} {
		got, err := shellWords(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{`'open`, `"open`} {
		_, err := shellWords(bad)
		assert.Error(t, err, bad)
	}
}

func TestParseDockerfile(t *testing.T) {
	stages, err := parseDockerfile("# syntax=docker/dockerfile:1\nARG X=1\nFROM golang:1 AS build\nWORKDIR /src\n# note\nRUN a \\\n  # inside\n  b\n\nFROM scratch\nCMD [\"/x\"]\n")
	require.NoError(t, err)
	require.Len(t, stages, 2)
	assert.Equal(t, stage{from: "golang:1", alias: "build", workdir: "/src", ins: []instruction{
		{cmd: "WORKDIR", args: "/src", line: 4}, {cmd: "RUN", args: "a    b", line: 6},
	}}, stages[0])
	assert.Equal(t, "scratch", stages[1].from)
	assert.Equal(t, []instruction{{cmd: "CMD", args: `["/x"]`, line: 11}}, stages[1].ins)
	_, err = parseDockerfile("RUN x\n")
	assert.Error(t, err)
}

// makefile is the repository's Makefile: its simple variables and rules.
type makefile struct {
	vars  map[string]string
	lines []string
}

func readMakefile(t *testing.T) *makefile {
	data, err := os.ReadFile(filepath.Join(repo, "Makefile"))
	require.NoError(t, err)
	m := &makefile{vars: map[string]string{}, lines: strings.Split(string(data), "\n")}
	assign := regexp.MustCompile(`^([A-Z_]+)\s*(?::=|\?=|=)\s*(.*)$`)
	for _, l := range m.lines {
		if g := assign.FindStringSubmatch(l); g != nil {
			m.vars[g[1]] = strings.TrimSpace(g[2])
		}
	}
	return m
}

// recipe is the expanded recipe of target, with override taking the place
// of variables.
func (m *makefile) recipe(t *testing.T, target string, override map[string]string) []string {
	var out []string
	in := false
	for _, l := range m.lines {
		switch {
		case strings.HasPrefix(l, target+":"):
			in = true
		case in && strings.HasPrefix(l, "\t"):
			out = append(out, m.expand(strings.TrimSpace(l), override, 0))
		case in && strings.TrimSpace(l) != "" && !strings.HasPrefix(strings.TrimSpace(l), "#"):
			return out
		}
	}
	require.NotEmpty(t, out, "Makefile target %s", target)
	return out
}

var makeRef = regexp.MustCompile(`\$\((\w+)\)`)

func (m *makefile) expand(s string, override map[string]string, depth int) string {
	if depth > 10 {
		return s
	}
	return makeRef.ReplaceAllStringFunc(s, func(ref string) string {
		n := ref[2 : len(ref)-1]
		if v, ok := override[n]; ok {
			return v
		}
		if v, ok := m.vars[n]; ok {
			return m.expand(v, override, depth+1)
		}
		return ref
	})
}
