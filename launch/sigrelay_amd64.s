#include "textflag.h"

// func relayHandler()
// Called by the kernel, never by Go, with the C calling convention: the
// signal number in DI, on the thread's signal stack (SA_ONSTACK), every
// signal blocked (sa_mask), returning to relayRestorer. It writes the
// number, one byte, to relayFD (non-blocking: a full pipe drops it) and
// touches neither the runtime's state nor a callee-saved register.
TEXT ·relayHandler(SB),NOSPLIT|NOFRAME,$0-0
	SUBQ	$16, SP
	MOVB	DI, 0(SP)
	MOVLQSX	·relayFD(SB), DI
	MOVQ	SP, SI
	MOVQ	$1, DX
	MOVQ	$1, AX // SYS_write
	SYSCALL
	ADDQ	$16, SP
	RET

// func relayRestorer()
// Where relayHandler returns to: back to the interrupted code.
TEXT ·relayRestorer(SB),NOSPLIT|NOFRAME,$0-0
	MOVQ	$15, AX // SYS_rt_sigreturn
	SYSCALL
	INT	$3 // not reached

// func relayAddrs() (handler, restorer uintptr)
TEXT ·relayAddrs(SB),NOSPLIT,$0-16
	LEAQ	·relayHandler(SB), AX
	MOVQ	AX, handler+0(FP)
	LEAQ	·relayRestorer(SB), AX
	MOVQ	AX, restorer+8(FP)
	RET
