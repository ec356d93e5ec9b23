#include "textflag.h"

// func entry()
// The process's first instructions when the binary is linked with
// -ldflags=-E=<EntrySymbol>: the kernel's initial stack (argc, argv,
// envp, auxv at SP), no Go runtime yet. It asks rt_sigaction for the
// handler of each signal 1-64 and rt_sigprocmask for the mask, records
// the ignored ones and the mask in entryIgnored and entryBlocked, sets
// entryRead, and jumps to the runtime's entry with the stack untouched
// and the registers as the kernel leaves them for it (only RSP and RDX
// matter there; RDX, an at-exit function, is zero for a static binary).
TEXT ·entry(SB),NOSPLIT|NOFRAME,$0-0
	SUBQ	$32, SP // struct sigaction: handler, flags, restorer, mask
	MOVQ	$1, R12  // the signal
	XORQ	R13, R13 // the ignored set
next:
	MOVQ	$13, AX // SYS_rt_sigaction
	MOVQ	R12, DI
	XORQ	SI, SI
	MOVQ	SP, DX
	MOVQ	$8, R10
	SYSCALL
	CMPQ	AX, $0
	JNE	skip
	CMPQ	0(SP), $1 // SIG_IGN
	JNE	skip
	MOVQ	R12, CX
	DECQ	CX
	MOVQ	$1, AX
	SHLQ	CX, AX
	ORQ	AX, R13
skip:
	INCQ	R12
	CMPQ	R12, $65
	JLT	next
	MOVQ	R13, ·entryIgnored(SB)
	MOVQ	$14, AX // SYS_rt_sigprocmask
	XORQ	DI, DI  // SIG_BLOCK, with no set: only the old one
	XORQ	SI, SI
	MOVQ	SP, DX
	MOVQ	$8, R10
	SYSCALL
	MOVQ	0(SP), AX
	MOVQ	AX, ·entryBlocked(SB)
	MOVQ	$1, ·entryRead(SB)
	ADDQ	$32, SP
	XORQ	AX, AX
	XORQ	CX, CX
	XORQ	DX, DX
	XORQ	SI, SI
	XORQ	DI, DI
	XORQ	R10, R10
	XORQ	R11, R11
	XORQ	R12, R12
	XORQ	R13, R13
	JMP	_rt0_amd64_linux(SB)
