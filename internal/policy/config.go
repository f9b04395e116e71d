package policy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Limits of the numeric variables.
const (
	// MinRingSize is the smallest OSF_RING_SIZE, in bytes.
	MinRingSize = 4 << 10
	// MaxRingSize is the largest OSF_RING_SIZE, in bytes.
	MaxRingSize = 64 << 20
	// MaxSpinUS is the largest OSF_SPIN_US and OSF_POLL_SPIN_US.
	MaxSpinUS = 1000000
	// MaxConnectTimeoutMS is the largest OSF_CONNECT_TIMEOUT_MS.
	MaxConnectTimeoutMS = 60000
)

// ErrMalformed is wrapped by every *ParseError: a configuration variable has
// a value osf does not accept.
var ErrMalformed = errors.New("policy: malformed variable")

// ParseError reports a malformed configuration variable.
type ParseError struct {
	// Var is the variable's name, such as "OSF_ROUTES".
	Var string
	// Text is the smallest meaningful piece of the value that is wrong: the
	// whole value, or for OSF_ROUTES the text of the offending rule.
	Text string
	// Rule is the 1-based number of the offending rule for OSF_ROUTES, and
	// 0 for other variables.
	Rule int
	// Reason says what is wrong with Text.
	Reason string
	// Where is "path:line" of the configuration file line the value came
	// from, or "" when it came from the environment.
	Where string
}

// Error returns the message osf prints for e, for example
//
//	osf: OSF_ROUTES="offload bogus 1.2.3.4:99999" (rule 2): port 99999 out of range 1-65535
//
// Text is quoted as by strconv.Quote, which leaves printable text unchanged.
func (e *ParseError) Error() string {
	s := "osf: "
	if e.Where != "" {
		s += e.Where + ": "
	}
	s += e.Var + "=" + strconv.Quote(e.Text)
	if e.Rule > 0 {
		s += " (rule " + strconv.Itoa(e.Rule) + ")"
	}
	return s + ": " + e.Reason
}

// Unwrap returns ErrMalformed.
func (e *ParseError) Unwrap() error { return ErrMalformed }

// Config is osf's configuration, taken from the OSF_* variables.
type Config struct {
	// Routes are the route rules in order; the implicit final kernel rule is
	// not included.
	Routes []Rule
	// DefaultRoutes is true when OSF_ROUTES was unset and Routes holds the
	// default rules.
	DefaultRoutes bool
	// Transport is OSF_TRANSPORT.
	Transport TransportMode
	// Strict is OSF_STRICT: a connection that a rule offloads fails instead
	// of falling back to kernel TCP (see Reason.Fallback).
	Strict bool
	// LogLevel is OSF_LOG_LEVEL.
	LogLevel LogLevel
	// LogFile is OSF_LOG_FILE; "" means standard error.
	LogFile string
	// RingSize is OSF_RING_SIZE: bytes per ring direction, a power of two
	// from MinRingSize to MaxRingSize.
	RingSize int
	// Spin is OSF_SPIN_US: how long a blocking call spins in user space
	// before it sleeps.
	Spin time.Duration
	// PollSpin is OSF_POLL_SPIN_US: how long poll, select, epoll and a
	// blocking accept on an offloaded listener spin before they sleep.
	PollSpin time.Duration
	// ConnectTimeout is OSF_CONNECT_TIMEOUT_MS: how long an offload
	// handshake may take.
	ConnectTimeout time.Duration
	// RDMAPoll is OSF_RDMA_POLL_US: how long the RDMA progress engine keeps
	// polling after its last piece of work before it sleeps.
	RDMAPoll time.Duration
	// RDMARxCaller is OSF_RDMA_RX=caller or lend (the default): an application's
	// thread that waits for data on an RDMA connection takes the
	// connection's completions and posts its credits itself
	// (docs/DESIGN.md D4); with engine the progress engine does.
	RDMARxCaller bool
	// RDMARxLend is OSF_RDMA_RX=lend, the default: caller, and the last waiter to
	// leave a connection's completion channel lends it to the next wait
	// instead of giving it back to the engine (docs/DESIGN.md D4).
	RDMARxLend bool
	// RDMALinks is OSF_RDMA_LINKS: a connection to a listener this process
	// already reaches over RDMA is a stream on that link, not a
	// connection of its own (docs/RDMA.md, "Links"; the software stand-in
	// only so far).
	RDMALinks bool
	// GatewayKey is OSF_GATEWAY_KEY: the file holding the key that
	// authenticates this node to its gateways ("" means none).
	GatewayKey string
	// GatewayTimeout is OSF_GATEWAY_TIMEOUT_MS: how long a gateway may take
	// to connect to a destination before connect fails with ETIMEDOUT.
	GatewayTimeout time.Duration
	// DebugLoadCore is OSF_DEBUG_LOAD_CORE: load the core at start-up.
	DebugLoadCore bool
	// DebugRDMASim is OSF_DEBUG_RDMA_SIM: the RDMA transport runs on a
	// software stand-in for devices between processes of this host
	// (sdp/rdma.Sim), to test the RDMA engine on machines without one.
	// Never for production.
	DebugRDMASim bool

	// origin says which values came from the configuration file.
	origin *origin
}

