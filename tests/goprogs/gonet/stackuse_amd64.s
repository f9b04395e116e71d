#include "textflag.h"

// func stackUse(trap, a1, a2, a3 uintptr) uintptr
//
// stackUse makes system call trap through syscall.RawSyscall6 with SP
// 1536 bytes above the bottom of its own frame, whose lower 1536 bytes
// hold a pattern, and returns how many bytes below that SP the call
// wrote (the calls' return addresses, frames and whatever Syscall6 writes).
TEXT ·stackUse(SB), 0, $2048-40
	MOVQ	trap+0(FP), R8
	MOVQ	a1+8(FP), R9
	MOVQ	a2+16(FP), R10
	MOVQ	a3+24(FP), R11
	MOVQ	$0x5a5a5a5a5a5a5a5a, AX
	MOVQ	$0, CX
fill:
	MOVQ	AX, 0(SP)(CX*8)
	INCQ	CX
	CMPQ	CX, $192
	JLT	fill
	ADJSP	$-1536
	MOVQ	R8, 0(SP)
	MOVQ	R9, 8(SP)
	MOVQ	R10, 16(SP)
	MOVQ	R11, 24(SP)
	MOVQ	$0, 32(SP)
	MOVQ	$0, 40(SP)
	MOVQ	$0, 48(SP)
	CALL	syscall·RawSyscall6(SB)
	ADJSP	$1536
	MOVQ	$0x5a5a5a5a5a5a5a5a, AX
	MOVQ	$0, CX
scan:
	CMPQ	AX, 0(SP)(CX*8)
	JNE	done
	INCQ	CX
	CMPQ	CX, $192
	JLT	scan
done:
	MOVQ	$192, DX
	SUBQ	CX, DX
	SHLQ	$3, DX
	MOVQ	DX, ret+32(FP)
	RET
