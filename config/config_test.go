package config

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/environ"
)

const (
	testExe = "/overlay/bin/infera-exec"
	testCwd = "/work/dir"
)

func envOf(m map[string]string) *environ.Env {
	kv := make([]string, 0, len(m))
	for k, v := range m {
		kv = append(kv, k+"="+v)
	}
	return environ.New(kv)
}

func load(t *testing.T, m map[string]string) (Config, []string) {
	t.Helper()
	c, warns, err := Load(envOf(m), testExe, testCwd, Flags{})
	require.NoError(t, err)
	return c, warns
}

func TestLoadDefaults(t *testing.T) {
	c, warns := load(t, nil)
	assert.Empty(t, warns)
	assert.Equal(t, "/overlay", c.PayloadRoot)
	assert.Equal(t, "parent of the directory holding "+testExe, c.PayloadRootFrom)
	assert.Equal(t, "python3", c.Python)
	assert.Equal(t, 10*time.Second, c.PythonTimeoutDuration())
	assert.Equal(t, "10s", c.PythonTimeout)
	assert.Equal(t, Requirement{Raw: ""}, c.RequireNative)
	assert.True(t, c.RequireNative.None())
	assert.Equal(t, 1800, c.ReadyTimeout)
	assert.Equal(t, "default", c.ReadyTimeoutFrom)
	assert.Equal(t, "/", c.Chdir)
	assert.Equal(t, "/host-libionic/libionic.so", c.HostLibionic)
	assert.False(t, c.SkipEnginePatches)
	assert.Equal(t, "", c.ReportPath)
	assert.False(t, c.ReportOff)
	assert.Equal(t, []string{"/opt/rocm"}, c.ROCmRoots)
	assert.Nil(t, c.ABIFamily)
	assert.False(t, c.LogJSON)
}

func TestLoadIgnoresUnrelatedEnv(t *testing.T) {
	c, warns := load(t, map[string]string{"HOME": "/root", "PATH": "/usr/bin", "INFERA_KVD_AIS": "1", "INFERA_ADVERTISE_IP": "10.0.0.1"})
	assert.Empty(t, warns, "the worker's own INFERA_* variables are not flagged")
	assert.Equal(t, 1800, c.ReadyTimeout)
	assert.Equal(t, "/overlay", c.PayloadRoot)
}

func TestUnknownNames(t *testing.T) {
	env := environ.New([]string{
		"INFERA_REQUIRE_NATVE=mooncake",
		"INFERA_ENGINE_READY_TIMOUT=3600",
		"INFERA_KVD_AIZ=1",
		"INFERA_SOMETHING_ELSE=x",
		"INFERA_ENGINE_READY=7200",    // cut short
		"INFERA_EXEC_LOG_FORMAT=json", // grown
		"PAYLOAD_ROOTDIR=/overlay",    // a typo beside PAYLOAD_ROOT
		"PAYLOAD_VERSION=0.3",         // nobody's
		// The payload's own: never typos, even the ones near infera-exec's
		// INFERA_PREFLIGHT_* names.
		"INFERA_KVD_SOCKET=/kvd/kvd.sock",
		"INFERA_PREFLIGHT_KV_GPUS=8",
		"INFERA_DRAIN_TIMEOUT=30",
	})
	warns := UnknownNames(env, []string{"INFERA_DRAIN_TIMEOUT", "INFERA_KVD_SOCKET", "INFERA_PREFLIGHT_KV_GPUS"})
	assert.Equal(t, []string{
		"INFERA_ENGINE_READY is not a variable infera-exec reads, and it is ignored; did you mean INFERA_ENGINE_READY_TIMEOUT?",
		"INFERA_ENGINE_READY_TIMOUT is not a variable infera-exec reads, and it is ignored; did you mean INFERA_ENGINE_READY_TIMEOUT?",
		"INFERA_EXEC_LOG_FORMAT is not a variable infera-exec reads, and it is ignored; did you mean INFERA_EXEC_LOG?",
		"INFERA_KVD_AIZ is not a variable infera-exec reads, and it is ignored; did you mean INFERA_KVD_AIS?",
		"INFERA_REQUIRE_NATVE is not a variable infera-exec reads, and it is ignored; did you mean INFERA_REQUIRE_NATIVE?",
		"PAYLOAD_ROOTDIR is not a variable infera-exec reads, and it is ignored; did you mean PAYLOAD_ROOT?",
	}, warns, "a name near none of infera-exec's is someone else's: not flagged")

	_, warns = load(t, map[string]string{"INFERA_REQUIRE_NATVE": "mooncake"})
	assert.Empty(t, warns, "Load leaves the names to UnknownNames, which needs the payload's")
}

