#include "textflag.h"

// func relayHandler()
// Called by the kernel, never by Go, with the C calling convention: the
// signal number in DI, the siginfo in SI, the ucontext in DX, on the
// thread's signal stack (SA_ONSTACK), every signal blocked (sa_mask),
// returning to relayRestorer. It decides by the sender (si_code, si_pid):
//
//   - a fault the init caused (si_code > 0 for a signal of relayChain's
//     faults): on to the Go runtime's handler, which crashes or panics;
//   - sent by the init itself (si_code SI_USER, SI_QUEUE or SI_TKILL and
//     si_pid the init's): the runtime's preemption (SIGURG) on to the
//     runtime's handler; anything else of its own (a SIGPIPE the runtime
//     raises for a write to a closed stdout) dropped;
//   - the process's own timers, message queues and I/O (other si_code
//     of zero or less): dropped;
//   - everything else, sent by another process or by the kernel for
//     something outside (a terminal's hangup, a child's end): its number,
//     one byte, written to relayFD (non-blocking: a full pipe drops it).
//
// It touches neither the runtime's state nor a callee-saved register, and
// leaves DI, SI, DX and the stack as the kernel set them when it jumps on.
TEXT ·relayHandler(SB),NOSPLIT|NOFRAME,$0-0
	MOVL	8(SI), AX // si_code
	CMPL	AX, $0
	JGT	kernel
	JEQ	process // SI_USER
	CMPL	AX, $-1 // SI_QUEUE
	JEQ	process
	CMPL	AX, $-6 // SI_TKILL
	JEQ	process
	RET
process:
	MOVL	16(SI), AX // si_pid
	CMPL	AX, ·relaySelf(SB)
	JNE	send
	CMPQ	DI, $23 // SIGURG: the runtime's preemption
	JNE	drop
	LEAQ	·relayChain(SB), AX
	MOVQ	(AX)(DI*8), AX
	CMPQ	AX, $1 // SIG_DFL, SIG_IGN: nothing to go on to
	JLS	drop
	JMP	AX
drop:
	RET
kernel:
	LEAQ	·relayFault(SB), AX
	CMPB	(AX)(DI*1), $0
	JEQ	send
	LEAQ	·relayChain(SB), AX
	MOVQ	(AX)(DI*8), AX
	CMPQ	AX, $1
	JLS	send
	JMP	AX
send:
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
