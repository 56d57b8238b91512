// The process's first instructions (the ELF entry, linked with
// -ldflags=-E=proxy_supervisor_entry; entry.go says why). They give SIGTERM
// and SIGINT a handler before the Go runtime starts, then jump to the
// runtime's own entry with the stack as the kernel left it.

#include "textflag.h"

#define SYS_write		1
#define SYS_rt_sigaction	13
#define SYS_rt_sigreturn	15
#define SYS_getpid		39
#define SYS_exit_group		231

#define SIG_IGN		1
#define SA_RESTART	0x10000000
#define SA_RESTORER	0x04000000	// x86-64's kernel wants one
// The mask while the handler runs: SIGINT and SIGTERM, so that one cannot
// interrupt the other's update of early.
#define HANDLER_MASK	((1<<(2-1))|(1<<(15-1)))

// GUARD installs the handler for sig unless the signal is inherited
// ignored (the runtime respects an inherited SIG_IGN for SIGINT, and so do
// we, for both). The stack holds act at 0(SP), the old action at 32(SP).
#define GUARD(sig) \
	MOVQ	$SYS_rt_sigaction, AX \
	MOVQ	$sig, DI \
	XORQ	SI, SI \
	LEAQ	32(SP), DX \
	MOVQ	$8, R10 \
	SYSCALL \
	CMPQ	32(SP), $SIG_IGN \
	JEQ	7(PC) \
	MOVQ	$SYS_rt_sigaction, AX \
	MOVQ	$sig, DI \
	MOVQ	SP, SI \
	XORQ	DX, DX \
	MOVQ	$8, R10 \
	SYSCALL

TEXT proxy_supervisor_entry(SB),NOSPLIT|NOFRAME,$0
	MOVL	$1, ·entered(SB)
	SUBQ	$64, SP
	LEAQ	proxy_supervisor_sighandler(SB), AX
	MOVQ	AX, 0(SP)
	MOVQ	$(SA_RESTORER|SA_RESTART), 8(SP)
	LEAQ	proxy_supervisor_sigreturn(SB), AX
	MOVQ	AX, 16(SP)
	MOVQ	$HANDLER_MASK, 24(SP)
	GUARD(15)
	GUARD(2)
	ADDQ	$64, SP
	JMP	_rt0_amd64_linux(SB)

// The handler, called by the kernel with the signal in DI, or by the
// runtime's sigfwd (the C ABI: only caller-saved registers are touched).
// While it is still the installed handler, the runtime has not started
// its own: the signal is kept in early for the command. Once the runtime's
// is installed, it was forwarded here by Go's default action for a signal
// nobody subscribed (dieFromSignal): in PID 1 that action would end in
// exit 2, since the kernel ignores a default-action signal there, so exit
// 128+signal with a line instead; elsewhere return, and the runtime's
// default kills the process by the signal as it always did.
TEXT proxy_supervisor_sighandler(SB),NOSPLIT|NOFRAME,$0
	MOVL	DI, R8			// the signal; syscalls keep R8
	SUBQ	$32, SP
	MOVQ	$SYS_rt_sigaction, AX
	XORQ	SI, SI
	MOVQ	SP, DX
	MOVQ	$8, R10
	SYSCALL
	MOVQ	0(SP), AX
	ADDQ	$32, SP
	LEAQ	proxy_supervisor_sighandler(SB), R9
	CMPQ	AX, R9
	JNE	forwarded
	MOVL	·early(SB), AX
	BTSL	R8, AX
	MOVL	AX, ·early(SB)
	RET
forwarded:
	MOVQ	$SYS_getpid, AX
	SYSCALL
	CMPQ	AX, $1
	JEQ	pid1
	RET
pid1:
	MOVQ	$SYS_write, AX
	MOVQ	$2, DI
	MOVQ	·pid1Line+0(SB), SI
	MOVQ	·pid1Line+8(SB), DX
	SYSCALL
	LEAQ	128(R8), DI
	MOVQ	$SYS_exit_group, AX
	SYSCALL
	RET

// The restorer the kernel returns through from the handler.
TEXT proxy_supervisor_sigreturn(SB),NOSPLIT|NOFRAME,$0
	MOVQ	$SYS_rt_sigreturn, AX
	SYSCALL
	INT	$3