func TestClosest(t *testing.T) {
	names := []string{"mooncake", "hipfile"}
	assert.Equal(t, "mooncake", Closest("mooncak", names))
	assert.Equal(t, "mooncake", Closest("moonkake", names))
	assert.Equal(t, "mooncake", Closest("moocnake", names), "a transposition is one edit")
	assert.Equal(t, "hipfile", Closest("HIPFILE", names))
	assert.Equal(t, "", Closest("ais", names))
	assert.Equal(t, "", Closest("", names))
}

func TestParseSwitch(t *testing.T) {
	for _, v := range []string{"1", "true", "TRUE", "yes", "On", " on "} {
		on, ok := ParseSwitch(v)
		assert.True(t, on && ok, v)
	}
	for _, v := range []string{"", "0", "false", "No", "OFF"} {
		on, ok := ParseSwitch(v)
		assert.True(t, !on && ok, v)
	}
	for _, v := range []string{"2", "enabled", "y", "-1"} {
		_, ok := ParseSwitch(v)
		assert.False(t, ok, v)
	}
}

// Switches introduced after v0.2.2 refuse a value outside the grammar.
func TestLoadNewSwitches(t *testing.T) {
	for _, name := range []string{"INFERA_PREFLIGHT", "INFERA_ALLOW_TCP_KV", "INFERA_EXEC_INIT"} {
		t.Run(name, func(t *testing.T) {
			_, _, err := Load(envOf(map[string]string{name: "maybe"}), testExe, testCwd, Flags{})
			var cerr *Error
			require.ErrorAs(t, err, &cerr)
			assert.Equal(t, name+`="maybe" is not a switch value: use 1/true/yes/on or 0/false/no/off`, cerr.Msg)
		})
	}
	c, _ := load(t, map[string]string{"INFERA_PREFLIGHT": "no", "INFERA_ALLOW_TCP_KV": "yes", "INFERA_EXEC_INIT": "on"})
	assert.True(t, c.PreflightOff)
	assert.True(t, c.AllowTCPKV)
	assert.Equal(t, InitChild, c.Init)
	c, _ = load(t, map[string]string{"INFERA_PREFLIGHT": "", "INFERA_ALLOW_TCP_KV": "0", "INFERA_EXEC_INIT": "false"})
	assert.False(t, c.PreflightOff, "empty INFERA_PREFLIGHT is the default, on")
	assert.False(t, c.AllowTCPKV)
	assert.Equal(t, InitOff, c.Init)
}

// The init mode is decided once, from the options and the variables: the
// group mode wins over the plain one, from either source.
func TestLoadInitMode(t *testing.T) {
	for _, tt := range []struct {
		env   map[string]string
		flags Flags
		want  InitMode
	}{
		{nil, Flags{}, InitOff},
		{nil, Flags{Init: true}, InitChild},
		{nil, Flags{InitGroup: true}, InitGroup},
		{nil, Flags{Init: true, InitGroup: true}, InitGroup},
		{map[string]string{"INFERA_EXEC_INIT": "1"}, Flags{}, InitChild},
		{map[string]string{"INFERA_EXEC_INIT_GROUP": "1"}, Flags{}, InitGroup},
		{map[string]string{"INFERA_EXEC_INIT": "1"}, Flags{InitGroup: true}, InitGroup},
		{map[string]string{"INFERA_EXEC_INIT_GROUP": "1"}, Flags{Init: true}, InitGroup},
	} {
		c, _, err := Load(envOf(tt.env), testExe, testCwd, tt.flags)
		require.NoError(t, err)
		assert.Equal(t, tt.want, c.Init, "env %v flags %+v", tt.env, tt.flags)
	}
}

