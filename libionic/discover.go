// Package libionic puts the host's RDMA provider (libionic, the userspace
// driver for AMD Pensando NICs) into the container, the way libibverbs will
// look for it, and only when it will load: a provider must match the host
// kernel driver's ABI, which the stock image's build often does not
// ("Driver ionic does not support the kernel ABI of 1 (supports 4 to 4)").
//
// The package works on a container root (always "/" in production; a
// directory tree in tests) and reports every check it made. Whether a
// build will load is elfload's question, which RDMA devices there are
// rdma's; this package finds the provider and swaps it.
package libionic

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/digest"
	"github.com/infera/infera-exec/internal/elfload"
	"github.com/infera/infera-exec/internal/linkchain"
	"github.com/infera/infera-exec/internal/logging"
)

// Container is how the container's libibverbs will find the provider.
type Container struct {
	Libibverbs     string   `json:"libibverbs"`                // libibverbs.so.1 as found
	LibibverbsFile string   `json:"libibverbs_file"`           // the file it resolves to
	LibDir         string   `json:"lib_dir"`                   // where libibverbs.so.1 is
	LibDirs        []string `json:"lib_dirs"`                  // the loader's directories for this machine
	ConfigDir      string   `json:"config_dir"`                // /etc/libibverbs.d, as compiled into libibverbs
	ProviderDir    string   `json:"provider_dir"`              // as compiled into libibverbs
	PABI           int      `json:"pabi"`                      // private ABI: IBVERBS_PRIVATE_<PABI>, lib<name>-rdmav<PABI>.so
	DriverFile     string   `json:"driver_file,omitempty"`     // the configuration file naming the provider
	DriverLine     string   `json:"driver_line,omitempty"`     // its line, as libibverbs reads it
	SonameLink     string   `json:"soname_link"`               // <libdir>/lib<name>.so.1
	SonameChain    []string `json:"soname_chain,omitempty"`    // its symlink chain, when it exists
	ProviderLink   string   `json:"provider_link"`             // the file libibverbs opens: <providerdir>/lib<name>-rdmav<PABI>.so, or an absolute .driver line's path
	ProviderChain  []string `json:"provider_chain,omitempty"`  // its symlink chain, when it exists
	Files          []string `json:"files,omitempty"`           // the real files behind the two names
	ProviderSHA256 string   `json:"provider_sha256,omitempty"` // of the file the provider link leads to
}

// libDirs are the directories the dynamic loader searches by default,
// Debian multiarch first, then the lib64 layout of RPM distributions;
// /usr first, so that on a merged-/usr image the paths reported are the
// ones operators know.
func libDirs() []string {
	t := elfload.Triplet()
	return []string{"/usr/lib/" + t, "/lib/" + t, "/usr/lib64", "/lib64", "/usr/lib", "/lib"}
}

