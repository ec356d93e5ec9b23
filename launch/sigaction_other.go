//go:build !(amd64 || arm64 || riscv64 || loong64 || ppc64 || ppc64le || s390x)

package launch

const sigactionHandlerFirst = false