func TestLoadReadyTimeout(t *testing.T) {
	tests := []struct {
		value    string
		want     int
		wantFrom string // empty: "INFERA_ENGINE_READY_TIMEOUT=<value>"
		warn     string // substring of the single warning; empty: no warning
	}{
		{value: "2400", want: 2400},
		{value: " 2400 ", want: 2400},
		{value: "1", want: 1},
		{value: "90.5", want: 91},
		{value: "0.2", want: 1},
		{value: "1799.000001", want: 1800},
		{value: "90m", want: 5400},
		{value: "2h", want: 7200},
		{value: "1h30m", want: 5400},
		{value: "1.5h", want: 5400},
		{value: "90s", want: 90},
		{value: "1500ms", want: 2},
		{value: "", want: 1800, wantFrom: "default"},
		{value: "abc", want: 1800, warn: "is neither seconds nor a duration"},
		{value: "-5", want: 1800, warn: "is not positive"},
		{value: "-1h", want: 1800, warn: "is not positive"},
		{value: "0", want: 1800, warn: "is not positive"},
		{value: "0.0", want: 1800, warn: "is not positive"},
		{value: "1e-10", want: 1800, warn: "is not positive"},
		{value: "NaN", want: 1800, warn: "is out of range"},
		{value: "inf", want: 1800, warn: "is out of range"},
		{value: "-Inf", want: 1800, warn: "is out of range"},
		{value: "1e400", want: 1800, warn: "is neither seconds nor a duration"},
		{value: "3000000000", want: 1800, warn: "is out of range"},
		{value: "9999999999", want: 1800, warn: "is out of range"},
		{value: "9223372036.854775807", want: 1800, warn: "is out of range"},
		{value: "10 minutes", want: 1800, warn: "is neither seconds nor a duration"},
		{value: "30 m", want: 1800, warn: "is neither seconds nor a duration"},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			c, warns := load(t, map[string]string{"INFERA_ENGINE_READY_TIMEOUT": tt.value})
			assert.Equal(t, tt.want, c.ReadyTimeout)
			if tt.warn == "" {
				assert.Empty(t, warns)
				from := tt.wantFrom
				if from == "" {
					from = "INFERA_ENGINE_READY_TIMEOUT=" + tt.value
				}
				assert.Equal(t, from, c.ReadyTimeoutFrom)
				return
			}
			require.Len(t, warns, 1)
			quoted := `INFERA_ENGINE_READY_TIMEOUT="` + tt.value + `"`
			assert.Contains(t, warns[0], quoted, "the warning quotes the value")
			assert.Contains(t, warns[0], tt.warn)
			assert.Contains(t, warns[0], "using 1800")
			assert.Equal(t, "default ("+quoted+" rejected)", c.ReadyTimeoutFrom)
		})
	}
}

func TestLoadReadyTimeoutQuotesControlCharacters(t *testing.T) {
	_, warns := load(t, map[string]string{"INFERA_ENGINE_READY_TIMEOUT": "5\nx"})
	require.Len(t, warns, 1)
	assert.Contains(t, warns[0], `INFERA_ENGINE_READY_TIMEOUT="5\nx"`)
	assert.NotContains(t, warns[0], "\n", "a warning is one log line")
}

func TestLoadPayloadRoot(t *testing.T) {
	tests := []struct {
		name, exe, value string
		want, wantFrom   string
	}{
		{name: "default is parent of binary dir", exe: "/overlay/bin/infera-exec", want: "/overlay", wantFrom: "parent of the directory holding /overlay/bin/infera-exec"},
		{name: "default deeper", exe: "/opt/x/payload/bin/infera-exec", want: "/opt/x/payload", wantFrom: "parent of the directory holding /opt/x/payload/bin/infera-exec"},
		{name: "absolute", exe: testExe, value: "/payload", want: "/payload", wantFrom: "PAYLOAD_ROOT"},
		{name: "absolute cleaned", exe: testExe, value: "/payload/./x/../", want: "/payload", wantFrom: "PAYLOAD_ROOT"},
		{name: "relative to cwd", exe: testExe, value: "payload", want: "/work/dir/payload", wantFrom: "PAYLOAD_ROOT"},
		{name: "relative dot", exe: testExe, value: ".", want: "/work/dir", wantFrom: "PAYLOAD_ROOT"},
		{name: "relative parent", exe: testExe, value: "../p", want: "/work/p", wantFrom: "PAYLOAD_ROOT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := map[string]string{}
			if tt.value != "" {
				m["PAYLOAD_ROOT"] = tt.value
			}
			c, warns, err := Load(envOf(m), tt.exe, testCwd, Flags{})
			require.NoError(t, err)
			assert.Empty(t, warns)
			assert.Equal(t, tt.want, c.PayloadRoot)
			assert.Equal(t, tt.wantFrom, c.PayloadRootFrom)
		})
	}
}

