package main

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
)

// Flags of runtime.sigTabT (runtime/runtime2.go).
const (
	sigNotify   = 1 << 0
	sigThrow    = 1 << 2
	sigUnblock  = 1 << 7
	sigIgn      = 1 << 8
	entryBytes  = 24 // struct { flags int32; name string } on 64-bit
	tableSymbol = "runtime.sigtable"
)

// patches lists each signal whose entry is changed and the flags Go 1.26
// gives it.
var patches = []struct {
	sig   int
	name  string
	flags int32
}{
	{16, "SIGSTKFLT", sigThrow | sigUnblock},
	{17, "SIGCHLD", sigNotify | sigUnblock | sigIgn},
	{27, "SIGPROF", sigNotify | sigUnblock},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: sigpatch LIBRARY")
		os.Exit(2)
	}
	if err := patch(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "sigpatch: %v\n", err)
		os.Exit(1)
	}
}

func patch(path string) error {
	off, err := tableOffset(path)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [4]byte
	for _, p := range patches {
		at := off + int64(p.sig*entryBytes)
		if _, err := f.ReadAt(b[:], at); err != nil {
			return fmt.Errorf("read %s entry: %w", p.name, err)
		}
		got := int32(binary.LittleEndian.Uint32(b[:]))
		want := p.flags &^ sigUnblock
		if got == want {
			continue // already patched
		}
		if got != p.flags {
			return fmt.Errorf("%s: runtime.sigtable flags %#x, want %#x: the Go runtime changed; review this patch", p.name, got, p.flags)
		}
		binary.LittleEndian.PutUint32(b[:], uint32(want))
		if _, err := f.WriteAt(b[:], at); err != nil {
			return fmt.Errorf("write %s entry: %w", p.name, err)
		}
	}
	return f.Close()
}

// tableOffset returns the file offset of runtime.sigtable.
func tableOffset(path string) (int64, error) {
	ef, err := elf.Open(path)
	if err != nil {
		return 0, err
	}
	defer ef.Close()
	if ef.Class != elf.ELFCLASS64 || ef.ByteOrder != binary.LittleEndian {
		return 0, fmt.Errorf("%s: want a 64-bit little-endian library", path)
	}
	syms, err := ef.Symbols()
	if err != nil {
		return 0, fmt.Errorf("%s: symbols: %w", path, err)
	}
	for _, s := range syms {
		if s.Name != tableSymbol {
			continue
		}
		for _, sec := range ef.Sections {
			if sec.Type == elf.SHT_PROGBITS && s.Value >= sec.Addr && s.Value+s.Size <= sec.Addr+sec.Size {
				return int64(sec.Offset + s.Value - sec.Addr), nil
			}
		}
		return 0, fmt.Errorf("%s: %s is not in a file-backed section", path, tableSymbol)
	}
	return 0, fmt.Errorf("%s: no symbol %s", path, tableSymbol)
}
