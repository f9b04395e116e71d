// Command sigpatch adjusts the Go runtime's signal table inside a built
// libosfcore.so so that the runtime's threads keep SIGCHLD, SIGPROF and
// SIGSTKFLT blocked (see main.go for why). The Makefile runs it on every
// build of the core:
//
//	go run ./preload/core/sigpatch build/libosfcore.so.tmp
package main