func TestLoadPathsRelativeToCwd(t *testing.T) {
	tests := []struct {
		name, key, value string
		get              func(Config) string
		want             string
	}{
		{"chdir absolute", "INFERA_EXEC_CHDIR", "/srv", func(c Config) string { return c.Chdir }, "/srv"},
		{"chdir relative", "INFERA_EXEC_CHDIR", "sub/dir", func(c Config) string { return c.Chdir }, "/work/dir/sub/dir"},
		{"chdir dot", "INFERA_EXEC_CHDIR", ".", func(c Config) string { return c.Chdir }, "/work/dir"},
		{"chdir empty is default", "INFERA_EXEC_CHDIR", "", func(c Config) string { return c.Chdir }, "/"},
		{"host libionic absolute", "INFERA_HOST_LIBIONIC", "/mnt/libionic.so", func(c Config) string { return c.HostLibionic }, "/mnt/libionic.so"},
		{"host libionic relative", "INFERA_HOST_LIBIONIC", "lib/libionic.so", func(c Config) string { return c.HostLibionic }, "/work/dir/lib/libionic.so"},
		{"python kept as given", "INFERA_PYTHON", "python3.12", func(c Config) string { return c.Python }, "python3.12"},
		{"python path kept as given", "INFERA_PYTHON", "venv/bin/python", func(c Config) string { return c.Python }, "venv/bin/python"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, warns := load(t, map[string]string{tt.key: tt.value})
			assert.Empty(t, warns)
			assert.Equal(t, tt.want, tt.get(c))
		})
	}
}

func TestLoadRequireNative(t *testing.T) {
	tests := []struct {
		value string
		want  Requirement
	}{
		{"", Requirement{Raw: ""}},
		{"0", Requirement{Raw: "0"}},
		{"1", Requirement{Raw: "1", All: true}},
		{"yes", Requirement{Raw: "yes", All: true}},
		{"off", Requirement{Raw: "off"}},
		{"all", Requirement{Raw: "all", All: true}},
		{"mooncake,hipfile", Requirement{Raw: "mooncake,hipfile", Names: []string{"hipfile", "mooncake"}}},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			c, warns := load(t, map[string]string{"INFERA_REQUIRE_NATIVE": tt.value})
			assert.Empty(t, warns)
			assert.Equal(t, tt.want.Raw, c.RequireNative.Raw)
			assert.Equal(t, tt.want.All, c.RequireNative.All)
			assert.Equal(t, []string(tt.want.Names), []string(c.RequireNative.Names))
		})
	}
}

func TestLoadRequireNativeGarbage(t *testing.T) {
	for _, v := range []string{"mooncake;rm -rf", "yes please!", "Moon$cake"} {
		t.Run(v, func(t *testing.T) {
			c, _, err := Load(envOf(map[string]string{
				"INFERA_REQUIRE_NATIVE": v,
				"INFERA_EXEC_REPORT":    "/r/report.json",
			}), testExe, testCwd, Flags{})
			require.Error(t, err)
			var cerr *Error
			require.True(t, errors.As(err, &cerr), "error is a *config.Error, got %T", err)
			assert.Contains(t, cerr.Msg, `INFERA_REQUIRE_NATIVE="`+v+`"`, "the error names the value")
			assert.Equal(t, cerr.Msg, err.Error())
			// The report location is read first, so the refusal can still be reported.
			assert.Equal(t, "/r/report.json", c.ReportPath)
			assert.Equal(t, "/overlay", c.PayloadRoot)
		})
	}
}

func TestLoadABIFamily(t *testing.T) {
	tests := []struct {
		value     string
		rocmFound bool
		rocmMajor int
		pyMinor   int
	}{
		{"rocm7-py312", true, 7, 12},
		{"rocm6-py310", true, 6, 10},
		{"py311", false, 0, 11},
		{"py39", false, 0, 9},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			c, warns := load(t, map[string]string{"INFERA_ABI_FAMILY": tt.value})
			assert.Empty(t, warns)
			require.NotNil(t, c.ABIFamily)
			f := c.ABIFamily
			assert.Equal(t, tt.rocmFound, f.ROCm != 0)
			assert.Equal(t, tt.rocmMajor, f.ROCm)
			assert.Equal(t, 3, f.PyMajor)
			assert.Equal(t, tt.pyMinor, f.PyMinor)
			assert.Equal(t, tt.value, f.Raw)
		})
	}
}

