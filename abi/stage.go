package abi

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
)

// Input is what the ABI step takes from the configuration.
type Input struct {
	Override   *config.Family // INFERA_ABI_FAMILY
	ROCmRoots  []string       // ROCM_PATH, then /opt/rocm
	Python     string         // INFERA_PYTHON as given
	PythonPath string         // Python resolved once for the whole pass
	Env        *environ.Env
	Dir        string // where an asked interpreter runs: the worker's working directory
	Timeout    time.Duration
	Log        *slog.Logger
}

// Detect decides the container's ABI family. On error the family holds
// what was found so far, for the report.
func Detect(ctx context.Context, in Input) (Family, error) {
	if in.Override != nil {
		f := FromConfig(*in.Override)
		in.Log.Warn(fmt.Sprintf("ABI family %s set by INFERA_ABI_FAMILY; detection skipped (for debugging only)", f.Name()))
		return f, nil
	}
	var f Family
	rocm, err := DetectROCm(in.ROCmRoots)
	f.ROCm = rocm
	if err != nil {
		return f, err
	}
	for _, n := range rocm.Notes {
		in.Log.Warn("ROCm: " + n)
	}
	py, err := DetectPython(ctx, PythonProbe{
		Interpreter: in.Python,
		Path:        in.PythonPath,
		Env:         in.Env,
		Dir:         in.Dir,
		Timeout:     in.Timeout,
	})
	f.Python = py
	if err != nil {
		return f, err
	}
	rocmText := fmt.Sprintf("no ROCm (no libamdhip64 in %s)", strings.Join(rocm.Searched, ", "))
	if rocm.Found {
		rocmText = fmt.Sprintf("ROCm %d from %s", rocm.Major, rocm.DecidedBy)
	}
	in.Log.Info(fmt.Sprintf("ABI family %s: %s; CPython %s from %s", f.Name(), rocmText, py.Version(), py.DecidedBy),
		"family", f.Name())
	return f, nil
}
