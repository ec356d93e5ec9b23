package pyimport

import (
	"fmt"
	"strings"
)

// pthCodec is how the worker's interpreter decodes the bytes of a .pth
// file that are not ASCII, as far as that is certain without reading the
// locale definitions installed (site.addpackage):
//
//   - 3.10 opens it in the locale's encoding as io.TextIOWrapper's
//     encoding="locale" gives it there: UTF-8 in the UTF-8 Mode (PEP 540),
//     else the LC_CTYPE locale's codeset;
//   - 3.11 and 3.12 open it the same way, but encoding="locale" is the
//     LC_CTYPE locale's codeset even in the UTF-8 Mode;
//   - 3.13 decodes it as utf-8-sig, and bytes that are not UTF-8 in the
//     LC_CTYPE locale's codeset (locale.getencoding(), which also ignores
//     the UTF-8 Mode), with a warning.
//
// A decoding error ends the interpreter's start (Fatal Python error:
// init_import_site). The LC_CTYPE locale is the one the first non-empty
// of LC_ALL, LC_CTYPE and LANG names (none: C); its codeset is known here
// only for C and POSIX (ASCII), and even then only when the interpreter
// does not coerce it (PEP 538: it sets LC_CTYPE to C.UTF-8, C.utf8 or
// UTF-8, when one is installed, unless LC_ALL is set or
// PYTHONCOERCECLOCALE=0).
type pthCodec struct {
	// utf8Mode: up to 3.12, the interpreter runs in the UTF-8 Mode (-X
	// utf8, PYTHONUTF8=1, or a C or POSIX locale without -X utf8=0 or
	// PYTHONUTF8=0); utf8ModeWhy says which, or why it is not known.
	utf8Mode    bool
	utf8ModeWhy string
	// ascii: the LC_CTYPE locale's codeset is ASCII (a C or POSIX locale
	// the interpreter does not coerce); otherwise localeWhy says why it is
	// not known.
	ascii     bool
	localeWhy string
	// invalid: -X utf8 or PYTHONUTF8 has a value CPython refuses (it
	// exits at start).
	invalid error
}

// codecOf is the .pth decoding of the worker started by c with env.
func codecOf(c Command, env Env) pthCodec {
	var k pthCodec
	name, from := "", "no LC_ALL, LC_CTYPE or LANG: the C locale"
	for _, v := range []string{"LC_ALL", "LC_CTYPE", "LANG"} {
		if x, ok := env(v); ok && x != "" {
			name, from = x, v+"="+x
			break
		}
	}
	isC := name == "" || name == "C" || name == "POSIX"
	lcAll, _ := env("LC_ALL")
	coerce, _ := getenv(env, c.Flags, "PYTHONCOERCECLOCALE")
	switch {
	case !isC:
		k.localeWhy = fmt.Sprintf("the locale's encoding (%s) depends on the locale definitions installed", from)
	case lcAll == "" && coerce != "0":
		k.localeWhy = fmt.Sprintf("the C locale (%s) is coerced to C.UTF-8 when such a locale is installed (PEP 538), which depends on the locale definitions installed", from)
	default:
		k.ascii = true
		k.localeWhy = fmt.Sprintf("ASCII (%s, not coerced)", from)
	}
	// The UTF-8 Mode: -X utf8 wins over PYTHONUTF8, which wins over the
	// locale.
	mode, modeFrom := "", ""
	for _, x := range c.XOptions {
		switch x {
		case "utf8", "utf8=1":
			mode, modeFrom = "1", "-X "+x
		case "utf8=0":
			mode, modeFrom = "0", "-X "+x
		default:
			if strings.HasPrefix(x, "utf8=") {
				k.invalid = fmt.Errorf("-X %s is not a value CPython takes: the interpreter exits at start", x)
				return k
			}
		}
	}
	if mode == "" {
		if v, ok := getenv(env, c.Flags, "PYTHONUTF8"); ok && v != "" {
			if v != "0" && v != "1" {
				k.invalid = fmt.Errorf("PYTHONUTF8=%s is not a value CPython takes: the interpreter exits at start", v)
				return k
			}
			mode, modeFrom = v, "PYTHONUTF8="+v
		}
	}
	switch {
	case mode == "1":
		k.utf8Mode, k.utf8ModeWhy = true, "the UTF-8 Mode ("+modeFrom+")"
	case mode == "0":
		k.utf8ModeWhy = "not in the UTF-8 Mode (" + modeFrom + "); " + k.localeWhy
	case isC:
		k.utf8Mode, k.utf8ModeWhy = true, "the UTF-8 Mode ("+from+", PEP 540)"
	default:
		k.utf8ModeWhy = k.localeWhy
	}
	return k
}