func TestLoadABIFamilyErrors(t *testing.T) {
	tests := []struct {
		value, want string
	}{
		{"rocm7", "expected rocmN-py3XX"},
		{"rocm7-py3.12", "expected rocmN-py3XX"},
		{"ROCM7-PY312", "expected rocmN-py3XX"},
		{"rocm7-py312 ", "expected rocmN-py3XX"},
		{"rocmX-py312", "expected rocmN-py3XX"},
		{"py3", "expected rocmN-py3XX"},
		{"py211", "CPython 3 only"},
		{"rocm7-py412", "CPython 3 only"},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			c, _, err := Load(envOf(map[string]string{"INFERA_ABI_FAMILY": tt.value}), testExe, testCwd, Flags{})
			var cerr *Error
			require.True(t, errors.As(err, &cerr), "error is a *config.Error, got %T (%v)", err, err)
			assert.Contains(t, cerr.Msg, `INFERA_ABI_FAMILY="`+tt.value+`"`)
			assert.Contains(t, cerr.Msg, tt.want)
			assert.Nil(t, c.ABIFamily)
		})
	}
}

func TestLoadReport(t *testing.T) {
	tests := []struct {
		value    string
		wantOff  bool
		wantPath string
	}{
		{"", false, ""},
		{"off", true, ""},
		{"OFF", true, ""},
		{"Off", true, ""},
		{"none", true, ""},
		{"0", true, ""},
		{"false", true, ""},
		{"FALSE", true, ""},
		{"/var/log/infera/report.json", false, "/var/log/infera/report.json"},
		{"/var/log//infera/../report.json", false, "/var/log/report.json"},
		{"report.json", false, "/work/dir/report.json"},
		{"Logs/Report.JSON", false, "/work/dir/Logs/Report.JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			c, warns := load(t, map[string]string{"INFERA_EXEC_REPORT": tt.value})
			assert.Empty(t, warns)
			assert.Equal(t, tt.wantOff, c.ReportOff)
			assert.Equal(t, tt.wantPath, c.ReportPath)
		})
	}
}

func TestLoadROCmRoots(t *testing.T) {
	tests := []struct {
		value string
		want  []string
	}{
		{"", []string{"/opt/rocm"}},
		{"/opt/rocm-6.2.0", []string{"/opt/rocm-6.2.0", "/opt/rocm"}},
		{"/opt/rocm", []string{"/opt/rocm"}},
		{"/opt/rocm/", []string{"/opt/rocm"}},
		{"/opt/./rocm", []string{"/opt/rocm"}},
		{"/usr", []string{"/usr", "/opt/rocm"}},
		{"rocm", []string{"/work/dir/rocm", "/opt/rocm"}},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			c, warns := load(t, map[string]string{"ROCM_PATH": tt.value})
			assert.Empty(t, warns)
			assert.Equal(t, tt.want, c.ROCmRoots)
		})
	}
}

func TestLoadPythonTimeout(t *testing.T) {
	tests := []struct {
		value  string
		want   time.Duration
		wantS  string
		warned bool
	}{
		{"", 10 * time.Second, "10s", false},
		{"5", 5 * time.Second, "5s", false},
		{"2.5", 2500 * time.Millisecond, "2.5s", false},
		{"1m", time.Minute, "1m0s", false},
		{"abc", 10 * time.Second, "10s", true},
		{"0", 10 * time.Second, "10s", true},
		{"-1", 10 * time.Second, "10s", true},
		{"NaN", 10 * time.Second, "10s", true},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			c, warns := load(t, map[string]string{"INFERA_PYTHON_TIMEOUT": tt.value})
			assert.Equal(t, tt.want, c.PythonTimeoutDuration())
			assert.Equal(t, tt.wantS, c.PythonTimeout)
			if !tt.warned {
				assert.Empty(t, warns)
				return
			}
			require.Len(t, warns, 1)
			assert.Contains(t, warns[0], `INFERA_PYTHON_TIMEOUT="`+tt.value+`"`)
			assert.Contains(t, warns[0], "using 10s")
		})
	}
}