// ConfFile returns the path of the configuration file that was read, or ""
// when none was.
func (c *Config) ConfFile() string {
	if c.origin == nil {
		return ""
	}
	return c.origin.path
}

// Where returns "path:line" of the configuration file line that set
// variable name (for OSF_ROUTES, the line of rule number rule, counting from
// 1), or "" when the value did not come from the file.
func (c *Config) Where(name string, rule int) string {
	return c.origin.where(name, rule)
}

// defaultRoutes is the text of the rules used when OSF_ROUTES is unset.
const defaultRoutes = "kernel both * *:53; offload both * local"

var defaultRules = mustParseRoutes(defaultRoutes)

// implicitRule ends every rule list.
var implicitRule = mustParseRoutes("kernel both * *")[0]

// Default returns the configuration used when no OSF_* variable is set.
func Default() *Config {
	return &Config{
		Routes:         slices.Clone(defaultRules),
		DefaultRoutes:  true,
		Transport:      Auto,
		LogLevel:       LogError,
		RingSize:       1 << 20,
		Spin:           20 * time.Microsecond,
		PollSpin:       20 * time.Microsecond,
		ConnectTimeout: 1000 * time.Millisecond,
		RDMAPoll:       20 * time.Microsecond,
		RDMARxCaller:   true,
		RDMARxLend:     true,
		GatewayTimeout: 20 * time.Second,
	}
}

// Var describes one configuration variable.
type Var struct {
	// Name is the variable's name, such as "OSF_RING_SIZE".
	Name string
	// Default is the value that applies when the variable is unset; "" for
	// OSF_LOG_FILE means standard error.
	Default string
	// Doc is a one-line description.
	Doc string
}

// variable is a Var with its parser; a nil parse accepts any value.
type variable struct {
	Var
	parse func(c *Config, value string) error
}

// Variable names used in more than one place.
const (
	varRoutes = "OSF_ROUTES"
	varStrict = "OSF_STRICT"
)

