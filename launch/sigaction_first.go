//go:build arm64 || riscv64 || loong64 || ppc64 || ppc64le || s390x

package launch

// sigactionHandlerFirst: the kernel's struct sigaction starts with the
// handler, followed by word-sized flags (not so on mips or 386).
const sigactionHandlerFirst = true
