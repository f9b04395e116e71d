package main

import (
	"github.com/osfproject/osf/internal/policy"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// logger is the core's zap logger: silent except for errors unless
// OSF_LOG_LEVEL says otherwise, written to OSF_LOG_FILE or standard error.
//
// The core never uses os.Stderr or os.OpenFile: an *os.File on a
// non-blocking fd would pull the Go netpoller (an epoll and an eventfd) into
// the program's fd space, and the program's numbering must not change. The
// log file is opened with raw system calls and moved to osf's hidden fd
// range.
type logger struct {
	z *zap.SugaredLogger
}

// fdWriter writes to an fd with raw system calls; a full non-blocking fd
// drops the rest of the line rather than block the program.
type fdWriter int

func (w fdWriter) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := unix.Write(int(w), b[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

func (w fdWriter) Sync() error { return nil }

// stderr is the program's standard error.
const stderr = fdWriter(2)

// openLog opens OSF_LOG_FILE in the hidden range starting at base; -1 and
// the error when it cannot.
func openLog(path string, base int) (int, error) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return -1, err
	}
	if base <= 0 {
		return fd, nil
	}
	hfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, base)
	unix.Close(fd)
	if err != nil {
		return -1, err
	}
	return hfd, nil
}

// newLogger builds the logger; logFD is the hidden fd of OSF_LOG_FILE or -1.
func newLogger(cfg *policy.Config, pid int, prog string, base int) (l *logger, logFD int) {
	out, logFD := stderr, -1
	if cfg.LogFile != "" {
		fd, err := openLog(cfg.LogFile, base)
		if err != nil {
			report("osf: OSF_LOG_FILE=%q: %v; logging to stderr\n", cfg.LogFile, err)
		} else {
			out, logFD = fdWriter(fd), fd
		}
	}
	enc := zapcore.NewConsoleEncoder(zapcore.EncoderConfig{
		TimeKey:        "ts",
		LevelKey:       "level",
		NameKey:        "logger",
		MessageKey:     "msg",
		LineEnding:     zapcore.DefaultLineEnding,
		EncodeLevel:    zapcore.LowercaseLevelEncoder,
		EncodeTime:     zapcore.ISO8601TimeEncoder,
		EncodeDuration: zapcore.StringDurationEncoder,
		EncodeName:     zapcore.FullNameEncoder,
	})
	core := zapcore.NewCore(enc, zapcore.Lock(out), zap.NewAtomicLevelAt(zapcore.Level(cfg.LogLevel)))
	z := zap.New(core, zap.ErrorOutput(zapcore.Lock(stderr))).Named("osf")
	return &logger{z: z.Sugar().With("pid", pid, "prog", prog)}, logFD
}

func (l *logger) Debugf(f string, a ...any) { l.z.Debugf(f, a...) }
func (l *logger) Infof(f string, a ...any)  { l.z.Infof(f, a...) }
func (l *logger) Warnf(f string, a ...any)  { l.z.Warnf(f, a...) }
func (l *logger) Errorf(f string, a ...any) { l.z.Errorf(f, a...) }
