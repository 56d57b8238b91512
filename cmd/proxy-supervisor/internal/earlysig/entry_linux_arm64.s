// The process's first instructions on arm64: entry_linux_amd64.s's, in
// arm64's words (syscall number in R8, arguments from R0, SVC; no restorer:
// the kernel returns through the vDSO's).

#include "textflag.h"

#define SYS_write		64
#define SYS_exit_group		94
#define SYS_rt_sigaction	134
#define SYS_getpid		172

#define SIG_IGN		1
#define SA_RESTART	0x10000000
#define HANDLER_MASK	((1<<(2-1))|(1<<(15-1)))

#define GUARD(sig) \
	MOVD	$sig, R0 \
	MOVD	$0, R1 \
	ADD	$32, RSP, R2 \
	MOVD	$8, R3 \
	MOVD	$SYS_rt_sigaction, R8 \
	SVC \
	MOVD	32(RSP), R4 \
	CMP	$SIG_IGN, R4 \
	BEQ	7(PC) \
	MOVD	$sig, R0 \
	MOVD	RSP, R1 \
	MOVD	$0, R2 \
	MOVD	$8, R3 \
	MOVD	$SYS_rt_sigaction, R8 \
	SVC

TEXT proxy_supervisor_entry(SB),NOSPLIT|NOFRAME,$0
	MOVW	$1, R4
	MOVD	$·entered(SB), R5
	MOVW	R4, (R5)
	SUB	$64, RSP
	MOVD	$proxy_supervisor_sighandler(SB), R4
	MOVD	R4, 0(RSP)
	MOVD	$SA_RESTART, R4
	MOVD	R4, 8(RSP)
	MOVD	ZR, 16(RSP)
	MOVD	$HANDLER_MASK, R4
	MOVD	R4, 24(RSP)
	GUARD(15)
	GUARD(2)
	ADD	$64, RSP
	B	_rt0_arm64_linux(SB)

// The handler: entry_linux_amd64.s says what it does. The signal is in R0;
// only caller-saved registers (R0-R17) are touched.
TEXT proxy_supervisor_sighandler(SB),NOSPLIT|NOFRAME,$0
	MOVD	R0, R9			// the signal
	SUB	$32, RSP
	MOVD	$0, R1
	MOVD	RSP, R2
	MOVD	$8, R3
	MOVD	$SYS_rt_sigaction, R8
	SVC
	MOVD	0(RSP), R4
	ADD	$32, RSP
	MOVD	$proxy_supervisor_sighandler(SB), R5
	CMP	R4, R5
	BNE	forwarded
	MOVD	$·early(SB), R5
	MOVWU	(R5), R6
	MOVD	$1, R7
	LSLW	R9, R7, R7
	ORRW	R7, R6, R6
	MOVW	R6, (R5)
	RET
forwarded:
	MOVD	$SYS_getpid, R8
	SVC
	CMP	$1, R0
	BEQ	pid1
	RET
pid1:
	MOVD	$2, R0
	MOVD	$·pid1Line(SB), R5
	MOVD	0(R5), R1
	MOVD	8(R5), R2
	MOVD	$SYS_write, R8
	SVC
	ADD	$128, R9, R0
	MOVD	$SYS_exit_group, R8
	SVC
	RET