func TestLoadLog(t *testing.T) {
	tests := []struct {
		value   string
		format  string
		warning string
	}{
		{"", "text", ""},
		{"text", "text", ""},
		{"TEXT", "text", ""},
		{"json", "json", ""},
		{"JSON", "json", ""},
		{"logfmt", "logfmt", ""},
		{" LogFmt ", "logfmt", ""},
		{"xml", "text", `INFERA_EXEC_LOG="xml" is not text, json or logfmt`},
		{"Yaml", "text", `INFERA_EXEC_LOG="Yaml" is not text, json or logfmt`},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			c, warns := load(t, map[string]string{"INFERA_EXEC_LOG": tt.value})
			assert.Equal(t, tt.format, c.LogFormat)
			assert.Equal(t, tt.format == "json", c.LogJSON)
			if tt.warning == "" {
				assert.Empty(t, warns)
				return
			}
			require.Len(t, warns, 1)
			assert.Contains(t, warns[0], tt.warning, "the warning quotes the value as given")
		})
	}
}

func TestLoadLogLevel(t *testing.T) {
	for _, tt := range []struct{ value, level, warning string }{
		{"", "info", ""},
		{"debug", "debug", ""},
		{"WARN", "warn", ""},
		{"warning", "warn", ""},
		{" error ", "error", ""},
		{"verbose", "info", `INFERA_EXEC_LOG_LEVEL="verbose" is not debug, info, warn or error`},
	} {
		c, warns := load(t, map[string]string{"INFERA_EXEC_LOG_LEVEL": tt.value})
		assert.Equal(t, tt.level, c.LogLevel, tt.value)
		if tt.warning == "" {
			assert.Empty(t, warns, tt.value)
		} else if assert.Len(t, warns, 1, tt.value) {
			assert.Contains(t, warns[0], tt.warning)
		}
	}
}

func TestLoadTerminationLog(t *testing.T) {
	for _, tt := range []struct{ value, path string }{
		{"", DefaultTerminationLog},
		{"/var/log/term", "/var/log/term"},
		{"off", ""},
		{"none", ""},
	} {
		c, warns := load(t, map[string]string{"INFERA_EXEC_TERMINATION_LOG": tt.value})
		assert.Equal(t, tt.path, c.TerminationLog, tt.value)
		assert.Empty(t, warns)
	}
}

func TestLoadSkipEnginePatches(t *testing.T) {
	// The switch grammar; any other non-empty value keeps v0.2.2's "set
	// = on", with a warning naming the value; 0/false/no/off are off now,
	// and the warning says v0.2.2 read them as on.
	tests := []struct {
		v    string
		want bool
		warn string
	}{
		{"", false, ""},
		{"1", true, ""},
		{"yes", true, ""},
		{"ON", true, ""},
		{"0", false, `INFERA_SKIP_ENGINE_PATCHES="0" is off; v0.2.2 read any non-empty value, this one too, as on`},
		{"false", false, `INFERA_SKIP_ENGINE_PATCHES="false" is off; v0.2.2 read`},
		{"skip", true, `INFERA_SKIP_ENGINE_PATCHES="skip" is not a switch value (1/true/yes/on or 0/false/no/off); taken as on, as v0.2.2 took any non-empty value`},
	}
	for _, tt := range tests {
		t.Run(tt.v, func(t *testing.T) {
			c, warns := load(t, map[string]string{"INFERA_SKIP_ENGINE_PATCHES": tt.v})
			assert.Equal(t, tt.want, c.SkipEnginePatches)
			if tt.warn == "" {
				assert.Empty(t, warns)
			} else {
				require.Len(t, warns, 1)
				assert.Contains(t, warns[0], tt.warn)
			}
		})
	}
}

func TestLoadWarningsAccumulate(t *testing.T) {
	c, warns := load(t, map[string]string{
		"INFERA_PYTHON_TIMEOUT":       "soon",
		"INFERA_ENGINE_READY_TIMEOUT": "later",
		"INFERA_EXEC_LOG":             "loud",
	})
	require.Len(t, warns, 3)
	assert.Contains(t, warns[0], `INFERA_PYTHON_TIMEOUT="soon"`)
	assert.Contains(t, warns[1], `INFERA_ENGINE_READY_TIMEOUT="later"`)
	assert.Contains(t, warns[2], `INFERA_EXEC_LOG="loud"`)
	assert.Equal(t, 1800, c.ReadyTimeout)
}