// decode says how CPython version reads a .pth file whose byte at (the
// first that is not ASCII) is not valid in the UTF-8 that was tried
// first (3.13) or at all (earlier): utf8 true when it is read as UTF-8
// (up to 3.12, in the UTF-8 Mode), else the error: the start fails, or
// the encoding is not known.
func (k pthCodec) decode(version string, at int, validUTF8 bool) (utf8 bool, err error) {
	if k.localeWhy == "" { // no worker (an offline lookup): nothing is known of its locale
		k.localeWhy = "the worker's locale is not known"
	}
	if k.utf8ModeWhy == "" {
		k.utf8ModeWhy = k.localeWhy
	}
	if !versionAtLeast(version, 13) {
		switch {
		case versionAtLeast(version, 11) && k.ascii:
			return false, fmt.Errorf("the interpreter fails at start (UnicodeDecodeError): byte %d is not ASCII, and CPython %s decodes .pth files in the locale's encoding, here %s", at, version, k.localeWhy)
		case versionAtLeast(version, 11):
			return false, fmt.Errorf("byte %d is not ASCII: CPython %s decodes .pth files in the locale's encoding (the UTF-8 Mode aside): %s", at, version, k.localeWhy)
		case k.utf8Mode && validUTF8:
			return true, nil
		case k.utf8Mode:
			return false, fmt.Errorf("the interpreter fails at start (UnicodeDecodeError): it is not UTF-8, and CPython %s decodes .pth files as UTF-8 in %s", version, k.utf8ModeWhy)
		case k.ascii:
			return false, fmt.Errorf("the interpreter fails at start (UnicodeDecodeError): byte %d is not ASCII, and CPython %s decodes .pth files in the locale's encoding, %s", at, version, k.utf8ModeWhy)
		}
		return false, fmt.Errorf("byte %d is not ASCII: CPython %s decodes .pth files in the locale's encoding: %s", at, version, k.utf8ModeWhy)
	}
	if k.ascii {
		return false, fmt.Errorf("the interpreter fails at start (UnicodeDecodeError): it is not UTF-8, and CPython %s then decodes it in the locale's encoding, here %s", version, k.localeWhy)
	}
	return false, fmt.Errorf("it is not UTF-8: CPython %s then decodes it in the locale's encoding: %s", version, k.localeWhy)
}

// pathEncodes says whether the interpreter can name the path p (a .pth
// line made a path, as str) to the system: str paths are encoded in the
// filesystem encoding, UTF-8 in the UTF-8 Mode, else the locale's
// codeset. In ASCII a character beyond it cannot be encoded, and
// os.path.exists says no: the line adds nothing (ok false, err nil).
// Otherwise err says the encoding is not known.
func (k pthCodec) pathEncodes(p string) (ok bool, err error) {
	for i := 0; i < len(p); i++ {
		if p[i] < 0x80 {
			continue
		}
		switch {
		case k.utf8Mode:
			return true, nil
		case k.ascii:
			return false, nil
		}
		why := k.utf8ModeWhy
		if why == "" {
			why = "the worker's locale is not known"
		}
		return false, fmt.Errorf("the path %q is not ASCII: the interpreter names it to the system in its filesystem encoding, the locale's: %s", p, why)
	}
	return true, nil
}
