package main

import (
	"fmt"
	"os"

	"github.com/osfproject/osf/internal/policy"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// logger is the core's zap logger: silent except for errors unless
// OSF_LOG_LEVEL says otherwise, written to OSF_LOG_FILE or standard error.
type logger struct {
	z *zap.SugaredLogger
}

func newLogger(cfg *policy.Config, pid int, prog string) *logger {
	out := "stderr"
	if cfg.LogFile != "" {
		out = cfg.LogFile
	}
	zc := zap.Config{
		Level:    zap.NewAtomicLevelAt(zapLevel(cfg.LogLevel)),
		Encoding: "console",
		EncoderConfig: zapcore.EncoderConfig{
			TimeKey:        "ts",
			LevelKey:       "level",
			NameKey:        "logger",
			MessageKey:     "msg",
			LineEnding:     zapcore.DefaultLineEnding,
			EncodeLevel:    zapcore.LowercaseLevelEncoder,
			EncodeTime:     zapcore.ISO8601TimeEncoder,
			EncodeDuration: zapcore.StringDurationEncoder,
		},
		OutputPaths:      []string{out},
		ErrorOutputPaths: []string{"stderr"},
	}
	z, err := zc.Build()
	if err != nil {
		fmt.Fprintf(os.Stderr, "osf: OSF_LOG_FILE=%q: %v; logging to stderr\n", cfg.LogFile, err)
		zc.OutputPaths = []string{"stderr"}
		if z, err = zc.Build(); err != nil {
			z = zap.NewNop()
		}
	}
	return &logger{z: z.Named("osf").Sugar().With("pid", pid, "prog", prog)}
}

func zapLevel(l policy.LogLevel) zapcore.Level {
	switch l {
	case policy.LogDebug:
		return zapcore.DebugLevel
	case policy.LogInfo:
		return zapcore.InfoLevel
	case policy.LogWarn:
		return zapcore.WarnLevel
	}
	return zapcore.ErrorLevel
}

func (l *logger) Debugf(f string, a ...any) { l.z.Debugf(f, a...) }
func (l *logger) Infof(f string, a ...any)  { l.z.Infof(f, a...) }
func (l *logger) Errorf(f string, a ...any) { l.z.Errorf(f, a...) }