var (
	// "/usr/lib/x86_64-linux-gnu/libibverbs/lib%s-rdmav34.so" as libibverbs
	// formats the provider path.
	providerFmtRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(/[\x21-\x7e]*)/lib%s-rdmav(\d+)\.so\x00`) })
	configDirRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\x00(/[\x21-\x7e]*/libibverbs\.d)\x00`) })
	privateRE     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^IBVERBS_PRIVATE_(\d+)$`) })
)

// in joins a container path to the root the package works on.
func in(root, p string) string { return filepath.Join(root, p) }

// out turns a path under root back into the container's path.
func out(root, p string) string {
	if root == "/" || root == "" {
		return p
	}
	rel, err := filepath.Rel(root, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return "/" + rel
}

// Discover finds libibverbs and reads from it where it will look for
// provider name: the configuration directory and the provider directory
// with its private ABI number, both compiled into the library.
func Discover(root, name string) (*Container, *elfload.Object, error) {
	c := &Container{LibDirs: libDirs()}
	for _, d := range c.LibDirs {
		p := filepath.Join(d, "libibverbs.so.1")
		if _, err := os.Stat(in(root, p)); err == nil {
			c.Libibverbs, c.LibDir = p, d
			break
		}
	}
	if c.Libibverbs == "" {
		return c, nil, logging.WithBrief(fmt.Errorf("the container has no libibverbs.so.1 (searched %s): nothing would load an RDMA provider", strings.Join(c.LibDirs, ", ")),
			"the container has no libibverbs.so.1: nothing would load an RDMA provider")
	}
	chain, err := linkchain.FollowIn(root, in(root, c.Libibverbs))
	if err != nil {
		return c, nil, fmt.Errorf("container libibverbs %s: %w", c.Libibverbs, err)
	}
	c.LibibverbsFile = out(root, chain[len(chain)-1])
	ref, err := elfload.Read(in(root, c.LibibverbsFile))
	if err != nil {
		return c, nil, err
	}
	data, err := boundedread.File(in(root, c.LibibverbsFile), boundedread.Library)
	if err != nil {
		return c, ref, err
	}
	if m := providerFmtRE().FindSubmatch(data); m != nil {
		c.ProviderDir = string(m[1])
		c.PABI, _ = strconv.Atoi(string(m[2]))
	}
	if m := configDirRE().FindSubmatch(data); m != nil {
		c.ConfigDir = string(m[1])
	} else {
		c.ConfigDir = "/etc/libibverbs.d"
	}
	// The private ABI is also the version libibverbs defines for its
	// providers; the two must agree.
	var defined []int
	for _, v := range ref.Defines {
		if m := privateRE().FindStringSubmatch(v); m != nil {
			n, _ := strconv.Atoi(m[1])
			defined = append(defined, n)
		}
	}
	switch {
	case c.PABI == 0 && len(defined) == 1:
		c.PABI = defined[0]
		c.ProviderDir = filepath.Join(c.LibDir, "libibverbs")
	case c.PABI == 0:
		return c, ref, fmt.Errorf("container libibverbs %s: cannot tell its provider directory and private ABI (no lib%%s-rdmav<N>.so string, IBVERBS_PRIVATE versions %v)", c.LibibverbsFile, defined)
	case len(defined) > 0 && !slices.Contains(defined, c.PABI):
		return c, ref, fmt.Errorf("container libibverbs %s: provider path says private ABI %d but the library defines IBVERBS_PRIVATE_%v", c.LibibverbsFile, c.PABI, defined)
	}

	c.SonameLink = filepath.Join(c.LibDir, "lib"+name+".so.1")
	c.ProviderLink = filepath.Join(c.ProviderDir, fmt.Sprintf("lib%s-rdmav%d.so", name, c.PABI))
	drv, err := findDriver(root, c.ConfigDir, name, c.ProviderDir, c.PABI)
	if err != nil {
		return c, ref, err
	}
	if drv != nil {
		// The provider is the file the .driver line makes libibverbs
		// open, which is not the provider directory's for an absolute
		// line.
		c.DriverFile, c.DriverLine, c.ProviderLink = drv.file, drv.line, drv.provider
	}
	for _, l := range []struct {
		path  string
		chain *[]string
	}{{c.SonameLink, &c.SonameChain}, {c.ProviderLink, &c.ProviderChain}} {
		if _, err := os.Lstat(in(root, l.path)); err != nil {
			continue
		}
		ch, err := linkchain.FollowIn(root, in(root, l.path))
		for _, p := range ch {
			*l.chain = append(*l.chain, out(root, p))
		}
		if err != nil {
			return c, ref, fmt.Errorf("container provider %s: %w", l.path, err)
		}
		final := out(root, ch[len(ch)-1])
		if !slices.Contains(c.Files, final) {
			c.Files = append(c.Files, final)
		}
	}
	if len(c.ProviderChain) > 0 {
		c.ProviderSHA256, _ = digest.File(in(root, c.ProviderChain[len(c.ProviderChain)-1]))
	}
	return c, ref, nil
}

// driver is a configuration line that makes libibverbs load provider
// name, and the file the loader will open for it.
type driver struct {
	file, line, provider string
}

// findDriver reads the configuration directory as libibverbs does
// (every regular file in it, whatever its name; per line: leading blanks
// skipped, '#' comments, "driver NAME") and returns the line that loads
// provider name, with the file the loader will open for it:
//
//	driver ionic                     <provider dir>/libionic-rdmav<PABI>.so
//	driver /opt/x/libionic           /opt/x/libionic-rdmav<PABI>.so (that file, nothing else)
//
// A relative line with a directory in it (driver ../x/libionic) is opened
// relative to the worker's working directory: which file that is cannot
// be known here, so it is an error, as are two lines that would open
// different files. nil means no line names the provider.
func findDriver(root, dir, name, providerDir string, pabi int) (*driver, error) {
	entries, err := os.ReadDir(in(root, dir))
	if err != nil {
		return nil, nil
	}
	suffix := fmt.Sprintf("-rdmav%d.so", pabi)
	var found []driver
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		fi, err := os.Stat(in(root, p))
		if err != nil || !fi.Mode().IsRegular() {
			continue // libibverbs skips what is not a regular file
		}
		data, err := boundedread.File(in(root, p), boundedread.SmallText)
		if err != nil {
			return nil, fmt.Errorf("libibverbs configuration %s: %w", p, boundedread.Reason(err))
		}
		for _, n := range DriverNames(string(data)) {
			d := driver{file: p, line: "driver " + n}
			switch {
			case n == name:
				d.provider = filepath.Join(providerDir, "lib"+name+suffix)
			case strings.HasPrefix(n, "/") && path.Base(n) == "lib"+name:
				d.provider = path.Clean(n + suffix)
			case strings.Contains(n, "/") && (path.Base(n) == "lib"+name || path.Base(n) == name):
				return nil, fmt.Errorf("%s: %q names the %s provider by a relative path, which libibverbs opens relative to the worker's working directory; cannot tell which file it loads, so the host build is not swapped in (use \"driver %s\" or an absolute path)", p, d.line, name, name)
			default:
				continue
			}
			found = append(found, d)
		}
	}
	if len(found) == 0 {
		return nil, nil
	}
	sort.Slice(found, func(i, j int) bool { return found[i].file < found[j].file })
	for _, d := range found[1:] {
		if d.provider != found[0].provider {
			return nil, fmt.Errorf("%s (%q) and %s (%q) make libibverbs load the %s provider from two files (%s, %s); cannot tell which one serves the device, so the host build is not swapped in",
				found[0].file, found[0].line, d.file, d.line, name, found[0].provider, d.provider)
		}
	}
	return &found[0], nil
}

// DriverNames parses a libibverbs configuration file as libibverbs does
// and returns the names of its driver lines, in order. Lines libibverbs
// would warn about are ignored.
func DriverNames(content string) []string {
	var out []string
	for _, line := range strings.SplitAfter(content, "\n") {
		line = strings.TrimLeft(line, " \t")
		if line == "" || line[0] == '\n' || line[0] == '#' {
			continue
		}
		i := strings.IndexAny(line, "\n\t ")
		if i < 0 || line[:i] != "driver" {
			continue // "driver" alone at the end of the file has no name
		}
		rest := strings.TrimLeft(line[i+1:], " \t")
		if j := strings.IndexAny(rest, "\n\t "); j >= 0 {
			rest = rest[:j]
		}
		out = append(out, rest)
	}
	return out
}
