// Command grpcpp is a gRPC-Go unary ping-pong for `make bench` (the gRPC
// rows, tests/bench/run.sh): one service with one method that returns the
// bytes it is given, over the standard grpc-go stack (HTTP/2 over TCP),
// with a codec that passes raw bytes, so that no generated code is needed.
// It is a module of its own, so that osf's own module does not depend on
// gRPC.
//
//	grpcpp serve ADDR            serves pp.PP/Echo; prints "listening PORT"
//	grpcpp pingpong ADDR ROUNDS  ROUNDS unary calls of 64 bytes, one at a
//	                             time, each reply checked; prints
//	                             "rtt avg=NS max=NS"
package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// rawCodec marshals a *[]byte as its bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	b := v.(*[]byte)
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "raw" }

const method = "/pp.PP/Echo"

var service = grpc.ServiceDesc{
	ServiceName: "pp.PP",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var b []byte
			if err := dec(&b); err != nil {
				return nil, err
			}
			return &b, nil
		},
	}},
}

func main() {
	if len(os.Args) < 3 {
		fail("usage: grpcpp serve ADDR | grpcpp pingpong ADDR ROUNDS")
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2])
	case "pingpong":
		if len(os.Args) != 4 {
			fail("usage: grpcpp pingpong ADDR ROUNDS")
		}
		var n int
		if n, err = strconv.Atoi(os.Args[3]); err != nil || n <= 0 {
			fail("grpcpp: bad ROUNDS " + os.Args[3])
		}
		err = pingpong(os.Args[2], n)
	default:
		fail("grpcpp: unknown command " + os.Args[1])
	}
	if err != nil {
		fail("grpcpp: " + err.Error())
	}
}

func serve(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	s.RegisterService(&service, struct{}{})
	fmt.Printf("listening %d\n", l.Addr().(*net.TCPAddr).Port)
	return s.Serve(l)
}

func pingpong(addr string, rounds int) error {
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		return err
	}
	defer c.Close()
	req := bytes.Repeat([]byte{'p'}, 64)
	var resp []byte
	ctx := context.Background()
	// The first call makes the connection; it is not timed.
	if err := c.Invoke(ctx, method, &req, &resp); err != nil {
		return err
	}
	var total, worst time.Duration
	for i := 0; i < rounds; i++ {
		req[i%64] = byte('a' + i%26)
		t := time.Now()
		if err := c.Invoke(ctx, method, &req, &resp); err != nil {
			return err
		}
		d := time.Since(t)
		if !bytes.Equal(req, resp) {
			return fmt.Errorf("round %d: reply differs from the request", i)
		}
		total += d
		worst = max(worst, d)
	}
	fmt.Printf("rtt avg=%d max=%d\n", total.Nanoseconds()/int64(rounds), worst.Nanoseconds())
	return nil
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(2)
}