var variables = []variable{
	{Var{varRoutes, defaultRoutes, "route rules: action [role [program]] target, separated by ';' or newlines"}, parseRoutesVar},
	{Var{"OSF_TRANSPORT", "auto", "transports osf may use: auto, shm, rdma or kernel"}, parseTransport},
	{Var{varStrict, "0", "1 makes a connection fail instead of falling back to kernel TCP"}, boolVar(func(c *Config) *bool { return &c.Strict })},
	{Var{"OSF_LOG_LEVEL", "error", "log level: debug, info, warn or error"}, parseLogLevel},
	{Var{"OSF_LOG_FILE", "", "log file; unset or empty means standard error"}, func(c *Config, v string) error { c.LogFile = v; return nil }},
	{Var{"OSF_RING_SIZE", "1M", "bytes per ring direction: a power of two from 4K to 64M"}, parseRingSize},
	{Var{"OSF_SPIN_US", "20", "microseconds a blocking call spins before it sleeps, 0-1000000"}, spinVar(func(c *Config) *time.Duration { return &c.Spin })},
	{Var{"OSF_POLL_SPIN_US", "20", "microseconds poll, select, epoll and a blocking accept on an offloaded listener spin before they sleep (a thread whose waits end soon after they sleep spins up to 10 times longer), 0-1000000"}, spinVar(func(c *Config) *time.Duration { return &c.PollSpin })},
	{Var{"OSF_RDMA_POLL_US", "20", "microseconds the RDMA progress engine polls before it sleeps, 0-1000000"}, spinVar(func(c *Config) *time.Duration { return &c.RDMAPoll })},
	{Var{"OSF_RDMA_RX", "lend", "who takes an RDMA connection's completions: lend (the waiting application thread — a blocking reader, a poll, select or epoll wait — which sleeps on its connection's completion channel, the engine for the rest; between waits the channel is lent to the next wait instead of going back to the engine), caller (the same without lending) or engine (the progress engine, all of them)"}, parseRDMARx},
	{Var{"OSF_RDMA_LINKS", "0", "1 carries a connection to a listener process this process already reaches over RDMA as a stream on that link (one message, no handshake of its own, rings from the link's pool; the engine's path for those connections: faster set-up, slower ping-pong and streams: docs/RDMA.md, Links)"}, boolVar(func(c *Config) *bool { return &c.RDMALinks })},
	{Var{"OSF_CONNECT_TIMEOUT_MS", "1000", "milliseconds an offload handshake may take, 1-60000"}, parseConnectTimeout},
	{Var{"OSF_GATEWAY_KEY", "", "file holding the key (mode 0600) that authenticates this node to its gateways"}, func(c *Config, v string) error { c.GatewayKey = v; return nil }},
	{Var{"OSF_GATEWAY_TIMEOUT_MS", "20000", "milliseconds a gateway may take to connect to a destination, 1-600000"}, parseGatewayTimeout},
	{Var{"OSF_GO", "0", "1 offloads the sockets of Go programs (Go 1.26, amd64, dynamically linked): their system calls reach osf's hooks"}, nil},
	{Var{"OSF_SHM_POOL", "1", "1 carves shm connections' rings from a region per client process and listener: no memfd, map or unmap per connection after the first; 0 gives each connection a segment of its own"}, nil},
	{Var{"OSF_SHM_DEFER", "1", "1: a client's connections to a listener with TCP_DEFER_ACCEPT (apache2's default) reach the server with their first byte, as TCP's (after the first, whose server tells the client that its listener defers); 0: at their connect"}, nil},
	{Var{"OSF_SHM_KFD", "0", "1 keeps an shm connection's fd the kernel's own TCP socket (set-up, FIN, ports, TIME_WAIT, ss are the kernel's) with the data in the rings of a region's slot; implies OSF_SHM_POOL=1 (off by default while it is new)"}, nil},
	{Var{"OSF_SHM_EFD", "1", "1 wakes the writers of a region's slots on the region's one eventfd instead of a writers' socket pair per connection: one hidden fd less per connection on each end (with OSF_SHM_KFD=1 too); 0 gives each connection its writers' socket pair"}, nil},
	{Var{"OSF_REAP_BLOCKING", "1", "0 starts no osf-reaper thread: only connections that a poll, select or epoll wait watches give their idle pages back"}, nil},
	{Var{"OSF_DEBUG_TRIM_STOP", "0", "1 stops a process with SIGSTOP right before its first trim punch (tests)"}, nil},
	{Var{"OSF_DEBUG_REAP_SLOW", "0", "1 makes the osf-reaper thread hold each connection it looks at 5 ms before it reads it (tests)"}, nil},
	{Var{"OSF_DEBUG_LOAD_CORE", "0", "1 loads the osf core at start-up (debugging)"}, boolVar(func(c *Config) *bool { return &c.DebugLoadCore })},
	{Var{"OSF_DEBUG_CORE_AT_SETUP", "0", "1 loads the osf core at a process's first listen, connect or accept of an offloadable socket, where nothing else needs it (tests)"}, nil},
	{Var{"OSF_DEBUG_RDMA_WATCH_MS", "0", "N > 0 makes each RDMA progress engine log, every N milliseconds at debug, the connections that made no progress with work pending (debugging)"}, nil},
	{Var{"OSF_DEBUG_RDMA_SIM", "0", "1 replaces RDMA devices by a software stand-in between processes of this host (tests)"}, boolVar(func(c *Config) *bool { return &c.DebugRDMASim })},
	{Var{varConf, DefaultConfFile, "configuration file; empty means none (the environment overrides the file)"}, nil},
	{Var{"OSF_LIB", "", "libosf.so for osfrun to preload; default: found next to osfrun"}, nil},
	{Var{"OSF_FDTABLE", "", "state, set by osf itself across exec: the fd number of the inherited fd table"}, nil},
	{Var{varOrigin, "", "state, set by osf itself: the configuration file read and the lines its values came from"}, nil},
}

