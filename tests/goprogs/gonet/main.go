// Command gonet is the Go side of the tests that run Go programs under osf
// (tests/gosys_test.go): an echo server, an echo client that verifies every
// byte, a 64-byte ping-pong and an HTTP server, over the standard net
// package. The tests build it with `go build` (a dynamically linked binary,
// which is what LD_PRELOAD can reach) and run it bare and under osf.
//
//	gonet serve ADDR              echo every connection; prints "listening PORT"
//	gonet http ADDR               net/http server answering /hello; prints "listening PORT"
//	gonet echo ADDR CONNS BYTES   CONNS concurrent connections, each sends BYTES
//	                              and reads them back; prints "ok" when all match
//	gonet exec ADDR               one connection; runs /bin/true (os/exec) in the
//	                              middle of an exchange, then goes on (pauses
//	                              for a line of standard input once)
//	gonet pingpong ADDR ROUNDS    64-byte ping-pong; prints "rtt avg=NS max=NS over1ms=N"
//	gonet hold ADDR               one connection that echoes one line, then
//	                              waits for standard input to close
//	gonet passconn ADDR [clearenv]  accepts one connection and hands it to cat
//	                              (os/exec Stdin, Stdout; clearenv: only PATH in
//	                              its environment); prints "listening PORT",
//	                              "child PID", "ok" (pass.go)
//	gonet passlisten ADDR [clearenv|sh]  hands its listener to `gonet servefd 3`
//	                              (ExtraFiles; clearenv: only PATH in its
//	                              environment; sh: through /bin/sh's exec);
//	                              prints "listening PORT", "child PID"
//	gonet servefd 3               echoes the connections of the listener at fd 3
//	gonet stackuse -              bytes below the caller's SP a passed and a
//	                              hooked system call write (stackuse.go)
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fail("usage: gonet serve|http|echo|exec|pingpong|hold|stackuse|passconn|passlisten|servefd ADDR [ARGS]")
	}
	addr := os.Args[2]
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(addr)
	case "http":
		err = serveHTTP(addr)
	case "echo":
		err = echo(addr, atoi(3), atoi(4))
	case "exec":
		err = execMidway(addr)
	case "pingpong":
		err = pingpong(addr, atoi(3))
	case "hold":
		err = hold(addr)
	case "stackuse":
		err = printStackUse()
	case "passconn":
		err = passConn(addr, len(os.Args) > 3 && os.Args[3] == "clearenv")
	case "passlisten":
		mode := ""
		if len(os.Args) > 3 {
			mode = os.Args[3]
		}
		err = passListener(addr, mode)
	case "servefd":
		err = serveFD()
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "gonet:", msg)
	os.Exit(1)
}

func atoi(i int) int {
	if len(os.Args) <= i {
		fail("missing argument")
	}
	n, err := strconv.Atoi(os.Args[i])
	if err != nil {
		fail(err.Error())
	}
	return n
}

func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	fmt.Printf("listening %d\n", ln.Addr().(*net.TCPAddr).Port)
	return ln, nil
}

func serve(addr string) error {
	ln, err := listen(addr)
	if err != nil {
		return err
	}
	return echoAll(ln)
}

// echoAll echoes every connection ln accepts.
func echoAll(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

func serveHTTP(addr string) error {
	ln, err := listen(addr)
	if err != nil {
		return err
	}
	http.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "hello %d\n", len(body))
	})
	return http.Serve(ln, nil)
}

// pattern is the i-th connection's data: every byte depends on the
// connection and its offset, so a byte from another stream or place shows.
func pattern(i, n int) []byte {
	b := make([]byte, n)
	x := uint32(i)*2654435761 + 1
	for j := range b {
		x = x*1664525 + 1013904223
		b[j] = byte(x >> 24)
	}
	return b
}

func echo(addr string, conns, size int) error {
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		wg.Go(func() {
			if err := echoOne(addr, pattern(i, size)); err != nil {
				errs <- fmt.Errorf("connection %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Println("ok")
	return nil
}

func echoOne(addr string, data []byte) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if err := <-werr; err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("read %d bytes back, want %d, equal prefix %d", len(got), len(data), prefix(got, data))
	}
	return nil
}

func prefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// execMidway exchanges three blocks on one connection and runs /bin/true
// through os/exec (a vfork child that execs) after each of the first two.
// After the first it prints "paused" and waits for a line on standard
// input, so that a test can look at the connection.
func execMidway(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	for round := range 3 {
		data := pattern(round, 100000)
		werr := make(chan error, 1)
		go func() { _, err := c.Write(data); werr <- err }()
		got := make([]byte, len(data))
		if _, err := io.ReadFull(c, got); err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		if err := <-werr; err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		if !bytes.Equal(got, data) {
			return fmt.Errorf("round %d: bytes differ at %d", round, prefix(got, data))
		}
		if round < 2 {
			if err := exec.Command("/bin/true").Run(); err != nil {
				return fmt.Errorf("exec /bin/true: %w", err)
			}
		}
		if round == 0 {
			fmt.Println("paused")
			if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
				return fmt.Errorf("stdin: %w", err)
			}
		}
	}
	fmt.Println("ok")
	return nil
}

func pingpong(addr string, rounds int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	msg := pattern(7, 64)
	got := make([]byte, 64)
	var total, worst time.Duration
	slow := 0 // round trips over 1 ms
	for range rounds {
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, got); err != nil {
			return err
		}
		d := time.Since(t0)
		total += d
		worst = max(worst, d)
		if d > time.Millisecond {
			slow++
		}
		if !bytes.Equal(got, msg) {
			return fmt.Errorf("ping-pong bytes differ")
		}
	}
	fmt.Printf("rtt avg=%d max=%d over1ms=%d\n", total.Nanoseconds()/int64(rounds), worst.Nanoseconds(), slow)
	return nil
}

// hold makes one connection, checks one echoed line, prints "connected"
// and keeps the connection until standard input closes.
func hold(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "hello\n" {
		return fmt.Errorf("echo: %q, %v", line, err)
	}
	fmt.Println("connected")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}