func TestParseSeconds(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		err  string // substring; empty: no error
	}{
		{in: "90", want: 90 * time.Second},
		{in: " 90\t", want: 90 * time.Second},
		{in: "90.5", want: 90*time.Second + 500*time.Millisecond},
		{in: "0.2", want: 200 * time.Millisecond},
		{in: "0", want: 0},
		{in: "-5", want: -5 * time.Second},
		{in: "+7", want: 7 * time.Second},
		{in: "1e3", want: 1000 * time.Second},
		{in: "1e-9", want: time.Nanosecond},
		{in: "90m", want: 90 * time.Minute},
		{in: "2h", want: 2 * time.Hour},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "300ms", want: 300 * time.Millisecond},
		{in: "-1h", want: -time.Hour},
		{in: "9223372036", want: 9223372036 * time.Second},
		{in: "9223372027", want: 9223372027 * time.Second},
		{in: "5000000001", want: 5000000001 * time.Second},
		{in: "0005", want: 5 * time.Second},
		{in: "-9223372036", want: -9223372036 * time.Second},
		{in: "9223372037", err: "is out of range"},
		{in: "9223372036.854775807", err: "is out of range"},
		{in: "NaN", err: "is out of range"},
		{in: "nan", err: "is out of range"},
		{in: "inf", err: "is out of range"},
		{in: "+Inf", err: "is out of range"},
		{in: "-infinity", err: "is out of range"},
		{in: "1e400", err: "is neither seconds nor a duration"},
		{in: "", err: "is neither seconds nor a duration"},
		{in: "   ", err: "is neither seconds nor a duration"},
		{in: "abc", err: "is neither seconds nor a duration"},
		{in: "10 minutes", err: "is neither seconds nor a duration"},
		{in: "5x", err: "is neither seconds nor a duration"},
		{in: "3000000h", err: "is neither seconds nor a duration"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSeconds(tt.in)
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				assert.Equal(t, time.Duration(0), got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseSecondsNeverWraps(t *testing.T) {
	// Values around the int64 nanosecond limit: a positive number of
	// seconds must never come back negative (or the reverse).
	for _, s := range []string{
		"9223372036.854775", "9223372036.8547758", "9223372036.854775807", "9223372036.854775808", "9223372036.9",
		"-9223372036.854775", "-9223372036.854775808", "-9223372036.9",
	} {
		d, err := ParseSeconds(s)
		if err != nil {
			assert.Contains(t, err.Error(), "out of range", s)
			continue
		}
		if strings.HasPrefix(s, "-") {
			assert.Less(t, int64(d), int64(0), s)
		} else {
			assert.Greater(t, int64(d), int64(0), s)
		}
		assert.InDelta(t, math.Abs(float64(d)), 9.223372036854775e18, 1e7, s)
	}
}

func TestErrorType(t *testing.T) {
	var err error = &Error{Msg: "boom"}
	assert.Equal(t, "boom", err.Error())
}

func TestLoadPreflightTimeout(t *testing.T) {
	tests := []struct {
		value  string
		want   time.Duration
		warned bool
	}{
		{"", DefaultPreflightTimeout, false},
		{"2", 2 * time.Second, false},
		{"1500ms", 1500 * time.Millisecond, false},
		{"0", DefaultPreflightTimeout, true},
		{"-1s", DefaultPreflightTimeout, true},
		{"soon", DefaultPreflightTimeout, true},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			c, warns := load(t, map[string]string{"INFERA_PREFLIGHT_TIMEOUT": tt.value})
			assert.Equal(t, tt.want, c.PreflightTimeoutDuration())
			assert.Equal(t, tt.want.String(), c.PreflightTimeout)
			if !tt.warned {
				assert.Empty(t, warns)
				return
			}
			require.Len(t, warns, 1)
			assert.Contains(t, warns[0], `INFERA_PREFLIGHT_TIMEOUT="`+tt.value+`"`)
		})
	}
}