// Vars returns every variable osf reads, in the order Parse checks them.
func Vars() []Var {
	vs := make([]Var, len(variables))
	for i, v := range variables {
		vs[i] = v.Var
	}
	return vs
}

// Parse builds a Config from env, a list of "KEY=VALUE" strings such as
// os.Environ returns. Only OSF_* variables matter; unset ones take their
// defaults, and unknown ones are ignored (see Unknown). When a name occurs
// more than once the first occurrence counts, as with getenv.
//
// A malformed variable gives a *ParseError, which wraps ErrMalformed;
// variables are checked in the order of Vars and the first error is
// returned. Parse never panics.
func Parse(env []string) (*Config, error) {
	values := osfValues(env)
	c := Default()
	if v, ok := values[varOrigin]; ok {
		c.origin = parseOrigin(v)
	}
	for _, v := range variables {
		value, ok := values[v.Name]
		if !ok || v.parse == nil {
			continue
		}
		if err := v.parse(c, value); err != nil {
			pe, ok := errors.AsType[*ParseError](err)
			if !ok {
				pe = &ParseError{Var: v.Name, Text: value, Reason: err.Error()}
			}
			pe.Where = c.origin.where(v.Name, pe.Rule)
			return nil, pe
		}
	}
	return c, nil
}

// Unknown returns the names of the OSF_* variables in env that osf does not
// know, in the order they appear and without repeats. They are not errors,
// but most likely typos.
func Unknown(env []string) []string {
	var unknown []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "OSF_") || known(name) || slices.Contains(unknown, name) {
			continue
		}
		unknown = append(unknown, name)
	}
	return unknown
}

// known reports whether name is a variable osf reads.
func known(name string) bool {
	for _, v := range variables {
		if v.Name == name {
			return true
		}
	}
	return false
}

// osfValues returns the OSF_* variables of env; the first occurrence of a
// name wins.
func osfValues(env []string) map[string]string {
	values := make(map[string]string)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "OSF_") {
			continue
		}
		name, value, _ := strings.Cut(kv, "=")
		if _, dup := values[name]; !dup {
			values[name] = value
		}
	}
	return values
}

func parseRoutesVar(c *Config, v string) error {
	rules, err := ParseRoutes(v)
	if err != nil {
		return err
	}
	c.Routes, c.DefaultRoutes = rules, false
	return nil
}

func parseTransport(c *Config, v string) error {
	for m, name := range modeNames {
		if strings.EqualFold(v, name) {
			c.Transport = TransportMode(m)
			return nil
		}
	}
	return errors.New("want auto, shm, rdma or kernel")
}

func parseRDMARx(c *Config, v string) error {
	switch v {
	case "engine", "caller", "lend":
		c.RDMARxCaller = v != "engine"
		c.RDMARxLend = v == "lend"
		return nil
	}
	return errors.New("want engine, caller or lend")
}

func parseLogLevel(c *Config, v string) error {
	for _, l := range [...]LogLevel{LogDebug, LogInfo, LogWarn, LogError} {
		if strings.EqualFold(v, l.String()) {
			c.LogLevel = l
			return nil
		}
	}
	return errors.New("want debug, info, warn or error")
}

// boolVar returns a parser that accepts "0" and "1" into the field that
// field selects.
func boolVar(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		switch v {
		case "0":
			*field(c) = false
		case "1":
			*field(c) = true
		default:
			return errors.New("want 0 or 1")
		}
		return nil
	}
}

// spinVar returns a parser for a microsecond count from 0 to MaxSpinUS into
// the field that field selects.
func spinVar(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := parseUintVar(v, 0, MaxSpinUS)
		if err != nil {
			return err
		}
		*field(c) = time.Duration(n) * time.Microsecond
		return nil
	}
}

