package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
)

// passConn accepts one connection on addr and hands it to cat (os/exec:
// standard input and output), which echoes it; the parent closes its
// copies at once. With clearEnv cat's environment has only PATH (no
// LD_PRELOAD). Prints "child PID", then "ok" when cat has exited.
func passConn(addr string, clearEnv bool) error {
	ln, err := listen(addr)
	if err != nil {
		return err
	}
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	f, err := c.(*net.TCPConn).File()
	if err != nil {
		return err
	}
	cmd := exec.Command("cat")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = f, f, os.Stderr
	if clearEnv {
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	fmt.Printf("child %d\n", cmd.Process.Pid)
	f.Close()
	c.Close()
	ln.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("cat: %v", err)
	}
	fmt.Println("ok")
	return nil
}

// passListener listens on addr and hands the listener to a `gonet
// servefd` child as fd 3 (os/exec ExtraFiles), closing its own: a
// graceful restart. mode "clearenv": the child's environment has only PATH
// (no LD_PRELOAD, no OSF_GO); "sh": the child is /bin/sh, which execs
// gonet servefd (a C program in between, as strace or a wrapper script).
// Prints "listening PORT", "child PID", and waits for the child.
func passListener(addr, mode string) error {
	ln, err := listen(addr)
	if err != nil {
		return err
	}
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		return err
	}
	cmd := exec.Command(os.Args[0], "servefd", "3")
	switch mode {
	case "clearenv":
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	case "sh":
		cmd = exec.Command("/bin/sh", "-c", `exec "$0" servefd 3`, os.Args[0])
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		return err
	}
	fmt.Printf("child %d\n", cmd.Process.Pid)
	f.Close()
	ln.Close()
	return cmd.Wait()
}

// serveFD echoes every connection of the listener it inherited at fd 3.
func serveFD() error {
	ln, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		return err
	}
	fmt.Println("serving")
	return echoAll(ln)
}