func TestLoadPatchLockTimeout(t *testing.T) {
	tests := []struct {
		value  string
		want   time.Duration
		warned bool
	}{
		{"", DefaultPatchLockTimeout, false},
		{"2", 2 * time.Second, false},
		{"250ms", 250 * time.Millisecond, false},
		{"0", 0, false}, // do not wait
		{"-1s", DefaultPatchLockTimeout, true},
		{"later", DefaultPatchLockTimeout, true},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			c, warns := load(t, map[string]string{"INFERA_PATCH_LOCK_TIMEOUT": tt.value})
			assert.Equal(t, tt.want, c.PatchLockTimeoutDuration())
			assert.Equal(t, tt.want.String(), c.PatchLockTimeout)
			if !tt.warned {
				assert.Empty(t, warns)
				return
			}
			require.Len(t, warns, 1)
			assert.Contains(t, warns[0], `INFERA_PATCH_LOCK_TIMEOUT="`+tt.value+`"`)
			assert.Contains(t, warns[0], "using 5s")
		})
	}
}

// A lock wait beyond the bound is refused (78), naming the bound; the
// bound itself is accepted, in either spelling.
func TestLoadPatchLockTimeoutBound(t *testing.T) {
	for _, v := range []string{"3600", "1h", "60m"} {
		c, warns := load(t, map[string]string{"INFERA_PATCH_LOCK_TIMEOUT": v})
		assert.Equal(t, MaxPatchLockTimeout, c.PatchLockTimeoutDuration(), v)
		assert.Empty(t, warns)
	}
	for _, v := range []string{"3601", "1e9", "1h0m0.001s", "9223372036"} {
		_, _, err := Load(envOf(map[string]string{"INFERA_PATCH_LOCK_TIMEOUT": v}), testExe, testCwd, Flags{})
		var ce *Error
		require.ErrorAs(t, err, &ce, v)
		assert.Equal(t, 78, ce.ExitCode())
		assert.Contains(t, err.Error(), `INFERA_PATCH_LOCK_TIMEOUT="`+v+`"`)
		assert.Contains(t, err.Error(), "bound of 1h0m0s")
		assert.Contains(t, err.Error(), "3600 (seconds) or less")
	}
}

func TestLoadPreflightOnTimeout(t *testing.T) {
	c, warns := load(t, map[string]string{})
	assert.False(t, c.PreflightTimeoutError)
	assert.Empty(t, warns)
	c, warns = load(t, map[string]string{"INFERA_PREFLIGHT_ON_TIMEOUT": "error"})
	assert.True(t, c.PreflightTimeoutError)
	assert.Empty(t, warns)
	c, warns = load(t, map[string]string{"INFERA_PREFLIGHT_ON_TIMEOUT": "explode"})
	assert.False(t, c.PreflightTimeoutError)
	require.Len(t, warns, 1)
	assert.Contains(t, warns[0], `INFERA_PREFLIGHT_ON_TIMEOUT="explode"`)
}

func TestUserAndPatchWrite(t *testing.T) {
	c, _ := load(t, map[string]string{"INFERA_EXEC_USER": "1000:1000"})
	require.NotNil(t, c.User)
	assert.Equal(t, "1000:1000", c.User.String())
	assert.Equal(t, "INFERA_EXEC_USER", c.UserFrom)
	assert.Equal(t, PatchWriteAuto, c.PatchWrite, "the default")

	// The command line wins over the variable.
	c, _, err := Load(envOf(map[string]string{"INFERA_EXEC_USER": "1000:1000"}), testExe, testCwd, Flags{User: "app"})
	require.NoError(t, err)
	assert.Equal(t, "app", c.User.String())
	assert.Equal(t, "--user", c.UserFrom)

	for v, want := range map[string]PatchWrite{"in-place": PatchWriteInPlace, " Shadow ": PatchWriteShadow, "auto": PatchWriteAuto} {
		c, _ := load(t, map[string]string{"INFERA_PATCH_WRITE": v})
		assert.Equal(t, want, c.PatchWrite, v)
	}
	for k, v := range map[string]string{"INFERA_EXEC_USER": "1000:", "INFERA_PATCH_WRITE": "sideways"} {
		_, _, err := Load(envOf(map[string]string{k: v}), testExe, testCwd, Flags{})
		var ce *Error
		require.ErrorAs(t, err, &ce, "%s=%s", k, v)
		assert.Contains(t, err.Error(), k)
	}
}