// msVar returns a parser for a millisecond count from 1 to max into the
// field that field selects.
func msVar(max uint64, field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := parseUintVar(v, 1, max)
		if err != nil {
			return err
		}
		*field(c) = time.Duration(n) * time.Millisecond
		return nil
	}
}

var parseConnectTimeout = msVar(MaxConnectTimeoutMS, func(c *Config) *time.Duration { return &c.ConnectTimeout })

// MaxGatewayTimeoutMS is the largest OSF_GATEWAY_TIMEOUT_MS.
const MaxGatewayTimeoutMS = 600000

var parseGatewayTimeout = msVar(MaxGatewayTimeoutMS, func(c *Config) *time.Duration { return &c.GatewayTimeout })

func parseRingSize(c *Config, v string) error {
	digits, unit := v, uint64(1)
	if n := len(v); n > 0 {
		switch v[n-1] {
		case 'K', 'k':
			digits, unit = v[:n-1], 1<<10
		case 'M', 'm':
			digits, unit = v[:n-1], 1<<20
		}
	}
	n, err := parseUint(digits, 0, MaxRingSize)
	if errors.Is(err, errDigits) {
		return errors.New("want decimal digits with an optional K or M suffix")
	}
	n *= unit
	if err != nil || n < MinRingSize || n > MaxRingSize {
		return errors.New("out of range 4K-64M")
	}
	if n&(n-1) != 0 {
		return errors.New("not a power of two")
	}
	c.RingSize = int(n)
	return nil
}

// Errors of parseUint.
var (
	errDigits = errors.New("want decimal digits")
	errRange  = errors.New("out of range")
)

// parseUint parses s by the rule the C data path shares: one or more decimal
// digits, no sign and no blanks, with a value from lo to hi. It returns
// errDigits or errRange; hi must be below 1<<60.
func parseUint(s string, lo, hi uint64) (uint64, error) {
	if s == "" {
		return 0, errDigits
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, errDigits
		}
		if n <= hi {
			n = n*10 + uint64(c-'0')
		}
	}
	if n < lo || n > hi {
		return 0, errRange
	}
	return n, nil
}

// parseUintVar is parseUint with the error stating the range.
func parseUintVar(s string, lo, hi uint64) (uint64, error) {
	n, err := parseUint(s, lo, hi)
	if errors.Is(err, errRange) {
		return 0, fmt.Errorf("out of range %d-%d", lo, hi)
	}
	return n, err
}

// Summary returns c on one line for logs, for example
//
//	routes="kernel both * *:53; offload both * local" (default) transport=auto strict=0 ...
func (c *Config) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "routes=%q", c.routesText())
	if c.DefaultRoutes {
		b.WriteString(" (default)")
	}
	logFile := "stderr"
	if c.LogFile != "" {
		logFile = strconv.Quote(c.LogFile)
	}
	fmt.Fprintf(&b, " transport=%s strict=%s log-level=%s log-file=%s ring-size=%s spin-us=%d poll-spin-us=%d rdma-poll-us=%d rdma-rx=%s connect-timeout-ms=%d debug-load-core=%s debug-rdma-sim=%s",
		c.Transport, flag01(c.Strict), c.LogLevel, logFile, formatSize(c.RingSize),
		c.Spin.Microseconds(), c.PollSpin.Microseconds(), c.RDMAPoll.Microseconds(), rdmaRxName(c.RDMARxCaller, c.RDMARxLend), c.ConnectTimeout.Milliseconds(),
		flag01(c.DebugLoadCore), flag01(c.DebugRDMASim))
	return b.String()
}

func rdmaRxName(caller, lend bool) string {
	if lend {
		return "lend"
	}
	if caller {
		return "caller"
	}
	return "engine"
}

// routesText returns the texts of c's rules joined by "; ".
func (c *Config) routesText() string {
	texts := make([]string, len(c.Routes))
	for i, r := range c.Routes {
		texts[i] = r.Text
	}
	return strings.Join(texts, "; ")
}

// flag01 returns "1" for true and "0" for false.
func flag01(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// formatSize returns n in OSF_RING_SIZE syntax, using a K or M suffix when n
// is a multiple of it.
func formatSize(n int) string {
	switch {
	case n != 0 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "M"
	case n != 0 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "K"
	}
	return strconv.Itoa(n)
}
